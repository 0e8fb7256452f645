#include "src/stats/event_log.h"

#include <algorithm>
#include <bit>

namespace gearbox::internal {
namespace {

// Process-wide thread indices: a push-only list of nodes, each claimed by
// at most one live thread (CAS) and returned when that thread exits.
struct IndexNode {
  int index = 0;
  std::atomic<bool> claimed{false};
  IndexNode* next = nullptr;  // immutable once published
};

std::atomic<IndexNode*> g_index_head{nullptr};
std::atomic<int> g_index_count{0};

IndexNode* ClaimIndex() {
  for (IndexNode* n = g_index_head.load(std::memory_order_acquire); n != nullptr; n = n->next) {
    bool expected = false;
    if (!n->claimed.load(std::memory_order_relaxed) &&
        n->claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      return n;
    }
  }
  auto* n = new IndexNode();  // never freed: bounded by the peak number of threads
  n->index = g_index_count.fetch_add(1, std::memory_order_relaxed);
  n->claimed.store(true, std::memory_order_relaxed);
  IndexNode* head = g_index_head.load(std::memory_order_relaxed);
  do {
    n->next = head;
  } while (!g_index_head.compare_exchange_weak(head, n, std::memory_order_release,
                                               std::memory_order_relaxed));
  return n;
}

// Returns the index when the thread exits; the release pairs with the next
// claimer's acquire, so the next owner of the index sees every ring write.
struct ThreadIndexHolder {
  IndexNode* node = ClaimIndex();
  ~ThreadIndexHolder() { node->claimed.store(false, std::memory_order_release); }
};

}  // namespace

int ThisThreadIndex() noexcept {
  thread_local int index = -1;  // trivial: no guard on the fast path
  if (index < 0) {
    thread_local ThreadIndexHolder holder;
    index = holder.node->index;
  }
  return index;
}

namespace {

// Ids of EventLogs: a thread's ring cache names its log by id, not address.
std::atomic<uint64_t> g_next_log_id{1};

}  // namespace

thread_local constinit EventLog::RingCache EventLog::ring_cache_{};

EventLog::EventLog(int num_dimensions, size_t ring_events)
    : id_(g_next_log_id.fetch_add(1, std::memory_order_relaxed)),
      num_dimensions_(num_dimensions),
      stride_(2 + 2 * num_dimensions),
      capacity_(std::bit_ceil(std::max<size_t>(ring_events, 2))) {}

EventLog::~EventLog() {
  for (auto& r : rings_) delete r.load(std::memory_order_acquire);
}

EventLog::Ring* EventLog::OwnRingSlow() noexcept {
  const int index = ThisThreadIndex();
  if (index >= kMaxRings) {
    ring_cache_ = {id_, nullptr};  // a thread keeps its index while it lives
    return nullptr;
  }
  Ring* ring = rings_[index].load(std::memory_order_acquire);
  if (ring != nullptr) {
    ring_cache_ = {id_, ring};
    return ring;
  }
  // Only the thread holding `index` creates its ring: no race on the slot.
  ring = new Ring(capacity_ * static_cast<size_t>(stride_));
  rings_[index].store(ring, std::memory_order_release);
  int limit = ring_limit_.load(std::memory_order_relaxed);
  while (limit < index + 1 &&
         !ring_limit_.compare_exchange_weak(limit, index + 1, std::memory_order_release,
                                            std::memory_order_relaxed)) {
  }
  ring_cache_ = {id_, ring};
  return ring;
}

EventLog::AppendResult EventLog::Append(double time, int64_t count, const int64_t* raw,
                                        const int64_t* gear) noexcept {
  Ring* ring = OwnRing();
  int64_t* e = ring != nullptr ? Reserve(ring) : nullptr;
  if (e == nullptr) return AppendResult::kFull;
  e[0] = std::bit_cast<int64_t>(time);
  e[1] = count;
  for (int d = 0; d < num_dimensions_; ++d) {
    e[2 + 2 * d] = raw[d];
    e[3 + 2 * d] = gear[d];
  }
  return Publish(ring);
}

EventLog::AppendResult EventLog::AppendSplitPlanGroup(Ring* ring, const Plan& plan, int group_index,
                                                      double time) noexcept {
  int64_t* e = ring != nullptr ? Reserve(ring) : nullptr;
  if (e == nullptr) return AppendResult::kFull;
  // The event names the group of each dimension (its raw size and cell
  // gear) and how many variants.
  const VariantGroup vg = plan.variant_group(group_index);
  e[0] = std::bit_cast<int64_t>(time);
  e[1] = vg.count;
  for (int d = 0; d < num_dimensions_; ++d) {
    const DimensionPlan& dp = plan.dimension(d);
    e[2 + 2 * d] = dp.event_raw(vg.group[d]);
    e[3 + 2 * d] = dp.event_gear(vg.group[d]);
  }
  return Publish(ring);
}

void EventLog::CountDropped(uint64_t events) noexcept {
  Ring* ring = ring_cache_.log_id == id_ ? ring_cache_.ring : nullptr;
  if (ring == nullptr) {  // not cached (or past kMaxRings): never creates a ring
    const int index = ThisThreadIndex();
    ring = index < kMaxRings ? rings_[index].load(std::memory_order_acquire) : nullptr;
  }
  if (ring == nullptr) {
    overflow_dropped_.fetch_add(events, std::memory_order_relaxed);
    return;
  }
  // Only the owner writes its ring's counter: a plain load + store.
  ring->dropped.store(ring->dropped.load(std::memory_order_relaxed) + events,
                      std::memory_order_relaxed);
}

uint64_t EventLog::appended() const noexcept {
  uint64_t total = 0;
  const int limit = ring_limit_.load(std::memory_order_acquire);
  for (int i = 0; i < limit; ++i) {
    if (const Ring* ring = rings_[i].load(std::memory_order_acquire)) {
      total += ring->head.load(std::memory_order_acquire);
    }
  }
  return total;
}

uint64_t EventLog::dropped() const noexcept {
  uint64_t total = overflow_dropped_.load(std::memory_order_relaxed);
  const int limit = ring_limit_.load(std::memory_order_acquire);
  for (int i = 0; i < limit; ++i) {
    if (const Ring* ring = rings_[i].load(std::memory_order_acquire)) {
      total += ring->dropped.load(std::memory_order_relaxed);
    }
  }
  return total;
}

}  // namespace gearbox::internal
