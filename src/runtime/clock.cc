#include "gearbox/clock.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <vector>

#include "gearbox/log.h"
#include "src/common/mutex.h"

namespace gearbox {

struct WakeSignal::State {
  // Returns and clears the pending flag.
  bool ConsumePending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const bool was = pending;
    pending = false;
    return was;
  }

  Mutex mu;
  CondVar cv;
  bool pending ABSL_GUARDED_BY(mu) = false;
};

WakeSignal::WakeSignal() : state_(std::make_unique<State>()) {}
WakeSignal::~WakeSignal() = default;

void WakeSignal::Notify() {
  MutexLock lock(&state_->mu);
  state_->pending = true;
  state_->cv.SignalAll();
}

// Who sleeps on a ManualClock. mu is taken before a WakeSignal's mutex.
struct ManualClock::Sleepers {
  mutable Mutex mu;
  mutable CondVar changed;
  std::set<WakeSignal*> signals ABSL_GUARDED_BY(mu);
  uint64_t sleeps_begun ABSL_GUARDED_BY(mu) = 0;
};

ManualClock::ManualClock(double start_seconds)
    : now_(start_seconds), sleepers_(std::make_unique<Sleepers>()) {}
ManualClock::~ManualClock() = default;

double SystemClock::NowSeconds() const {
  // The coarse clock (a few ms resolution) costs a few ns instead of ~20 ns;
  // statistics decay over minutes, so milliseconds are plenty.
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool SystemClock::SleepUntil(double deadline, WakeSignal* signal) {
  WakeSignal::State& ws = *signal->state_;
  MutexLock lock(&ws.mu);
  const double span = deadline - NowSeconds();
  while (true) {
    if (ws.ConsumePending()) return false;
    const double remaining = deadline - NowSeconds();
    if (remaining <= 0) return true;
    if (remaining > span + 1e-3) return false;  // wall clock stepped back
    ws.cv.WaitFor(&ws.mu, std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::duration<double>(remaining)));
  }
}

SystemClock* SystemClock::Default() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

bool ManualClock::SleepUntil(double deadline, WakeSignal* signal) {
  // Read before becoming visible as a sleeper, so a Set() that a test makes
  // after WaitForSleepersForTesting() is always seen as a change.
  const double start = NowSeconds();
  Sleepers& sl = *sleepers_;
  {
    MutexLock lock(&sl.mu);
    sl.signals.insert(signal);
    ++sl.sleeps_begun;
    sl.changed.SignalAll();
  }
  bool reached;
  {
    WakeSignal::State& ws = *signal->state_;
    MutexLock lock(&ws.mu);
    while (true) {
      if (ws.ConsumePending()) {
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
      ws.cv.Wait(&ws.mu);
    }
  }
  MutexLock lock(&sl.mu);
  sl.signals.erase(signal);
  return reached;
}

void ManualClock::Set(double seconds) {
  now_.store(seconds, std::memory_order_release);
  WakeAll();
}

void ManualClock::WakeAll() {
  // Holding the sleepers' mutex keeps every registered signal alive while it is poked.
  MutexLock lock(&sleepers_->mu);
  for (WakeSignal* s : sleepers_->signals) {
    MutexLock inner(&s->state_->mu);
    s->state_->cv.SignalAll();
  }
}

void ManualClock::WaitForSleepsBegunForTesting(uint64_t n) const {
  MutexLock lock(&sleepers_->mu);
  while (sleepers_->sleeps_begun < n) sleepers_->changed.Wait(&sleepers_->mu);
}

void ManualClock::WaitForSleepersForTesting(int n) const {
  MutexLock lock(&sleepers_->mu);
  while (static_cast<int>(sleepers_->signals.size()) < n) sleepers_->changed.Wait(&sleepers_->mu);
}

void StderrLogSink(LogLevel level, std::string_view message) {
  const char* name = level == LogLevel::kError     ? "error"
                     : level == LogLevel::kWarning ? "warning"
                                                   : "info";
  std::fprintf(stderr, "gearbox %s: %.*s\n", name, static_cast<int>(message.size()),
               message.data());
}

}  // namespace gearbox
