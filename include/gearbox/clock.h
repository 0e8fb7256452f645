// Injectable time. Every decay weight, protection window and worker
// schedule reads a Clock, so tests and replays run on virtual time and stay
// deterministic (no sleeping in tests to let time pass).
#ifndef GEARBOX_CLOCK_H_
#define GEARBOX_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <set>

#include "gearbox/mutex.h"

namespace gearbox {

// Wakes a thread sleeping in Clock::SleepUntil. Owned by the sleeper.
// Thread-safe: Notify may be called from any thread, at any time; a
// notification that arrives while nobody sleeps is kept for the next sleep.
class WakeSignal {
 public:
  void Notify();

 private:
  friend class SystemClock;
  friend class ManualClock;
  // Returns and clears the pending flag. Caller holds mu_.
  bool ConsumePending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  CondVar cv_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
};

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds; the epoch is the clock's own (Unix time for SystemClock).
  virtual double NowSeconds() const = 0;
  // Blocks until NowSeconds() >= deadline (returns true), or `signal` is
  // notified (a pending notification returns at once), or the clock moves
  // backwards during the sleep (both return false; the caller re-reads the
  // time and decides).
  virtual bool SleepUntil(double deadline, WakeSignal* signal) = 0;
};

// Wall-clock time (Unix seconds, CLOCK_REALTIME_COARSE: resolution of a few
// milliseconds); sleeps use real time.
class SystemClock final : public Clock {
 public:
  double NowSeconds() const override;
  bool SleepUntil(double deadline, WakeSignal* signal) override;
  // A process-wide instance.
  static SystemClock* Default();
};

// Virtual time that moves only when told to. Thread-safe: Set/Advance may
// be called from any thread; sleepers wake when the time passes their
// deadline. Time may also be set backwards (fault-injection tests).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start_seconds = 0.0) : now_(start_seconds) {}
  double NowSeconds() const override { return now_.load(std::memory_order_acquire); }
  bool SleepUntil(double deadline, WakeSignal* signal) override;
  void Set(double seconds);
  void Advance(double seconds) { Set(NowSeconds() + seconds); }
  // Threads sleeping right now.
  int sleepers() const;
  // Blocks until at least `n` threads sleep on this clock (tests use it to
  // know a worker is parked before moving time).
  void WaitForSleepers(int n) const;
  // Blocks until SleepUntil has been entered at least `n` times in all.
  void WaitForSleepsBegun(uint64_t n) const;

 private:
  void WakeAll();

  std::atomic<double> now_;  // written by Set; read anywhere
  mutable Mutex mu_;         // guards the sleeper set; taken before a WakeSignal's mutex
  mutable CondVar sleepers_changed_;
  std::set<WakeSignal*> sleepers_ ABSL_GUARDED_BY(mu_);
  uint64_t sleeps_begun_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gearbox

#endif  // GEARBOX_CLOCK_H_
