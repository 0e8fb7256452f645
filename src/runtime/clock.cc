#include "gearbox/clock.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <vector>

#include "gearbox/log.h"

namespace gearbox {

void WakeSignal::Notify() {
  MutexLock lock(&mu_);
  pending_ = true;
  cv_.SignalAll();
}

bool WakeSignal::ConsumePending() {
  const bool was = pending_;
  pending_ = false;
  return was;
}

double SystemClock::NowSeconds() const {
  // The coarse clock (a few ms resolution) costs a few ns instead of ~20 ns;
  // statistics decay over minutes, so milliseconds are plenty.
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool SystemClock::SleepUntil(double deadline, WakeSignal* signal) {
  MutexLock lock(&signal->mu_);
  const double span = deadline - NowSeconds();
  while (true) {
    if (signal->ConsumePending()) return false;
    const double remaining = deadline - NowSeconds();
    if (remaining <= 0) return true;
    if (remaining > span + 1e-3) return false;  // wall clock stepped back
    signal->cv_.WaitFor(&signal->mu_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::duration<double>(remaining)));
  }
}

SystemClock* SystemClock::Default() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

bool ManualClock::SleepUntil(double deadline, WakeSignal* signal) {
  // Read before becoming visible as a sleeper, so a Set() that a test makes
  // after WaitForSleepers() is always seen as a change.
  const double start = NowSeconds();
  {
    MutexLock lock(&mu_);
    sleepers_.insert(signal);
    ++sleeps_begun_;
    sleepers_changed_.SignalAll();
  }
  bool reached;
  {
    MutexLock lock(&signal->mu_);
    while (true) {
      if (signal->ConsumePending()) {
        reached = false;
        break;
      }
      const double now = NowSeconds();
      if (now >= deadline) {
        reached = true;
        break;
      }
      if (now < start) {  // set backwards
        reached = false;
        break;
      }
      signal->cv_.Wait(&signal->mu_);
    }
  }
  MutexLock lock(&mu_);
  sleepers_.erase(signal);
  return reached;
}

void ManualClock::Set(double seconds) {
  now_.store(seconds, std::memory_order_release);
  WakeAll();
}

void ManualClock::WakeAll() {
  // Holding mu_ keeps every registered signal alive while it is poked.
  MutexLock lock(&mu_);
  for (WakeSignal* s : sleepers_) {
    MutexLock inner(&s->mu_);
    s->cv_.SignalAll();
  }
}

int ManualClock::sleepers() const {
  MutexLock lock(&mu_);
  return static_cast<int>(sleepers_.size());
}

void ManualClock::WaitForSleepsBegun(uint64_t n) const {
  MutexLock lock(&mu_);
  while (sleeps_begun_ < n) sleepers_changed_.Wait(&mu_);
}

void ManualClock::WaitForSleepers(int n) const {
  MutexLock lock(&mu_);
  while (static_cast<int>(sleepers_.size()) < n) sleepers_changed_.Wait(&mu_);
}

void StderrLogSink(LogLevel level, std::string_view message) {
  const char* name = level == LogLevel::kError     ? "error"
                     : level == LogLevel::kWarning ? "warning"
                                                   : "info";
  std::fprintf(stderr, "gearbox %s: %.*s\n", name, static_cast<int>(message.size()),
               message.data());
}

}  // namespace gearbox
