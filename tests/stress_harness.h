// The concurrency stress harness shared by the bounded CI stress test and the
// long soak program: request threads plan, compile (register graphs in the
// pool), hold graphs while running them and record events, while an updater
// runs updates with no protection so gears are added and evicted constantly.
#ifndef GEARBOX_TESTS_STRESS_HARNESS_H_
#define GEARBOX_TESTS_STRESS_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gearbox/gear_set.h"

namespace gearbox::testing {

struct StressConfig {
  int threads = 3;
  int64_t requests_per_thread = 100000;
  // 0: an update after every `requests_per_update` requests of each thread
  // (request threads wait for the updater: interleaving whatever the
  // scheduler does). > 0: the updater runs every this many microseconds of
  // real time, free-running (the soak program).
  int64_t update_period_us = 0;
  int64_t requests_per_update = 100;
  uint64_t seed = 1234;
  // The update policy: the seed's (adaptive) or replan; with replan, the
  // gear scheme (joint and sparse sets compile and drop combinations too).
  bool replan = false;
  GearScheme scheme = GearScheme::kIndependent;
  // Called about every second with a one-line progress report (soak).
  bool progress = false;
};

struct StressReport {
  uint64_t served = 0;
  uint64_t variants = 0;
  uint64_t updates = 0;
  uint64_t updates_changed = 0;
  uint64_t compiles = 0;
  uint64_t keys_released = 0;
  uint64_t released_while_held = 0;
  uint64_t events_recorded = 0;
  uint64_t events_accounted = 0;  // folded + dropped for evicted gears / lateness / bad time
  uint64_t graphs_alive = 0;
  uint64_t pool_entries = 0;
  uint64_t stale_graphs = 0;  // pool entries for gear combinations no longer current
  double seconds = 0;
  // Empty when every invariant held.
  std::vector<std::string> Violations(const StressConfig& config) const;
  std::string Summary() const;
};

StressReport RunStress(const StressConfig& config);

}  // namespace gearbox::testing

#endif  // GEARBOX_TESTS_STRESS_HARNESS_H_
