// Uses the installed gearbox package: a runtime from a JSON config, one
// request planned, run through the oneDNN backend, recorded, and one update;
// then a replay of a three-row trace.
#include <cstdio>
#include <vector>

#include "gearbox/backends/builtin.h"
#include "gearbox/config.h"
#include "gearbox/executor.h"
#include "gearbox/gearbox.h"
#include "gearbox/replay.h"

int main() {
  using namespace gearbox;
  absl::StatusOr<RuntimeConfig> config = ParseConfig(R"({
    "dims": [{"name": "BATCHSIZE", "policy": "TIMES", "min": 1, "max": 8, "splittable": true},
             {"name": "SEQLEN", "policy": "TIMES", "min": 16, "max": 256}]})");
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  RuntimeOptions options;
  options.start_worker = false;
  auto runtime = AdaptiveGearRuntime::Create(config->dims, options);
  if (!runtime.ok()) return std::fprintf(stderr, "%s\n", runtime.status().ToString().c_str()), 1;

  if (absl::Status s = RegisterBuiltinBackends(); !s.ok()) return 1;
  auto backend = BackendRegistry::Global().Create(
      "onednn", {{"hidden", "16"}, {"heads", "2"}, {"batch_dim", "0"}, {"seq_dim", "1"}});
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  auto executor = GearedExecutor::Create(runtime->get(), backend->get());
  if (!executor.ok()) return std::fprintf(stderr, "%s\n", executor.status().ToString().c_str()), 1;

  const int64_t batch = 3, seq = 40, hidden = 16;
  std::vector<float> x(batch * seq * hidden, 0.5f), y(x.size());
  int64_t shape[] = {batch, seq, hidden};
  DLTensor in{x.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor out{y.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  if (absl::Status s = (*executor)->Run({&in, 1}, {&out, 1}); !s.ok()) {
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  }
  auto record = (*runtime)->RunOnce(1.0);
  if (!record.ok()) return 1;
  std::printf("ran [%lld, %lld] on gears; y[0] = %g; %s\n", static_cast<long long>(batch),
              static_cast<long long>(seq), y[0], UpdateRecordToJson(*record).substr(0, 60).c_str());

  Trace trace;
  trace.dimensions = {"BATCHSIZE", "SEQLEN"};
  trace.time = {0.0, 1.0, 2.0};
  trace.sizes = {1, 20, 3, 100, 8, 256};  // row-major: one (batch, seq) per row
  auto replay = Replay(*config, trace, ReplayOptions{});
  if (!replay.ok()) return std::fprintf(stderr, "%s\n", replay.status().ToString().c_str()), 1;
  std::printf("replayed %llu requests: padding waste %.3f\n",
              static_cast<unsigned long long>(replay->requests), replay->padding_waste);
  return 0;
}
