#include "src/stats/event_log.h"

#include <algorithm>
#include <atomic>

namespace gearbox::internal {

EventLog::EventLog(int num_dimensions, size_t buffer_events)
    : num_dimensions_(num_dimensions),
      stride_(2 + 2 * num_dimensions),
      buffer_events_(buffer_events) {}

EventLog::~EventLog() = default;

int EventLog::ThreadShard() noexcept {
  static std::atomic<unsigned> next{0};
  thread_local const int shard =
      static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kShards);
  return shard;
}

EventBuffer* EventLog::TakeEmpty() {
  MutexLock lock(&handoff_mu_);
  if (!empty_.empty()) {
    EventBuffer* b = empty_.back();
    empty_.pop_back();
    return b;
  }
  owned_.push_back(std::make_unique<EventBuffer>(stride_, buffer_events_));
  return owned_.back().get();
}

size_t EventLog::HandOff(EventBuffer* buffer) {
  MutexLock lock(&handoff_mu_);
  full_.push_back(buffer);
  return full_.size();
}

void EventLog::Recycle(std::vector<EventBuffer*>& buffers) {
  MutexLock lock(&handoff_mu_);
  for (EventBuffer* b : buffers) {
    b->Clear();
    empty_.push_back(b);
  }
}

size_t EventLog::Append(double time, int64_t count, const int64_t* raw,
                        const int64_t* gear) noexcept {
  Shard& shard = shards_[ThreadShard()];
  SpinLockHolder lock(&shard.mu);
  if (shard.active == nullptr) shard.active = TakeEmpty();
  int64_t* e = shard.active->Next();
  ++shard.appended;
  e[0] = std::bit_cast<int64_t>(time);
  e[1] = count;
  for (int d = 0; d < num_dimensions_; ++d) {
    e[2 + 2 * d] = raw[d];
    e[3 + 2 * d] = gear[d];
  }
  if (!shard.active->full()) return 0;
  EventBuffer* full = shard.active;
  shard.active = nullptr;
  return HandOff(full);
}

size_t EventLog::AppendPlan(const Plan& plan, double time) noexcept {
  Shard& shard = shards_[ThreadShard()];
  size_t waiting = 0;
  SpinLockHolder lock(&shard.mu);
  const int groups = plan.num_variant_groups();
  for (int i = 0; i < groups; ++i) {
    // The event names the group of each dimension (its raw size and cell
    // gear: DimensionPlan::event_raw / event_gear) and how many variants.
    // One group, the common case: every group index is 0.
    int group[kMaxDimensions] = {};
    int64_t count = plan.num_variants();
    if (groups > 1) {
      const VariantGroup vg = plan.variant_group(i);
      std::copy(vg.group, vg.group + num_dimensions_, group);
      count = vg.count;
    }
    if (shard.active == nullptr) shard.active = TakeEmpty();
    int64_t* e = shard.active->Next();
    ++shard.appended;
    e[0] = std::bit_cast<int64_t>(time);
    e[1] = count;
    for (int d = 0; d < num_dimensions_; ++d) {
      const DimensionPlan& dp = plan.dimension(d);
      e[2 + 2 * d] = dp.event_raw(group[d]);
      e[3 + 2 * d] = dp.event_gear(group[d]);
    }
    if (shard.active->full()) {
      waiting = HandOff(shard.active);
      shard.active = nullptr;
    }
  }
  return waiting;
}

uint64_t EventLog::appended() const {
  uint64_t total = 0;
  for (Shard& shard : shards_) {
    SpinLockHolder lock(&shard.mu);
    total += shard.appended;
  }
  return total;
}

size_t EventLog::pending_full() const {
  MutexLock lock(&handoff_mu_);
  return full_.size();
}

size_t EventLog::buffers_allocated() const {
  MutexLock lock(&handoff_mu_);
  return owned_.size();
}

}  // namespace gearbox::internal
