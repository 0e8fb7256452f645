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
#include <memory>
#include <thread>

#include "gearbox/clock.h"
#include "gearbox/export.h"

namespace gearbox {

class AdaptiveGearRuntime;

class GEARBOX_EXPORT GearUpdateWorker {
 public:
  explicit GearUpdateWorker(AdaptiveGearRuntime* runtime);
  ~GearUpdateWorker();  // Stop()
  GearUpdateWorker(const GearUpdateWorker&) = delete;
  GearUpdateWorker& operator=(const GearUpdateWorker&) = delete;

  void Start();
  // Wakes the thread and joins it. Idempotent.
  void Stop();
  bool running() const { return running_.load(std::memory_order_acquire); }

  // One check at `now`, exactly as the thread runs it (trigger, update,
  // exception handling). Callable without the thread.
  void CheckOnce(double now, bool update_now = false);

  // Wakes the thread to run an update now, whatever the trigger says (a
  // check with trigger kManual; counted as a check and an update), e.g. a
  // fleet follower told of a new plan (FleetPlanSync::Watch) whose
  // on_update adopts it. Never blocks; from any thread, the worker's
  // callbacks included. Without the thread, nothing happens until it starts.
  void UpdateNow();

  uint64_t checks() const;
  uint64_t updates() const;
  uint64_t failures() const;
  // Blocks until at least `n` checks have completed (tests; no sleeping).
  void WaitForChecksForTesting(uint64_t n);

 private:
  void Loop();

  // The check counters and the condition WaitForChecks waits on
  // (src/runtime/update_worker.cc).
  struct Counters;

  AdaptiveGearRuntime* const runtime_;
  WakeSignal signal_;
  std::thread thread_;                   // touched only by Start/Stop
  std::atomic<bool> running_{false};     // set by Start, cleared by Stop
  std::atomic<bool> stop_{false};        // read by the thread each wake
  std::atomic<bool> update_now_{false};  // set by UpdateNow, cleared by the thread
  std::unique_ptr<Counters> counters_;
};

}  // namespace gearbox

#endif  // GEARBOX_UPDATE_WORKER_H_
