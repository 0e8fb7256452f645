// Fleet artifacts: single-flight compiles and a content-addressed store of
// portable compiled artifacts shared by the replicas of one model
// (docs/FLEET.md, "Shared artifacts").
//
// An artifact is opaque bytes plus a kind string (e.g. "torchscript" from
// the Python integration, "tuning" for per-gear tuning choices). It is
// stored under its SHA-256 digest, chunked when large, with a TTL; an index
// key per (kind, gear) names the digest. Every read is verified: a digest
// mismatch, a bad manifest or a missing or truncated chunk is a miss (with a
// logged error and a counter), never a crash and never a wrong artifact.
// Non-portable artifacts (captured CUDA graphs, oneDNN primitives) are not
// stored: every replica rebuilds them locally from the shared plan.
//
// Before building a gear's artifact a replica takes a short compile lease
// (SET NX PX); the others wait for the holder's artifact up to a bound, and
// build it themselves when it does not come (the lease expired, the holder
// died, the store is down). Correctness never depends on the lease: two
// replicas building one artifact store the same digest.
//
// Only the update path (the worker, a prewarm step) may call this; the
// request path never talks to the store.
#ifndef GEARBOX_FLEET_ARTIFACTS_H_
#define GEARBOX_FLEET_ARTIFACTS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gearbox/clock.h"
#include "gearbox/export.h"
#include "gearbox/fleet.h"
#include "gearbox/log.h"

