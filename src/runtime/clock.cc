#include "gearbox/clock.h"

#include <chrono>
#include <cmath>
#include <cstdio>
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
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

bool SystemClock::SleepUntil(double deadline, WakeSignal* signal) {
  MutexLock lock(&signal->mu_);
  while (true) {
    if (signal->ConsumePending()) return false;
    const double remaining = deadline - NowSeconds();
    if (remaining <= 0) return true;
    signal->cv_.WaitFor(&signal->mu_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::duration<double>(remaining)));
  }
}

SystemClock* SystemClock::Default() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

bool ManualClock::SleepUntil(double deadline, WakeSignal* signal) {
  {
    MutexLock lock(&mu_);
    sleepers_.insert(signal);
  }
  bool reached;
  {
    MutexLock lock(&signal->mu_);
    while (true) {
      if (signal->ConsumePending()) {
        reached = false;
        break;
      }
      if (NowSeconds() >= deadline) {
        reached = true;
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

void StderrLogSink(LogLevel level, std::string_view message) {
  const char* name = level == LogLevel::kError     ? "error"
                     : level == LogLevel::kWarning ? "warning"
                                                   : "info";
  std::fprintf(stderr, "gearbox %s: %.*s\n", name, static_cast<int>(message.size()),
               message.data());
}

}  // namespace gearbox
