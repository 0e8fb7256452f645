// Fuzzes the runtime's outside inputs: events (sizes, gears, counts, times,
// keys) and updates at arbitrary times with arbitrary options. Checks: no
// crash; every event accounted for; the gear set stays valid and within its
// bounds; graphs attached to evicted gears are released.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>

#include "gearbox/runtime.h"

namespace {

struct Graph : gearbox::GraphResource {
  explicit Graph(int* alive) : alive_(alive) { ++*alive_; }
  ~Graph() override { --*alive_; }
  int* alive_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  gearbox::ManualClock clock(0);
  int alive = 0;
  {
    gearbox::GraphResourcePool pool(
        gearbox::PoolOptions{3, [](gearbox::LogLevel, std::string_view) {}});
    gearbox::FixedMemoryProbe probe(0.5);
    gearbox::RuntimeOptions o;
    o.clock = &clock;
    o.pool = &pool;
    o.memory_probe = &probe;
    o.start_worker = false;
    o.log = [](gearbox::LogLevel, std::string_view) {};
    o.event_buffer_events = in.ConsumeIntegralInRange<size_t>(1, 8);
    o.adaptive.recent_use_protect_seconds = in.ConsumeIntegralInRange<int>(0, 400);
    o.adaptive.add_min_samples = in.ConsumeIntegralInRange<int>(1, 6);
    o.adaptive.min_samples_per_gear = in.ConsumeIntegralInRange<int>(0, 6);
    o.adaptive.max_gears_per_type = in.ConsumeIntegralInRange<int>(4, 12);
    o.adaptive.window_slots = in.ConsumeIntegralInRange<int>(1, 40);
    // Any policy and gear scheme (joint and sparse need the replan policy).
    o.policy = in.ConsumeBool() ? gearbox::UpdatePolicy::kReplan : gearbox::UpdatePolicy::kAdaptive;
    if (o.policy == gearbox::UpdatePolicy::kReplan) {
      o.combination_spec.scheme =
          static_cast<gearbox::GearScheme>(in.ConsumeIntegralInRange<int>(0, 2));
      o.combination_spec.cover_ratio = in.ConsumeFloatingPointInRange<double>(1.0, 20.0);
      o.replan.min_gear_lifetime_seconds = in.ConsumeIntegralInRange<int>(0, 4000);
      o.replan.idle_graph_release_seconds = in.ConsumeIntegralInRange<int>(0, 900);
      o.replan.cost.compile_seconds = in.ConsumeFloatingPointInRange<double>(0.0, 5.0);
    }
    auto created = gearbox::AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {8, 64}, false, true}}, o);
    if (!created.ok()) return 0;
    auto& rt = **created;
    double t = 0;
    while (in.remaining_bytes() > 0) {
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0: {  // a planned request
          gearbox::SnapshotRef snap = rt.GetSnapshot();
          const int64_t raw[] = {in.ConsumeIntegralInRange<int64_t>(-1, 300),
                                 in.ConsumeIntegralInRange<int64_t>(-1, 300)};
          gearbox::Plan plan;
          if (gearbox::MakePlan(*snap, raw, &plan).ok()) rt.RecordPlan(plan, t);
          break;
        }
        case 1: {  // a raw event, possibly nonsense
          gearbox::GearEvent e;
          e.time = in.ConsumeBool() ? t : in.ConsumeFloatingPoint<double>();
          e.count = in.ConsumeIntegralInRange<int64_t>(-1, 5);
          for (int d = 0; d < 2; ++d) {
            e.raw.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 500));
            e.gear.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 100));
          }
          (void)rt.RecordEvent(e);
          break;
        }
        case 2: {  // a compile: register and attach
          pool.Register(std::make_shared<Graph>(&alive));
          const int64_t gears[] = {in.ConsumeIntegralInRange<int64_t>(1, 300),
                                   in.ConsumeIntegralInRange<int64_t>(1, 300)};
          rt.AttachCleanupKeys(gears, pool.ConsumeRecentKeys());
          break;
        }
        case 3:  // time moves, possibly backwards
          t += in.ConsumeFloatingPointInRange<double>(-100, 400);
          break;
        case 4: {
          probe.Set(in.ConsumeFloatingPointInRange<double>(-0.5, 1.5));
          auto r = rt.RunOnce(t);
          if (!r.ok()) __builtin_trap();
          gearbox::SnapshotRef s = rt.GetSnapshot();
          for (int d = 0; d < s->num_dimensions(); ++d) {
            if (static_cast<int>(s->gears(d).size()) > o.adaptive.max_gears_per_type)
              __builtin_trap();
          }
          gearbox::CombinationSpec spec{s->scheme(), s->combinations(), s->cover_ratio()};
          if (!gearbox::GearSet::Create(s->dimensions(), 1, 0.0, spec).ok()) __builtin_trap();
          break;
        }
      }
    }
    (void)rt.RunOnce(t);
    const gearbox::RuntimeCounters c = rt.counters();
    if (c.events_pending != 0) __builtin_trap();
    if (c.events_recorded !=
        c.events_folded + c.events_for_evicted_gears + c.events_too_late + c.events_bad_time) {
      __builtin_trap();
    }
    if (static_cast<size_t>(alive) != pool.size()) __builtin_trap();
  }
  if (alive != 0) __builtin_trap();
  return 0;
}
