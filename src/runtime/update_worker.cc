#include "gearbox/update_worker.h"

#include <exception>
#include <string>

#include "gearbox/runtime.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

struct GearUpdateWorker::Counters {
  mutable Mutex mu;
  CondVar checked;  // signalled after each check
  uint64_t checks ABSL_GUARDED_BY(mu) = 0;
  uint64_t updates ABSL_GUARDED_BY(mu) = 0;
  uint64_t failures ABSL_GUARDED_BY(mu) = 0;
};

GearUpdateWorker::GearUpdateWorker(AdaptiveGearRuntime* runtime)
    : runtime_(runtime), counters_(std::make_unique<Counters>()) {}

GearUpdateWorker::~GearUpdateWorker() { Stop(); }

void GearUpdateWorker::Start() {
  if (running_.load(std::memory_order_acquire)) return;
  stop_.store(false, std::memory_order_release);
  running_.store(true, std::memory_order_release);
  thread_ = std::thread([this] { Loop(); });
}

void GearUpdateWorker::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  signal_.Notify();
  thread_.join();
  running_.store(false, std::memory_order_release);
}

void GearUpdateWorker::Loop() {
  Clock& clock = runtime_->clock();
  double interval = runtime_->CheckIntervalSeconds();
  double next_check = clock.NowSeconds() + interval;
  while (!stop_.load(std::memory_order_acquire)) {
    clock.SleepUntil(next_check, &signal_);
    if (stop_.load(std::memory_order_acquire)) break;
    runtime_->FoldPendingEvents();
    const double now = clock.NowSeconds();
    if (update_now_.exchange(false, std::memory_order_acq_rel)) {
      CheckOnce(now, /*update_now=*/true);  // the next check stays where it was
    } else if (now >= next_check) {
      CheckOnce(now);
      interval = runtime_->CheckIntervalSeconds();
      next_check = now + interval;
    } else if (next_check - now > interval) {
      next_check = now + interval;  // the clock went backwards
    }
  }
}

void GearUpdateWorker::UpdateNow() {
  update_now_.store(true, std::memory_order_release);
  signal_.Notify();
}

void GearUpdateWorker::CheckOnce(double now, bool update_now) {
  bool updated = false;
  bool failed = false;
  std::string error;
  try {
    std::optional<UpdateTrigger> trigger =
        update_now ? std::optional(UpdateTrigger::kManual) : runtime_->CheckTrigger(now);
    if (trigger) {
      auto record = runtime_->RunOnce(now, *trigger);
      if (record.ok()) {
        updated = true;
      } else {
        failed = true;
        error = record.status().ToString();
      }
    }
  } catch (const std::exception& e) {
    failed = true;
    error = internal::Cat("exception: ", e.what());
  } catch (...) {
    failed = true;
    error = "unknown exception";
  }
  if (failed) {
    runtime_->Log(LogLevel::kWarning, internal::Cat("adaptive gear update at t=", now,
                                                    " failed and was skipped: ", error));
  }
  // Releases that failed earlier get another attempt on every check.
  runtime_->pool().RetryFailedReleases();
  MutexLock lock(&counters_->mu);
  ++counters_->checks;
  if (updated) ++counters_->updates;
  if (failed) ++counters_->failures;
  counters_->checked.SignalAll();
}

uint64_t GearUpdateWorker::checks() const {
  MutexLock lock(&counters_->mu);
  return counters_->checks;
}

uint64_t GearUpdateWorker::updates() const {
  MutexLock lock(&counters_->mu);
  return counters_->updates;
}

uint64_t GearUpdateWorker::failures() const {
  MutexLock lock(&counters_->mu);
  return counters_->failures;
}

void GearUpdateWorker::WaitForChecksForTesting(uint64_t n) {
  MutexLock lock(&counters_->mu);
  while (counters_->checks < n) counters_->checked.Wait(&counters_->mu);
}

}  // namespace gearbox
