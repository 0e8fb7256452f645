// Fuzzes the decoders of values read from a fleet store (gearbox/fleet.h,
// gearbox/fleet_stats.h): any bytes either decode into a value that passes
// its own invariants or give an error that says why; never a crash.
// Artifact manifests and index values (gearbox/fleet_artifacts.h) too.
// Input: the first byte picks the decoder, the rest is the value; for a hash
// the rest is lines alternating field and value.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gearbox/fleet.h"
#include "gearbox/fleet_artifacts.h"
#include "gearbox/fleet_plan.h"
#include "gearbox/fleet_stats.h"

namespace {

gearbox::FleetHash SplitHash(std::string_view text) {
  gearbox::FleetHash hash;
  std::string field;
  bool have_field = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(start, end - start));
    if (have_field) {
      hash.emplace_back(field, line);
    } else {
      field = line;
    }
    have_field = !have_field;
    start = end + 1;
  }
  return hash;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 8) {
    case 0: {
      auto v = gearbox::DecodeFleetVersion(text);
      if (v.ok() && (*v == 0 || *v > static_cast<uint64_t>(INT64_MAX))) __builtin_trap();
      if (!v.ok() && v.status().message().empty()) __builtin_trap();
      break;
    }
    case 1: {
      auto x = gearbox::DecodeFleetFloat(text);
      if (x.ok() && (!std::isfinite(*x) || std::fabs(*x) > 1e18)) __builtin_trap();
      if (!x.ok() && x.status().message().empty()) __builtin_trap();
      break;
    }
    case 2: {
      gearbox::FleetValueLimits limits;
      limits.max_hash_fields = 64;
      limits.max_value_bytes = 4096;
      const gearbox::FleetHash hash = SplitHash(text);
      const absl::Status s = gearbox::CheckFleetHash(hash, limits);
      if (s.ok() && hash.size() > limits.max_hash_fields) __builtin_trap();
      break;
    }
    case 4: {  // a fleet plan for two dimensions: decoded plans re-encode to the same text
      const std::vector<std::string> dims = {"BATCHSIZE", "SEQLEN"};
      auto plan = gearbox::DecodeFleetPlan(text, dims);
      if (!plan.ok()) {
        if (plan.status().message().empty()) __builtin_trap();
        break;
      }
      if (plan->gears.size() != 2) __builtin_trap();
      for (const auto& gears : plan->gears) {
        if (gears.empty() || gears.size() > 64) __builtin_trap();
        for (size_t i = 1; i < gears.size(); ++i) {
          if (gears[i] <= gears[i - 1]) __builtin_trap();
        }
      }
      auto again = gearbox::DecodeFleetPlan(gearbox::EncodeFleetPlan(*plan, dims), dims);
      if (!again.ok() || again->gears != plan->gears || again->leader != plan->leader) {
        __builtin_trap();
      }
      break;
    }
    case 5: {  // an artifact manifest: within the hard bounds, and re-encodes to the same text
      auto m = gearbox::DecodeFleetArtifactManifest(text);
      if (!m.ok()) {
        if (m.status().message().empty()) __builtin_trap();
        break;
      }
      if (m->size < 0 || m->size > gearbox::kFleetMaxArtifactBytes || m->chunk_bytes < 1 ||
          m->chunk_bytes > gearbox::kFleetMaxChunkBytes || m->chunks < 0 ||
          m->chunks > gearbox::kFleetMaxChunks ||
          static_cast<int64_t>(m->chunks) * m->chunk_bytes < m->size ||
          (m->chunks > 0 && static_cast<int64_t>(m->chunks - 1) * m->chunk_bytes >= m->size) ||
          !gearbox::ValidateFleetArtifactKind(m->kind).ok()) {
        __builtin_trap();
      }
      if (gearbox::EncodeFleetArtifactManifest(*m) != text) __builtin_trap();
      break;
    }
    case 6: {  // an index value: accepted only as 64 lowercase hex digits
      const absl::Status s = gearbox::CheckFleetDigest(text);
      if (s.ok() && text.size() != 64) __builtin_trap();
      if (!s.ok() && s.message().empty()) __builtin_trap();
      break;
    }
    case 3: {  // a statistics bucket of a two-dimension runtime
      auto bucket = gearbox::DecodeFleetStatsBucket(SplitHash(text), 2);
      if (!bucket.ok()) {
        if (bucket.status().message().empty()) __builtin_trap();
        break;
      }
      if (!(bucket->replicas >= 1 && bucket->replicas <= 1e6) || bucket->sizes.size() != 2) {
        __builtin_trap();
      }
      for (const auto& dimension : bucket->sizes) {
        for (size_t i = 0; i < dimension.size(); ++i) {
          const gearbox::WeightedSize& w = dimension[i];
          if (w.size < 1 || !(w.weight >= 0) || (i > 0 && dimension[i - 1].size >= w.size)) {
            __builtin_trap();
          }
        }
      }
      break;
    }
    case 7: {  // a drift bin of a two-dimension runtime: classes in range, ascending
      auto bucket = gearbox::DecodeFleetDriftBucket(SplitHash(text), 2);
      if (!bucket.ok()) {
        if (bucket.status().message().empty()) __builtin_trap();
        break;
      }
      if (!(bucket->replicas >= 1 && bucket->replicas <= 1e6) || bucket->counts.size() != 2) {
        __builtin_trap();
      }
      for (const auto& dimension : bucket->counts) {
        for (size_t i = 0; i < dimension.size(); ++i) {
          const auto& [k, c] = dimension[i];
          if (k < 0 || k >= gearbox::kSizeDriftClasses || c == 0 ||
              (i > 0 && dimension[i - 1].first >= k)) {
            __builtin_trap();
          }
        }
      }
      break;
    }
  }
  return 0;
}
