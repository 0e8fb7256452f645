// EventLog: where request threads record events, without any lock.
//
// Each recording thread owns one single-producer / single-consumer ring per
// log (found by the thread's small process-wide index, which a new thread
// reuses after a thread exits). Appending writes the event into the ring and
// publishes it with one release store of the ring's head; nothing is shared
// for writing between recording threads. A thread's first event on a log
// allocates its ring (once).
//
// A full ring does not block: Append returns kFull and the caller decides
// (AdaptiveGearRuntime): with a worker thread it DROPS the event and counts
// it (CountDropped); without one it drains the rings itself (deterministic,
// nothing dropped) and appends again.
//
// Event layout, `stride` int64 words per event:
//   [time (double bits), count, raw_0, gear_0, raw_1, gear_1, ...]
//
// Thread-safety: Append/AppendPlan/CountDropped from any thread, lock-free
// (a ring has one producer: the thread that owns its index). Drain is the
// single consumer: callers serialize it (the runtime holds its stats mutex).
// appended()/dropped() from any thread (sums of relaxed counters).
#ifndef GEARBOX_SRC_STATS_EVENT_LOG_H_
#define GEARBOX_SRC_STATS_EVENT_LOG_H_

#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

#include "gearbox/plan.h"

namespace gearbox::internal {

// Accessors of one event's words (layout above).
struct EventWords {
  static double Time(const int64_t* e) { return std::bit_cast<double>(e[0]); }
  static int64_t Count(const int64_t* e) { return e[1]; }
  static int64_t Raw(const int64_t* e, int d) { return e[2 + 2 * d]; }
  static int64_t Gear(const int64_t* e, int d) { return e[3 + 2 * d]; }
};

// A small index per live thread, reused once its thread exits (lock-free).
int ThisThreadIndex() noexcept;

class EventLog {
 public:
  // Threads with an index at or above this drop every event (counted).
  static constexpr int kMaxRings = 1024;

  enum class AppendResult {
    kAppended,
    kHalfFull,  // appended, and this event filled the ring to half: drain soon
    kFull,      // not appended: the ring is full
  };

  // `ring_events` is rounded up to a power of two.
  EventLog(int num_dimensions, size_t ring_events);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends one event with explicit raw sizes and gears per dimension.
  AppendResult Append(double time, int64_t count, const int64_t* raw, const int64_t* gear) noexcept;
  // Appends the event of variant group `group` of `plan` (count = group size;
  // DimensionPlan::event_raw / event_gear).
  AppendResult AppendPlanGroup(const Plan& plan, int group, double time) noexcept;
  // Counts events a caller dropped because the ring was full.
  void CountDropped(uint64_t events) noexcept;

  // Hands every event appended so far to fold(const int64_t* event), oldest
  // first per ring, and frees their space. Single consumer (see above).
  template <typename Fold>
  uint64_t Drain(Fold&& fold);

  // Events ever appended / dropped (all threads).
  uint64_t appended() const noexcept;
  uint64_t dropped() const noexcept;
  size_t ring_capacity() const { return capacity_; }

 private:
  struct alignas(64) Ring {
    Ring(size_t words) : storage(new int64_t[words]) {}
    // Producer side.
    std::atomic<uint64_t> head{0};     // events published (release)
    std::atomic<uint64_t> dropped{0};  // written by the owner only
    uint64_t cached_tail = 0;          // producer's last view of tail
    std::unique_ptr<int64_t[]> storage;
    // Consumer side, on its own line.
    alignas(64) std::atomic<uint64_t> tail{0};  // events consumed (release)
  };

  // The calling thread's ring (created on first use), or null past kMaxRings.
  // The ring of the log the thread last used comes from a thread-local
  // cache (keyed by the log's process-unique id, so a destroyed log's ring
  // is never returned); any other from OwnRingSlow.
  Ring* OwnRing() noexcept;
  [[gnu::noinline]] Ring* OwnRingSlow() noexcept;
  // AppendPlanGroup for a plan of several variant groups (off the common path).
  [[gnu::noinline]] AppendResult AppendSplitPlanGroup(Ring* ring, const Plan& plan, int group,
                                                      double time) noexcept;
  // Space for one event in `ring`, or null when full.
  int64_t* Reserve(Ring* ring) noexcept;
  AppendResult Publish(Ring* ring) noexcept;

  struct RingCache {
    uint64_t log_id = 0;  // 0: none (ids start at 1)
    Ring* ring = nullptr;
  };
  static thread_local constinit RingCache ring_cache_;

  const uint64_t id_;  // process-unique, never reused
  const int num_dimensions_;
  const int stride_;
  const size_t capacity_;  // events per ring, a power of two
  std::atomic<Ring*> rings_[kMaxRings] = {};
  std::atomic<int> ring_limit_{0};             // 1 + the highest index with a ring
  std::atomic<uint64_t> overflow_dropped_{0};  // threads past kMaxRings
};

inline EventLog::Ring* EventLog::OwnRing() noexcept {
  const RingCache& cache = ring_cache_;
  if (cache.log_id == id_) return cache.ring;
  return OwnRingSlow();
}

inline EventLog::AppendResult EventLog::AppendPlanGroup(const Plan& plan, int group_index,
                                                        double time) noexcept {
  Ring* ring = OwnRing();
  if (plan.num_variant_groups() > 1) return AppendSplitPlanGroup(ring, plan, group_index, time);
  // One group, the common case: every dimension's group 0, every variant.
  int64_t* e = ring != nullptr ? Reserve(ring) : nullptr;
  if (e == nullptr) return AppendResult::kFull;
  e[0] = std::bit_cast<int64_t>(time);
  e[1] = plan.num_variants();
  for (int d = 0; d < num_dimensions_; ++d) {
    const DimensionPlan& dp = plan.dimension(d);
    e[2 + 2 * d] = dp.event_raw(0);
    e[3 + 2 * d] = dp.event_gear(0);
  }
  return Publish(ring);
}

inline int64_t* EventLog::Reserve(Ring* ring) noexcept {
  const uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (head - ring->cached_tail >= capacity_) {
    ring->cached_tail = ring->tail.load(std::memory_order_acquire);
    if (head - ring->cached_tail >= capacity_) return nullptr;
  }
  return &ring->storage[static_cast<size_t>(head & (capacity_ - 1)) * static_cast<size_t>(stride_)];
}

inline EventLog::AppendResult EventLog::Publish(Ring* ring) noexcept {
  const uint64_t head = ring->head.load(std::memory_order_relaxed) + 1;
  ring->head.store(head, std::memory_order_release);
  return head - ring->cached_tail == capacity_ / 2 ? AppendResult::kHalfFull
                                                   : AppendResult::kAppended;
}

template <typename Fold>
uint64_t EventLog::Drain(Fold&& fold) {
  uint64_t drained = 0;
  const int limit = ring_limit_.load(std::memory_order_acquire);
  for (int i = 0; i < limit; ++i) {
    Ring* ring = rings_[i].load(std::memory_order_acquire);
    if (ring == nullptr) continue;
    const uint64_t head = ring->head.load(std::memory_order_acquire);
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    for (; tail != head; ++tail) {
      fold(static_cast<const int64_t*>(&ring->storage[static_cast<size_t>(tail & (capacity_ - 1)) *
                                                      static_cast<size_t>(stride_)]));
      ++drained;
    }
    ring->tail.store(head, std::memory_order_release);
  }
  return drained;
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_EVENT_LOG_H_
