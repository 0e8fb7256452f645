// EventLog: where request threads record events without a global lock.
//
// Events are appended to per-thread-ish shards (a thread always uses the
// same shard; threads share one only when there are more threads than
// shards). Each shard has its own spin lock, uncontended in the common case
// (held for a few nanoseconds), and a fixed-size buffer. A full buffer is handed off (the shard
// takes an empty one) to be folded into the window statistics by whoever
// drains: the worker thread when one runs, else the recording thread itself
// (the runtime decides; see AdaptiveGearRuntime). Nothing is ever dropped.
//
// Buffer layout, `stride` int64 words per event:
//   [time (double bits), count, raw_0, gear_0, raw_1, gear_1, ...]
//
// Lock order: shard.mu -> handoff_mu_. Drain callers may hold an outer lock
// (the runtime's stats mutex) before both.
#ifndef GEARBOX_SRC_STATS_EVENT_LOG_H_
#define GEARBOX_SRC_STATS_EVENT_LOG_H_

#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "gearbox/mutex.h"
#include "gearbox/plan.h"

namespace gearbox::internal {

class EventBuffer {
 public:
  EventBuffer(int stride, size_t capacity_events)
      : stride_(stride), capacity_(capacity_events), words_(stride * capacity_events) {}
  bool full() const { return used_ == capacity_; }
  bool empty() const { return used_ == 0; }
  size_t size() const { return used_; }
  int64_t* Next() { return &words_[stride_ * used_++]; }
  const int64_t* event(size_t i) const { return &words_[stride_ * i]; }
  void Clear() { used_ = 0; }

  static double Time(const int64_t* e) { return std::bit_cast<double>(e[0]); }
  static int64_t Count(const int64_t* e) { return e[1]; }
  static int64_t Raw(const int64_t* e, int d) { return e[2 + 2 * d]; }
  static int64_t Gear(const int64_t* e, int d) { return e[3 + 2 * d]; }

 private:
  const int stride_;
  const size_t capacity_;
  size_t used_ = 0;
  std::vector<int64_t> words_;
};

class EventLog {
 public:
  static constexpr int kShards = 32;

  EventLog(int num_dimensions, size_t buffer_events);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Records one event per variant group of `plan` (count = group size).
  // Returns the number of full buffers waiting to be folded (0 when this
  // call filled none).
  size_t AppendPlan(const Plan& plan, double time) noexcept;
  // Records one event with explicit raw sizes and gears per dimension.
  size_t Append(double time, int64_t count, const int64_t* raw, const int64_t* gear) noexcept;

  // Hands every event recorded so far (full and partial buffers) to
  // fold(const EventBuffer&), then recycles the buffers. `only_full` leaves
  // partial buffers in their shards.
  template <typename Fold>
  void Drain(Fold&& fold, bool only_full);

  // Events ever appended (sums the shards).
  uint64_t appended() const;
  size_t pending_full() const;
  size_t buffers_allocated() const;

 private:
  struct alignas(64) Shard {
    SpinLock mu;
    EventBuffer* active ABSL_GUARDED_BY(mu) = nullptr;
    uint64_t appended ABSL_GUARDED_BY(mu) = 0;  // events ever appended here
  };

  static int ThreadShard() noexcept;
  EventBuffer* TakeEmpty() ABSL_LOCKS_EXCLUDED(handoff_mu_);
  // Hands a full buffer off; returns the number waiting.
  size_t HandOff(EventBuffer* buffer) ABSL_LOCKS_EXCLUDED(handoff_mu_);
  void Recycle(std::vector<EventBuffer*>& buffers) ABSL_LOCKS_EXCLUDED(handoff_mu_);

  const int num_dimensions_;
  const int stride_;
  const size_t buffer_events_;
  mutable Shard shards_[kShards];

  mutable Mutex handoff_mu_;
  std::vector<EventBuffer*> full_ ABSL_GUARDED_BY(handoff_mu_);
  std::vector<EventBuffer*> empty_ ABSL_GUARDED_BY(handoff_mu_);
  std::vector<std::unique_ptr<EventBuffer>> owned_ ABSL_GUARDED_BY(handoff_mu_);
};

template <typename Fold>
void EventLog::Drain(Fold&& fold, bool only_full) {
  std::vector<EventBuffer*> buffers;
  if (!only_full) {
    for (Shard& shard : shards_) {
      SpinLockHolder lock(&shard.mu);
      if (shard.active != nullptr && !shard.active->empty()) {
        buffers.push_back(shard.active);
        shard.active = nullptr;
      }
    }
  }
  {
    MutexLock lock(&handoff_mu_);
    buffers.insert(buffers.end(), full_.begin(), full_.end());
    full_.clear();
  }
  for (EventBuffer* b : buffers) fold(static_cast<const EventBuffer&>(*b));
  Recycle(buffers);
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_EVENT_LOG_H_
