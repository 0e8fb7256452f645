// GearUpdateWorker: the seed's background daemon.
//
// One thread. It sleeps on the runtime's Clock, wakes every
// check_interval_seconds (60 s) and runs an update when
// update_interval_seconds (300 s) have passed since the last one or memory
// usage is at or above the threshold, folding recorded events first (between
// checks the runtime's drain thread folds them). An update that fails or
// throws is logged and counted; the thread keeps running. A clock that jumps
// backwards re-arms the next check at now + check_interval.
//
// Thread-safety: Start/Stop from one controlling thread at a time (the
// runtime's owner); everything else from any thread.
#ifndef GEARBOX_UPDATE_WORKER_H_
#define GEARBOX_UPDATE_WORKER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "gearbox/clock.h"
#include "gearbox/mutex.h"

namespace gearbox {

class AdaptiveGearRuntime;

class GearUpdateWorker {
 public:
  explicit GearUpdateWorker(AdaptiveGearRuntime* runtime);
  ~GearUpdateWorker();  // Stop()
  GearUpdateWorker(const GearUpdateWorker&) = delete;
  GearUpdateWorker& operator=(const GearUpdateWorker&) = delete;

  void Start();
  // Wakes the thread and joins it. Idempotent.
  void Stop();
  bool running() const { return running_.load(std::memory_order_acquire); }

  // Asks the thread to fold recorded events now.
  void WakeToFold() { signal_.Notify(); }

  // One check at `now`, exactly as the thread runs it (trigger, update,
  // exception handling). Callable without the thread.
  void CheckOnce(double now);

  uint64_t checks() const;
  uint64_t updates() const;
  uint64_t failures() const;
  // Blocks until at least `n` checks have completed (tests; no sleeping).
  void WaitForChecks(uint64_t n);

 private:
  void Loop();

  AdaptiveGearRuntime* const runtime_;
  WakeSignal signal_;
  std::thread thread_;                 // touched only by Start/Stop
  std::atomic<bool> running_{false};   // set by Start, cleared by Stop
  std::atomic<bool> stop_{false};      // read by the thread each wake

  mutable Mutex mu_;  // guards the counters below; waited on by WaitForChecks
  CondVar checked_;
  uint64_t checks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t updates_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gearbox

#endif  // GEARBOX_UPDATE_WORKER_H_
