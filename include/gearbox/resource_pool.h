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
// drops the pool's reference, outside the pool's lock; the resource's
// destructor, which releases it, runs when the last reference goes, so a
// resource in use is never released. That is on the worker's thread when no
// request holds it, else on the thread of the request that finishes last.
//
// Thread-safety: every method may be called from any thread concurrently.
#ifndef GEARBOX_RESOURCE_POOL_H_
#define GEARBOX_RESOURCE_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gearbox/mutex.h"

namespace gearbox {

// A compiled graph or any other releasable resource. Its destructor must
// release it (and wait for device work that uses it, where that applies).
class GraphResource {
 public:
  virtual ~GraphResource() = default;
  // Bytes of device (or host) memory it holds, for budgets and reports.
  virtual int64_t bytes() const { return 0; }
};

using GraphKey = uint64_t;

class GraphResourcePool {
 public:
  GraphResourcePool() = default;
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

  // A reference that keeps the resource alive while held, or null when the
  // key was removed (or never existed).
  std::shared_ptr<GraphResource> Acquire(GraphKey key) const;

  // Drops the pool's reference to each key's resource. Unknown or already
  // removed keys are skipped. Returns how many entries it removed.
  size_t RemoveByKeys(std::span<const GraphKey> keys);

  size_t size() const;          // live entries
  int64_t bytes() const;        // sum of bytes() over live entries
  uint64_t registered() const { return registered_.load(std::memory_order_relaxed); }
  uint64_t removed() const { return removed_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::shared_ptr<GraphResource> resource;
    int64_t bytes = 0;  // as reported at registration
  };
  mutable Mutex mu_;
  GraphKey next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<GraphKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::thread::id, std::vector<GraphKey>> pending_by_thread_
      ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> registered_{0};  // statistics only; relaxed
  std::atomic<uint64_t> removed_{0};     // statistics only; relaxed
};

}  // namespace gearbox

#endif  // GEARBOX_RESOURCE_POOL_H_