namespace gearbox {

// SHA-256 (FIPS 180-4) of `bytes`, our own implementation.
GEARBOX_EXPORT std::array<uint8_t, 32> FleetSha256(std::string_view bytes);
// ... as 64 lowercase hex digits.
GEARBOX_EXPORT std::string FleetSha256Hex(std::string_view bytes);

// Hard bounds every manifest is checked against, whatever the options say.
inline constexpr int64_t kFleetMaxChunkBytes = 16 << 20;             // 16 MiB per chunk
inline constexpr int kFleetMaxChunks = 4096;                         // chunks per artifact
inline constexpr int64_t kFleetMaxArtifactBytes = int64_t{1} << 32;  // 4 GiB per artifact

// What the manifest `<prefix>:art:<digest>:m` says about an artifact.
struct FleetArtifactManifest {
  std::string kind;
  int64_t size = 0;         // bytes, 0..kFleetMaxArtifactBytes
  int64_t chunk_bytes = 0;  // bytes per chunk (the last may be shorter), 1..kFleetMaxChunkBytes
  int chunks = 0;           // ceil(size / chunk_bytes), at most kFleetMaxChunks
};
// "gearbox-artifact 1\nkind K\nsize N\nchunk C\n" (canonical decimals).
GEARBOX_EXPORT std::string EncodeFleetArtifactManifest(const FleetArtifactManifest& manifest);
// Pure, fuzzed: any text either decodes into a manifest meeting the bounds
// above (chunks consistent with size and chunk_bytes, kind valid) or is kDataLoss.
GEARBOX_EXPORT absl::StatusOr<FleetArtifactManifest> DecodeFleetArtifactManifest(
    std::string_view text);
// An index value: exactly 64 lowercase hex digits.
GEARBOX_EXPORT absl::Status CheckFleetDigest(std::string_view text);
// A kind: 1..64 characters of [a-z0-9_.-]. A gear key: 1..256 printable
// ASCII characters without spaces (e.g. "8x128"). Errors name the field.
GEARBOX_EXPORT absl::Status ValidateFleetArtifactKind(std::string_view kind);
GEARBOX_EXPORT absl::Status ValidateFleetGearKey(std::string_view gear_key);

struct FleetArtifactOptions {
  // The compile lease's owner: unique per replica (required).
  std::string replica_id;
  // Bytes per chunk: an artifact above it is split; 1 KiB..16 MiB, and at
  // most the store's max_value_bytes (1 MiB by default) so a chunk is readable.
  int64_t chunk_bytes = 256 * 1024;
  // Chunks per artifact, 1..4096: with the chunk size, the largest artifact
  // stored (64 MiB by default); a larger one is built and kept locally only.
  int max_chunks = 256;
  // Milliseconds artifacts, manifests and index entries live after their
  // last put (1 day); an expired one is a miss (rebuilt and put again).
  int64_t ttl_ms = int64_t{24} * 3600 * 1000;
  // Milliseconds a compile lease lives (30 s): how long the others wait for
  // a holder that died before they build the artifact themselves.
  int64_t lease_ms = 30000;
  // Milliseconds a replica waits for another's artifact at most (30 s;
  // 0: never waits, builds at once when the lease is held elsewhere).
  int64_t wait_ms = 30000;
  // Milliseconds between two looks at the index while waiting (250 ms), 1..wait_ms.
  int64_t poll_ms = 250;
  // Chunks read per round trip (8: 2 MiB with the default chunk size), 1..1024.
  int chunks_per_read = 8;
  // Time for waiting; null: SystemClock. Not owned.
  Clock* clock = nullptr;
};
// Every field checked; errors name the field, the value and what is allowed.
GEARBOX_EXPORT absl::Status ValidateFleetArtifactOptions(const FleetArtifactOptions& options);

struct FleetArtifact {
  std::string kind;
  std::string digest;  // 64 hex digits
  std::string bytes;
};

enum class ArtifactSource {
  kLoaded,  // read from the store (verified)
  kBuilt,   // built here (and put when the store allowed it)
};

struct ObtainedArtifact {
  FleetArtifact artifact;
  ArtifactSource source = ArtifactSource::kBuilt;
  bool waited = false;  // another replica held the lease when this one asked
};

struct FleetArtifactCounters {
  uint64_t loads = 0;              // artifacts read and verified
  uint64_t builds = 0;             // artifacts built by Obtain's callback
  uint64_t builds_after_wait = 0;  // ... after waiting on another's lease in vain
  uint64_t lease_waits = 0;        // Obtain found the lease held by another replica
  uint64_t misses = 0;             // Get found no (complete) artifact
  uint64_t corrupt = 0;            // reads rejected: digest mismatch, bad manifest or chunk
  uint64_t puts = 0;               // artifacts written
  uint64_t too_large = 0;          // artifacts above max_chunks x chunk_bytes (not put)
  uint64_t store_failures = 0;     // store calls that failed (the store down, an error reply)
  uint64_t bytes_loaded = 0;
  uint64_t bytes_put = 0;
};

// Thread-safety: every method may be called from any thread (the store
// serializes its calls; counters are under a lock). Obtain blocks its
// caller while it waits on another replica's lease (at most wait_ms): call
// it from the update path, never from a request.
class GEARBOX_EXPORT FleetArtifactStore {
 public:
  // `store` is not owned and must outlive this. `log` null: stderr.
  static absl::StatusOr<std::unique_ptr<FleetArtifactStore>> Create(
      FleetStore* store, const FleetFingerprint& fingerprint, FleetArtifactOptions options,
      LogSink log = nullptr);
  ~FleetArtifactStore();

  // Puts `bytes` under their digest (chunks, then manifest, then the index
  // entry for (kind, gear_key), in one ordered round trip); returns the digest.
  absl::StatusOr<std::string> Put(std::string_view gear_key, std::string_view kind,
                                  std::string_view bytes);
  // The verified artifact of (kind, gear_key), or nullopt (absent, expired,
  // incomplete or corrupt: the last two logged and counted). kUnavailable
  // when the store cannot be reached.
  absl::StatusOr<std::optional<FleetArtifact>> Get(std::string_view gear_key,
                                                   std::string_view kind);
  // Single flight: the stored artifact if there is one; else takes the
  // compile lease and builds (then puts and releases); else waits for the
  // holder's artifact up to wait_ms, taking the lease over if it lapses,
  // and builds itself at the end of the wait. With the store down it builds
  // at once. A build error is returned as is (never stored).
  absl::StatusOr<ObtainedArtifact> Obtain(
      std::string_view gear_key, std::string_view kind,
      const std::function<absl::StatusOr<std::string>()>& build);

  FleetArtifactCounters counters() const;
  const std::string& prefix() const;

 private:
  class Impl;
  explicit FleetArtifactStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gearbox

#endif  // GEARBOX_FLEET_ARTIFACTS_H_
