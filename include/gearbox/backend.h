// Backends: what compiles one gear combination into something that runs.
//
// A backend knows one model (its signature: input and output tensors, which
// of their axes are dynamic and which gear dimension each follows) and
// compiles an Executable per gear combination. Backends register by name
// (BackendRegistry) and live in their own folders under src/backends/.
#ifndef GEARBOX_BACKEND_H_
#define GEARBOX_BACKEND_H_

#include <dlpack/dlpack.h>

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/resource_pool.h"
#include "gearbox/tensor_ops.h"

namespace gearbox {

// One tensor of a model's signature.
struct TensorSpec {
  std::string name;
  DLDataType dtype{kDLFloat, 32, 1};
  // Sizes of the axes; the bound axes' entries are ignored (they follow the
  // gear dimension named in `bindings`).
  std::vector<int64_t> shape;
  std::vector<AxisBinding> bindings;
};

struct ModelSignature {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// What a run needs besides the tensors: per gear dimension the compiled
// size and the valid size (the rest is padding: mask it where it matters,
// e.g. attention keys).
struct RunShape {
  int num_dimensions = 0;
  const int64_t* gear = nullptr;
  const int64_t* extent = nullptr;
};

// A backend's shared workspace arena (all its execution slots together).
struct ArenaUsage {
  int64_t held_bytes = 0;          // allocated now, over every slot
  int64_t largest_need_bytes = 0;  // the largest arena_bytes() of a live executable
  int slots = 0;                   // execution slots created (most runs in flight at once)
};

// A model compiled for one gear combination. Registered in the
// GraphResourcePool (bytes(), Release()). Run may be called from several
// threads at once.
//
// Memory: bytes() is what the executable holds itself, per gear (what its
// release frees); arena_bytes() is what one run of it needs from its
// backend's shared workspace arena (Backend::arena_usage), which the arena
// holds once per execution slot for the largest live gear, not per gear.
class GEARBOX_EXPORT Executable : public GraphResource {
 public:
  // Bytes of the backend's arena one run needs (0: none, the default).
  virtual int64_t arena_bytes() const { return 0; }
  // `inputs` and `outputs` follow the signature, bound axes at the gear sizes.
  virtual absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                           const RunShape& shape) = 0;
};

class GEARBOX_EXPORT Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual const ModelSignature& signature() const = 0;
  // Where the executables want their tensors (kDLCPU or kDLCUDA).
  virtual DLDevice device() const = 0;
  // Compiles for `gears` (one size per gear dimension). Thread-safe; may
  // be slow; may fail (the executor reports it and does not cache it).
  virtual absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears) = 0;
  // The shared workspace arena, now (all zero, the default: no arena).
  virtual ArenaUsage arena_usage() const { return {}; }
  // The gear dimension along which a gear's memory grows with the square of
  // its size (attention scores: the sequence), or -1 (the default): the
  // memory model's quadratic term (gearbox/memory_model.h).
  virtual int quadratic_memory_dimension() const { return -1; }
};

// Backend parameters by name ("hidden" -> "64"); each backend documents its own.
using BackendParams = std::map<std::string, std::string>;
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendParams& params)>;

// Process-wide registry of backends by name. Thread-safe.
class GEARBOX_EXPORT BackendRegistry {
 public:
  BackendRegistry();
  ~BackendRegistry();
  BackendRegistry(const BackendRegistry&) = delete;
  BackendRegistry& operator=(const BackendRegistry&) = delete;
  static BackendRegistry& Global();
  // Fails if the name is taken.
  absl::Status Register(std::string name, BackendFactory factory);
  absl::StatusOr<std::unique_ptr<Backend>> Create(std::string_view name,
                                                  const BackendParams& params) const;
  std::vector<std::string> Names() const;

 private:
  struct Factories;  // by name, under a mutex (src/executor/backend_registry.cc)
  std::unique_ptr<Factories> factories_;
};

// Parses an integer parameter, or returns `fallback` when absent; errors name it.
GEARBOX_EXPORT absl::StatusOr<int64_t> IntParam(const BackendParams& params, const std::string& key,
                                                int64_t fallback, int64_t min, int64_t max);

}  // namespace gearbox

#endif  // GEARBOX_BACKEND_H_
