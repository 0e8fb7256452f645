// GraphResourcePool: the per-device registry of compiled graphs (seed §3.4).
//
// Lifecycle: the layer that compiles registers each resource and gets an
// integer key (Register); the layer above reads back the keys its thread
// produced (ConsumeRecentKeys) and attaches them to every gear the variant
// hit; after an eviction the update path hands the evicted gears' keys to
// RemoveByKeys, which is idempotent.
//
// Safety (stronger than the reference, which synchronizes and releases
// regardless): the pool holds one reference to each resource; a request
// holds another (Acquire) for as long as it uses the resource. RemoveByKeys
// drops the pool's reference, outside the pool's lock; Release() runs when
// the last reference goes, so a resource in use is never released. That is
// on the remover's thread (the worker) when no request holds it, else on the
// thread of the request that finishes last.
//
// A Release() that fails (returns an error or throws) is logged and retried
// at later RemoveByKeys / RetryFailedReleases calls, up to
// max_release_attempts in all; then the resource is abandoned (counted, and
// logged as leaked). Bookkeeping never depends on it: the key is gone.
//
// Thread-safety: every method may be called from any thread concurrently.
#ifndef GEARBOX_RESOURCE_POOL_H_
#define GEARBOX_RESOURCE_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "gearbox/export.h"
#include "gearbox/graph_key.h"
#include "gearbox/log.h"

namespace gearbox {

// A compiled graph or any other releasable resource.
class GEARBOX_EXPORT GraphResource {
 public:
  virtual ~GraphResource() = default;
  // Bytes of device (or host) memory it holds, for budgets and reports.
  virtual int64_t bytes() const { return 0; }
  // Frees the device resource (waiting for device work that uses it, where
  // that applies). The pool calls it once the resource has left the pool and
  // nobody holds it; again only if it failed. The object is destroyed after
  // a successful Release (or when abandoned). Default: nothing to free
  // beyond what the destructor frees.
  virtual absl::Status Release() { return absl::OkStatus(); }
};

struct PoolOptions {
  // Attempts at releasing a resource before it is abandoned.
  int max_release_attempts = 5;
  // Where failed releases are reported; null means stderr.
  LogSink log;
};

class GEARBOX_EXPORT GraphResourcePool {
 public:
  explicit GraphResourcePool(PoolOptions options = {});
  ~GraphResourcePool();
  GraphResourcePool(const GraphResourcePool&) = delete;
  GraphResourcePool& operator=(const GraphResourcePool&) = delete;

  // The process-wide pool of a device (created on first use, never destroyed).
  static GraphResourcePool& GetPool(int device_index);

  // Takes shared ownership and returns a fresh key (never 0), which is also
  // appended to the calling thread's pending keys. A null resource gets key 0
  // and is not stored.
  GraphKey Register(std::shared_ptr<GraphResource> resource);

  // Returns and clears the keys this thread registered since its last call.
  std::vector<GraphKey> ConsumeRecentKeys();

  // A reference that keeps the resource alive (unreleased) while held, or
  // null when the key was removed (or never existed).
  std::shared_ptr<GraphResource> Acquire(GraphKey key) const;

  // Drops the pool's reference to each key's resource. Unknown or already
  // removed keys are skipped. Returns how many entries it removed. Retries
  // failed releases first.
  size_t RemoveByKeys(std::span<const GraphKey> keys);

  // Retries releases that failed; returns how many are still waiting.
  size_t RetryFailedReleases();

  size_t size() const;          // live entries
  int64_t bytes() const;        // sum of bytes() over live entries
  uint64_t registered() const;  // keys handed out in all
  uint64_t removed() const;     // entries removed in all
  // Release outcomes (shared with resources that outlive the pool).
  uint64_t released() const;
  uint64_t release_failures() const;  // failed attempts
  uint64_t abandoned() const;         // given up after max_release_attempts
  size_t waiting_for_release() const;

 private:
  // Shared by the pool and every reference it handed out, so a resource
  // released after the pool is gone still has somewhere to report.
  struct ReleaseState;
  // The live entries, each thread's recent keys and the counters, under one
  // mutex (src/runtime/resource_pool.cc).
  struct Registry;
  std::shared_ptr<ReleaseState> release_;
  std::unique_ptr<Registry> registry_;
};

}  // namespace gearbox

#endif  // GEARBOX_RESOURCE_POOL_H_
