// Injectable time. Every decay weight, protection window and worker
// schedule reads a Clock, so tests and replays run on virtual time and stay
// deterministic (no sleeping in tests to let time pass).
#ifndef GEARBOX_CLOCK_H_
#define GEARBOX_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "gearbox/export.h"

namespace gearbox {

// Wakes a thread sleeping in Clock::SleepUntil. Owned by the sleeper.
// Thread-safe: Notify may be called from any thread, at any time; a
// notification that arrives while nobody sleeps is kept for the next sleep.
class GEARBOX_EXPORT WakeSignal {
 public:
  WakeSignal();
  ~WakeSignal();
  WakeSignal(const WakeSignal&) = delete;
  WakeSignal& operator=(const WakeSignal&) = delete;
  void Notify();

 private:
  friend class SystemClock;
  friend class ManualClock;
  struct State;  // mutex, condition variable, pending flag: src/runtime/clock.cc
  std::unique_ptr<State> state_;
};

class GEARBOX_EXPORT Clock {
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
class GEARBOX_EXPORT SystemClock final : public Clock {
 public:
  double NowSeconds() const override;
  bool SleepUntil(double deadline, WakeSignal* signal) override;
  // A process-wide instance.
  static SystemClock* Default();
};

// Virtual time that moves only when told to. Thread-safe: Set/Advance may
// be called from any thread; sleepers wake when the time passes their
// deadline. Time may also be set backwards (fault-injection tests).
class GEARBOX_EXPORT ManualClock final : public Clock {
 public:
  explicit ManualClock(double start_seconds = 0.0);
  ~ManualClock() override;
  double NowSeconds() const override { return now_.load(std::memory_order_acquire); }
  bool SleepUntil(double deadline, WakeSignal* signal) override;
  void Set(double seconds);
  void Advance(double seconds) { Set(NowSeconds() + seconds); }
  // Blocks until at least `n` threads sleep on this clock (tests use it to
  // know a worker is parked before moving time).
  void WaitForSleepersForTesting(int n) const;
  // Blocks until SleepUntil has been entered at least `n` times in all.
  void WaitForSleepsBegunForTesting(uint64_t n) const;

 private:
  struct Sleepers;  // defined in src/runtime/clock.cc
  void WakeAll();

  std::atomic<double> now_;  // written by Set; read anywhere
  std::unique_ptr<Sleepers> sleepers_;
};

}  // namespace gearbox

#endif  // GEARBOX_CLOCK_H_
