#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <set>

#include "gearbox/backends/onednn.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using internal::Cat;
using tag = memory::format_tag;
using dt = memory::data_type;

// Weights shared by every gear: created once, plain row-major layouts.
struct Weights {
  int64_t h, heads, mlp;
  std::vector<float> ln1_scale, ln1_shift, ln2_scale, ln2_shift;
  std::vector<float> w_qkv, b_qkv, w_o, b_o, w_up, b_up, w_down, b_down;
};

void Fill(std::vector<float>* v, size_t n, float scale, std::mt19937_64* rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  v->resize(n);
  for (float& x : *v) x = u(*rng);
}

std::shared_ptr<const Weights> MakeWeights(const TransformerBlockOptions& o) {
  auto w = std::make_shared<Weights>();
  w->h = o.hidden;
  w->heads = o.heads;
  w->mlp = o.hidden * o.mlp_ratio;
  std::mt19937_64 rng(o.seed);
  const size_t h = static_cast<size_t>(o.hidden), m = static_cast<size_t>(w->mlp);
  const float sh = 1.0f / std::sqrt(static_cast<float>(h));
  const float sm = 1.0f / std::sqrt(static_cast<float>(m));
  Fill(&w->ln1_scale, h, 0.2f, &rng);
  for (float& x : w->ln1_scale) x += 1.0f;
  Fill(&w->ln1_shift, h, 0.1f, &rng);
  Fill(&w->ln2_scale, h, 0.2f, &rng);
  for (float& x : w->ln2_scale) x += 1.0f;
  Fill(&w->ln2_shift, h, 0.1f, &rng);
  Fill(&w->w_qkv, h * 3 * h, sh, &rng);
  Fill(&w->b_qkv, 3 * h, 0.1f, &rng);
  Fill(&w->w_o, h * h, sh, &rng);
  Fill(&w->b_o, h, 0.1f, &rng);
  Fill(&w->w_up, h * m, sh, &rng);
  Fill(&w->b_up, m, 0.1f, &rng);
  Fill(&w->w_down, m * h, sm, &rng);
  Fill(&w->b_down, h, 0.1f, &rng);
  return w;
}

void* Data(const std::vector<float>& v) { return const_cast<float*>(v.data()); }

// The primitives of one gear (B, S) and their memory descriptors.
struct Primitives {
  int64_t b, s, h, heads, hd, mlp, rows;
  memory::desc x_md, row_h_md, qkv_md, q_md, kt_md, v_md, scores_md, mask_md, ctx_md, ctx_view_md,
      hidden4_md, ln_param_md;
  memory::desc w_qkv_md, b_qkv_md, w_o_md, b_o_md, w_up_md, b_up_md, w_down_md, b_down_md;
  dnnl::layer_normalization_forward ln;
  dnnl::matmul qkv, scores, context, out_proj, up, down;
  dnnl::softmax_forward softmax;
  size_t scratchpad_bytes = 0;
};

// Where one run's activations, key mask and scratchpad lie in its workspace
// (one contiguous buffer): byte offsets, each 64-byte aligned.
struct Layout {
  size_t ln1 = 0, qkv = 0, scores = 0, ctx = 0, x1 = 0, ln2 = 0, hidden4 = 0, mask = 0,
         scratchpad = 0;
  size_t bytes = 0;  // the whole workspace
};

constexpr size_t kAlign = 64;

Layout MakeLayout(const Primitives& p) {
  Layout l;
  const size_t rows = static_cast<size_t>(p.rows), h = static_cast<size_t>(p.h);
  auto take = [&](size_t* at, size_t bytes) {
    *at = l.bytes;
    l.bytes += (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  };
  const size_t f = sizeof(float);
  take(&l.ln1, rows * h * f);
  take(&l.qkv, rows * 3 * h * f);
  take(&l.scores, static_cast<size_t>(p.b * p.heads * p.s * p.s) * f);
  take(&l.ctx, rows * h * f);
  take(&l.x1, rows * h * f);
  take(&l.ln2, rows * h * f);
  take(&l.hidden4, rows * static_cast<size_t>(p.mlp) * f);
  take(&l.mask, static_cast<size_t>(p.s) * f);
  take(&l.scratchpad, p.scratchpad_bytes);
  return l;
}

// A zeroed, 64-byte aligned host buffer (zeroed so that its pages are
// resident: the backend's accounting and the process's RSS then agree).
struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }
};
using Buffer = std::unique_ptr<std::byte[], AlignedFree>;

Buffer NewBuffer(size_t bytes) {
  Buffer b(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{kAlign})));
  std::memset(b.get(), 0, bytes);
  return b;
}

// WorkspaceArena: the workspaces of every gear of one backend, one per
// concurrent execution slot (not one per gear).
//
// Contract: a Run checks a slot out (Lease), uses its buffer alone for the
// whole run, and returns it; a slot is never used by two runs at once, so
// oneDNN's user-mode scratchpad and the activations in it are race-free
// (oneDNN: user scratchpad is thread-safe as long as no two executions use
// one buffer at once). Slots are created when more runs are in flight than
// slots exist (so their number is the most runs ever in flight at once) and
// are never destroyed before the arena.
// Sizing: every live executable registers its workspace bytes (its "need")
// at compile and unregisters it when destroyed (an evicted gear, once
// released). A slot checked out for a run whose need its buffer does not
// cover is grown to the largest live need (so it grows once, not once per
// larger gear); a slot larger than the largest live need is shrunk: at once
// when it is free (its buffer is freed, reallocated at its next checkout),
// when returned otherwise. So each slot holds at most the largest live gear's
// workspace, and the arena at most slots x that. A growth that finds no
// memory (std::bad_alloc, or past the arena's limit) falls back to the run's
// own need, so a gear smaller than the largest still runs; failing that, the
// run gets std::bad_alloc and the slot stays, empty.
// Thread-safety: every method may be called from any thread; one mutex
// guards the needs and the free slots; buffers are allocated, zeroed and
// freed outside it.
class WorkspaceArena {
 public:
  struct Slot {
    Buffer buffer;
    size_t capacity = 0;
  };

  // `limit_bytes`: the most the buffers may hold in all (0: no limit).
  explicit WorkspaceArena(int64_t limit_bytes) : limit_(limit_bytes) {}
  ~WorkspaceArena() = default;

  void AddNeed(size_t bytes) {
    MutexLock lock(&mu_);
    needs_.insert(bytes);
  }
  void RemoveNeed(size_t bytes) {
    std::vector<Buffer> dead;  // freed after the lock
    {
      MutexLock lock(&mu_);
      auto it = needs_.find(bytes);
      if (it != needs_.end()) needs_.erase(it);
      const size_t largest = LargestLocked();
      for (auto& slot : free_) {
        if (slot->capacity > largest) {
          held_.fetch_sub(static_cast<int64_t>(slot->capacity), std::memory_order_relaxed);
          dead.push_back(std::move(slot->buffer));
          slot->capacity = 0;
        }
      }
    }
  }

  // A slot whose buffer holds at least `need` bytes; may throw std::bad_alloc
  // (the slot then stays in the arena, empty).
  std::unique_ptr<Slot> Checkout(size_t need) {
    std::unique_ptr<Slot> slot;
    size_t target = 0;
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        slot = std::move(free_.back());
        free_.pop_back();
      } else {
        slot = std::make_unique<Slot>();
        ++slots_;
      }
      target = std::max(need, LargestLocked());
    }
    if (slot->capacity < need) {
      Buffer old = std::move(slot->buffer);
      held_.fetch_sub(static_cast<int64_t>(slot->capacity), std::memory_order_relaxed);
      slot->capacity = 0;
      old.reset();  // before the new one: the peak is the larger, not the sum
      try {
        Allocate(slot.get(), target, need);
      } catch (...) {
        Return(std::move(slot));
        throw;
      }
    }
    return slot;
  }

  void Return(std::unique_ptr<Slot> slot) {
    Buffer dead;  // freed after the lock
    MutexLock lock(&mu_);
    if (slot->capacity > LargestLocked()) {
      held_.fetch_sub(static_cast<int64_t>(slot->capacity), std::memory_order_relaxed);
      dead = std::move(slot->buffer);
      slot->capacity = 0;
    }
    free_.push_back(std::move(slot));
  }

  ArenaUsage usage() const {
    MutexLock lock(&mu_);
    return {held_.load(std::memory_order_relaxed), static_cast<int64_t>(LargestLocked()), slots_};
  }

 private:
  // Gives the empty `slot` a buffer of `target` bytes or, when that finds
  // no memory, of `need`; throws std::bad_alloc when neither does. The
  // bytes are reserved in held_ before the allocation, so concurrent
  // growths cannot together pass the limit.
  void Allocate(Slot* slot, size_t target, size_t need) {
    const size_t sizes[] = {target, need};
    for (int i = 0; i < (target > need ? 2 : 1); ++i) {
      const size_t bytes = sizes[i];
      const auto n = static_cast<int64_t>(bytes);
      if (held_.fetch_add(n, std::memory_order_relaxed) + n > limit_ && limit_ > 0) {
        held_.fetch_sub(n, std::memory_order_relaxed);
        continue;
      }
      try {
        slot->buffer = NewBuffer(bytes);
      } catch (const std::bad_alloc&) {
        held_.fetch_sub(n, std::memory_order_relaxed);
        continue;
      }
      slot->capacity = bytes;
      return;
    }
    throw std::bad_alloc();
  }

  size_t LargestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return needs_.empty() ? 0 : *needs_.rbegin();
  }

  mutable Mutex mu_;
  std::multiset<size_t> needs_ ABSL_GUARDED_BY(mu_);  // one per live executable
  std::vector<std::unique_ptr<Slot>> free_ ABSL_GUARDED_BY(mu_);
  int slots_ ABSL_GUARDED_BY(mu_) = 0;  // created in all (free or checked out)
  const int64_t limit_;                 // the most held_ may reach (0: none)
  // Bytes of every slot's buffer, free or checked out, and those reserved
  // for one being allocated (written by the holder of the slot; relaxed:
  // an atomic counter, read for reports and the limit).
  std::atomic<int64_t> held_{0};
};

class OneDnnBlockExecutable final : public Executable {
 public:
  // `arena` null: the gear owns its workspaces (a pool of them, one per
  // concurrent run); else its runs take a slot of the backend's arena.
  OneDnnBlockExecutable(dnnl::engine engine, std::shared_ptr<const Weights> w,
                        std::unique_ptr<Primitives> p, int seq_dim,
                        std::shared_ptr<WorkspaceArena> arena)
      : engine_(std::move(engine)),
        w_(std::move(w)),
        p_(std::move(p)),
        layout_(MakeLayout(*p_)),
        seq_dim_(seq_dim),
        arena_(std::move(arena)) {
    if (arena_ != nullptr) {
      arena_->AddNeed(layout_.bytes);
    } else {
      own_free_.push_back(NewBuffer(layout_.bytes));  // compile pays for the first one
      own_bytes_.store(static_cast<int64_t>(layout_.bytes));
    }
  }
  ~OneDnnBlockExecutable() override {
    if (arena_ != nullptr) arena_->RemoveNeed(layout_.bytes);
  }

  // Per gear: its own workspaces (none with an arena). oneDNN does not report
  // the size of a primitive's JIT code, so that is not counted (the process
  // RSS is where it shows).
  int64_t bytes() const override { return own_bytes_.load(std::memory_order_relaxed); }
  int64_t arena_bytes() const override {
    return arena_ != nullptr ? static_cast<int64_t>(layout_.bytes) : 0;
  }

  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                   const RunShape& shape) override {
    if (inputs.size() != 1 || outputs.size() != 1) {
      return internal::InvalidField("tensors", Cat(inputs.size(), " in / ", outputs.size(), " out"),
                                    "1 input x and 1 output y");
    }
    Buffer own;
    std::unique_ptr<WorkspaceArena::Slot> slot;
    try {
      if (arena_ != nullptr) {
        slot = arena_->Checkout(layout_.bytes);
      } else {
        own = TakeWorkspace();
      }
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(Cat("oneDNN block: no memory for a ", layout_.bytes,
                                              "-byte workspace (batch ", p_->b, " x seq ", p_->s,
                                              ")"));
    }
    std::byte* base = slot != nullptr ? slot->buffer.get() : own.get();
    absl::Status status = RunIn(base, inputs, outputs, shape);
    if (slot != nullptr) {
      arena_->Return(std::move(slot));
    } else {
      ReturnWorkspace(std::move(own));
    }
    return status;
  }

 private:
  absl::Status RunIn(std::byte* ws, std::span<const DLTensor> inputs,
                     std::span<const DLTensor> outputs, const RunShape& shape) {
    const int64_t valid_s = shape.extent[seq_dim_];
    const Layout& l = layout_;
    auto at = [&](size_t offset) { return static_cast<void*>(ws + offset); };
    // Key mask: 0 for valid keys, a large negative for padding (finite, so
    // exp() gives 0 without inf - inf).
    float* mask_data = static_cast<float*>(at(l.mask));
    for (int64_t j = 0; j < p_->s; ++j) mask_data[j] = j < valid_s ? 0.0f : -1e30f;
    try {
      dnnl::stream stream(engine_);
      const Primitives& p = *p_;
      auto mem = [&](const memory::desc& md, const void* ptr) {
        return memory(md, engine_, const_cast<void*>(ptr));
      };
      memory x = mem(p.x_md, static_cast<const char*>(inputs[0].data) + inputs[0].byte_offset);
      memory y = mem(p.x_md, static_cast<const char*>(outputs[0].data) + outputs[0].byte_offset);
      memory scratch =
          mem(memory::desc({static_cast<int64_t>(std::max<size_t>(p.scratchpad_bytes, 1))}, dt::u8,
                           tag::a),
              at(l.scratchpad));
      memory ln1 = mem(p.row_h_md, at(l.ln1)), qkv = mem(p.qkv_md, at(l.qkv));
      memory scores = mem(p.scores_md, at(l.scores)), mask = mem(p.mask_md, at(l.mask));
      memory ctx = mem(p.ctx_md, at(l.ctx)), x1 = mem(p.row_h_md, at(l.x1));
      memory ln2 = mem(p.row_h_md, at(l.ln2)), hidden4 = mem(p.hidden4_md, at(l.hidden4));
      const Weights& w = *w_;
      auto param = [&](const std::vector<float>& v) { return mem(p.ln_param_md, Data(v)); };
      auto post = [](int index) { return DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1; };
      memory x_rows = mem(p.row_h_md, x.get_data_handle());
      memory y_rows = mem(p.row_h_md, y.get_data_handle());

      p.ln.execute(stream, {{DNNL_ARG_SRC, x_rows},
                            {DNNL_ARG_DST, ln1},
                            {DNNL_ARG_SCALE, param(w.ln1_scale)},
                            {DNNL_ARG_SHIFT, param(w.ln1_shift)},
                            {DNNL_ARG_SCRATCHPAD, scratch}});
      p.qkv.execute(stream, {{DNNL_ARG_SRC, ln1},
                             {DNNL_ARG_WEIGHTS, mem(p.w_qkv_md, Data(w.w_qkv))},
                             {DNNL_ARG_BIAS, mem(p.b_qkv_md, Data(w.b_qkv))},
                             {DNNL_ARG_DST, qkv},
                             {DNNL_ARG_SCRATCHPAD, scratch}});
      char* base = static_cast<char*>(qkv.get_data_handle());
      const size_t hb = static_cast<size_t>(p.h) * sizeof(float);
      p.scores.execute(stream, {{DNNL_ARG_SRC, mem(p.q_md, base)},
                                {DNNL_ARG_WEIGHTS, mem(p.kt_md, base + hb)},
                                {DNNL_ARG_DST, scores},
                                {post(0), mask},
                                {DNNL_ARG_SCRATCHPAD, scratch}});
      p.softmax.execute(
          stream, {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}, {DNNL_ARG_SCRATCHPAD, scratch}});
      p.context.execute(stream, {{DNNL_ARG_SRC, scores},
                                 {DNNL_ARG_WEIGHTS, mem(p.v_md, base + 2 * hb)},
                                 {DNNL_ARG_DST, mem(p.ctx_view_md, ctx.get_data_handle())},
                                 {DNNL_ARG_SCRATCHPAD, scratch}});
      p.out_proj.execute(stream, {{DNNL_ARG_SRC, ctx},
                                  {DNNL_ARG_WEIGHTS, mem(p.w_o_md, Data(w.w_o))},
                                  {DNNL_ARG_BIAS, mem(p.b_o_md, Data(w.b_o))},
                                  {DNNL_ARG_DST, x1},
                                  {post(0), x_rows},
                                  {DNNL_ARG_SCRATCHPAD, scratch}});
      p.ln.execute(stream, {{DNNL_ARG_SRC, x1},
                            {DNNL_ARG_DST, ln2},
                            {DNNL_ARG_SCALE, param(w.ln2_scale)},
                            {DNNL_ARG_SHIFT, param(w.ln2_shift)},
                            {DNNL_ARG_SCRATCHPAD, scratch}});
      p.up.execute(stream, {{DNNL_ARG_SRC, ln2},
                            {DNNL_ARG_WEIGHTS, mem(p.w_up_md, Data(w.w_up))},
                            {DNNL_ARG_BIAS, mem(p.b_up_md, Data(w.b_up))},
                            {DNNL_ARG_DST, hidden4},
                            {DNNL_ARG_SCRATCHPAD, scratch}});
      p.down.execute(stream, {{DNNL_ARG_SRC, hidden4},
                              {DNNL_ARG_WEIGHTS, mem(p.w_down_md, Data(w.w_down))},
                              {DNNL_ARG_BIAS, mem(p.b_down_md, Data(w.b_down))},
                              {DNNL_ARG_DST, y_rows},
                              {post(0), x1},
                              {DNNL_ARG_SCRATCHPAD, scratch}});
      stream.wait();
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_out_of_memory) {
        return absl::ResourceExhaustedError(Cat("oneDNN run: out of memory: ", e.what()));
      }
      return absl::InternalError(Cat("oneDNN run failed: ", e.what()));
    }
    return absl::OkStatus();
  }

  Buffer TakeWorkspace() {
    {
      MutexLock lock(&mu_);
      if (!own_free_.empty()) {
        Buffer ws = std::move(own_free_.back());
        own_free_.pop_back();
        return ws;
      }
    }
    Buffer ws = NewBuffer(layout_.bytes);  // more concurrent runs than workspaces: grow
    own_bytes_.fetch_add(static_cast<int64_t>(layout_.bytes), std::memory_order_relaxed);
    return ws;
  }
  void ReturnWorkspace(Buffer ws) {
    MutexLock lock(&mu_);
    own_free_.push_back(std::move(ws));
  }

  dnnl::engine engine_;
  std::shared_ptr<const Weights> w_;
  std::unique_ptr<Primitives> p_;
  const Layout layout_;
  int seq_dim_;  // which gear dimension carries the sequence (for the key mask)
  const std::shared_ptr<WorkspaceArena> arena_;  // null: own workspaces
  // Bytes of the gear's own workspaces (grows with its concurrent runs;
  // relaxed: reports only).
  std::atomic<int64_t> own_bytes_{0};
  Mutex mu_;  // guards the free own workspaces
  std::vector<Buffer> own_free_ ABSL_GUARDED_BY(mu_);
};

class OneDnnTransformerBackend final : public Backend {
 public:
  explicit OneDnnTransformerBackend(const TransformerBlockOptions& o)
      : options_(o),
        engine_(dnnl::engine::kind::cpu, 0),
        weights_(MakeWeights(o)),
        arena_(o.shared_arena ? std::make_shared<WorkspaceArena>(o.arena_limit_bytes) : nullptr) {
    TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, o.hidden}, {}};
    if (o.batch_dimension >= 0) x.bindings.push_back({0, o.batch_dimension});
    x.bindings.push_back({1, o.seq_dimension});
    TensorSpec y = x;
    y.name = "y";
    signature_.inputs.push_back(x);
    signature_.outputs.push_back(y);
  }

  std::string_view name() const override { return "onednn"; }
  const ModelSignature& signature() const override { return signature_; }
  DLDevice device() const override { return {kDLCPU, 0}; }
  ArenaUsage arena_usage() const override {
    return arena_ != nullptr ? arena_->usage() : ArenaUsage{};
  }
  int quadratic_memory_dimension() const override { return options_.seq_dimension; }

  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears) override {
    const int need = std::max(options_.batch_dimension, options_.seq_dimension) + 1;
    if (static_cast<int>(gears.size()) < need) {
      return internal::InvalidField("gears", Cat(gears.size(), " sizes"), Cat("at least ", need));
    }
    const int64_t b =
        options_.batch_dimension >= 0 ? gears[static_cast<size_t>(options_.batch_dimension)] : 1;
    const int64_t s = gears[static_cast<size_t>(options_.seq_dimension)];
    const double score_bytes = static_cast<double>(b) * static_cast<double>(options_.heads) *
                               static_cast<double>(s) * static_cast<double>(s) * 4.0;
    if (b < 1 || s < 1 || score_bytes > 8e9) {
      return internal::InvalidField("gear", Cat("batch ", b, " x seq ", s),
                                    "shapes whose attention scores fit in 8 GB");
    }
    try {
      auto p = std::make_unique<Primitives>();
      p->b = b;
      p->s = s;
      p->h = options_.hidden;
      p->heads = options_.heads;
      p->hd = options_.hidden / options_.heads;
      p->mlp = options_.hidden * options_.mlp_ratio;
      p->rows = b * s;
      const int64_t h = p->h, hd = p->hd, nh = p->heads, rows = p->rows, m = p->mlp;
      p->x_md = memory::desc({b, s, h}, dt::f32, tag::abc);
      p->row_h_md = memory::desc({rows, h}, dt::f32, tag::ab);
      p->qkv_md = memory::desc({rows, 3 * h}, dt::f32, tag::ab);
      p->q_md = memory::desc({b, nh, s, hd}, dt::f32, memory::dims{s * 3 * h, hd, 3 * h, 1});
      p->kt_md = memory::desc({b, nh, hd, s}, dt::f32, memory::dims{s * 3 * h, hd, 1, 3 * h});
      p->v_md = memory::desc({b, nh, s, hd}, dt::f32, memory::dims{s * 3 * h, hd, 3 * h, 1});
      p->scores_md = memory::desc({b, nh, s, s}, dt::f32, tag::abcd);
      p->mask_md = memory::desc({1, 1, 1, s}, dt::f32, tag::abcd);
      p->ctx_md = memory::desc({rows, h}, dt::f32, tag::ab);
      p->ctx_view_md = memory::desc({b, nh, s, hd}, dt::f32, memory::dims{s * h, hd, h, 1});
      p->hidden4_md = memory::desc({rows, m}, dt::f32, tag::ab);
      p->ln_param_md = memory::desc({h}, dt::f32, tag::a);
      p->w_qkv_md = memory::desc({h, 3 * h}, dt::f32, tag::ab);
      p->b_qkv_md = memory::desc({1, 3 * h}, dt::f32, tag::ab);
      p->w_o_md = memory::desc({h, h}, dt::f32, tag::ab);
      p->b_o_md = memory::desc({1, h}, dt::f32, tag::ab);
      p->w_up_md = memory::desc({h, m}, dt::f32, tag::ab);
      p->b_up_md = memory::desc({1, m}, dt::f32, tag::ab);
      p->w_down_md = memory::desc({m, h}, dt::f32, tag::ab);
      p->b_down_md = memory::desc({1, h}, dt::f32, tag::ab);

      auto attr_with = [](dnnl::post_ops ops, float scale = 1.0f) {
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (scale != 1.0f) attr.set_output_scales(0, {scale});
        attr.set_post_ops(ops);
        return attr;
      };
      size_t scratch = 0;
      auto track = [&](const dnnl::primitive_desc_base& pd) {
        scratch = std::max(scratch, pd.scratchpad_desc().get_size());
      };
      {
        dnnl::layer_normalization_forward::desc d(
            dnnl::prop_kind::forward_inference, p->row_h_md, 1e-5f,
            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
        dnnl::layer_normalization_forward::primitive_desc pd(d, attr_with({}), engine_);
        track(pd);
        p->ln = dnnl::layer_normalization_forward(pd);
      }
      auto matmul = [&](const memory::desc& src, const memory::desc& wei, const memory::desc* bias,
                        const memory::desc& dst, dnnl::primitive_attr attr) {
        dnnl::matmul::desc d =
            bias ? dnnl::matmul::desc(src, wei, *bias, dst) : dnnl::matmul::desc(src, wei, dst);
        dnnl::matmul::primitive_desc pd(d, attr, engine_);
        track(pd);
        return dnnl::matmul(pd);
      };
      p->qkv = matmul(p->row_h_md, p->w_qkv_md, &p->b_qkv_md, p->qkv_md, attr_with({}));
      {
        dnnl::post_ops ops;
        ops.append_binary(algorithm::binary_add, p->mask_md);
        p->scores = matmul(p->q_md, p->kt_md, nullptr, p->scores_md,
                           attr_with(ops, 1.0f / std::sqrt(static_cast<float>(hd))));
      }
      {
        dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, p->scores_md, 3);
        dnnl::softmax_forward::primitive_desc pd(d, attr_with({}), engine_);
        track(pd);
        p->softmax = dnnl::softmax_forward(pd);
      }
      p->context = matmul(p->scores_md, p->v_md, nullptr, p->ctx_view_md, attr_with({}));
      {
        dnnl::post_ops ops;
        ops.append_binary(algorithm::binary_add, p->row_h_md);
        p->out_proj = matmul(p->ctx_md, p->w_o_md, &p->b_o_md, p->row_h_md, attr_with(ops));
      }
      {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
        p->up = matmul(p->row_h_md, p->w_up_md, &p->b_up_md, p->hidden4_md, attr_with(ops));
      }
      {
        dnnl::post_ops ops;
        ops.append_binary(algorithm::binary_add, p->row_h_md);
        p->down = matmul(p->hidden4_md, p->w_down_md, &p->b_down_md, p->row_h_md, attr_with(ops));
      }
      p->scratchpad_bytes = scratch;
      return std::shared_ptr<Executable>(std::make_shared<OneDnnBlockExecutable>(
          engine_, weights_, std::move(p), options_.seq_dimension, arena_));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          Cat("oneDNN block: out of memory compiling batch ", b, " x seq ", s));
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_out_of_memory) {
        return absl::ResourceExhaustedError(
            Cat("oneDNN block: out of memory compiling batch ", b, " x seq ", s, ": ", e.what()));
      }
      return absl::InternalError(Cat("oneDNN could not create the primitives for batch ", b,
                                     " x seq ", s, ": ", e.what()));
    }
  }

 private:
  TransformerBlockOptions options_;
  dnnl::engine engine_;
  std::shared_ptr<const Weights> weights_;
  // Shared by its executables (they keep it alive); null without shared_arena.
  std::shared_ptr<WorkspaceArena> arena_;
  ModelSignature signature_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeOneDnnTransformerBackend(
    const TransformerBlockOptions& o) {
  if (o.hidden < 1 || o.hidden > 16384) {
    return internal::InvalidFieldValue("hidden", o.hidden, "an integer in [1, 16384]");
  }
  if (o.heads < 1 || o.hidden % o.heads != 0) {
    return internal::InvalidFieldValue("heads", o.heads, Cat("a divisor of hidden = ", o.hidden));
  }
  if (o.arena_limit_bytes < 0) {
    return internal::InvalidFieldValue("arena_limit_bytes", o.arena_limit_bytes,
                                       "bytes >= 0 (0: no limit)");
  }
  if (o.mlp_ratio < 1 || o.mlp_ratio > 16) {
    return internal::InvalidFieldValue("mlp_ratio", o.mlp_ratio, "an integer in [1, 16]");
  }
  if (o.seq_dimension < 0 || o.seq_dimension >= kMaxDimensions ||
      o.batch_dimension >= kMaxDimensions || o.batch_dimension < -1 ||
      o.batch_dimension == o.seq_dimension) {
    return internal::InvalidField("batch_dim/seq_dim", Cat(o.batch_dimension, "/", o.seq_dimension),
                                  "two different dimension indexes (batch_dim may be -1)");
  }
  // A gear's compile cost and memory are its own: no primitive cache.
  dnnl::set_primitive_cache_capacity(0);
  try {
    return std::unique_ptr<Backend>(new OneDnnTransformerBackend(o));
  } catch (const dnnl::error& e) {
    return absl::InternalError(Cat("oneDNN CPU engine unavailable: ", e.what()));
  }
}

absl::Status RegisterOneDnnBackend(BackendRegistry& registry) {
  return registry.Register(
      "onednn", [](const BackendParams& params) -> absl::StatusOr<std::unique_ptr<Backend>> {
        for (const auto& [key, value] : params) {
          static const char* known[] = {"hidden",    "heads",   "mlp_ratio", "seed",
                                        "batch_dim", "seq_dim", "arena",     "arena_limit"};
          if (std::find(std::begin(known), std::end(known), key) == std::end(known)) {
            return internal::InvalidField(Cat("onednn.", key), Cat("\"", value, "\""),
                                          "unknown parameter; known: hidden, heads, mlp_ratio, "
                                          "seed, batch_dim, seq_dim, arena, arena_limit");
          }
        }
        TransformerBlockOptions o;
        auto get = [&](const char* key, int64_t fallback, int64_t min, int64_t max, int64_t* out) {
          auto v = IntParam(params, key, fallback, min, max);
          if (v.ok()) *out = *v;
          return v.status();
        };
        int64_t seed = 1, batch = 0, seq = 1, arena = 1;
        for (absl::Status s :
             {get("hidden", 64, 1, 16384, &o.hidden), get("heads", 4, 1, 16384, &o.heads),
              get("mlp_ratio", 4, 1, 16, &o.mlp_ratio), get("seed", 1, 0, INT64_MAX, &seed),
              get("batch_dim", 0, -1, kMaxDimensions - 1, &batch),
              get("seq_dim", 1, 0, kMaxDimensions - 1, &seq), get("arena", 1, 0, 1, &arena),
              get("arena_limit", 0, 0, INT64_MAX, &o.arena_limit_bytes)}) {
          if (!s.ok()) return s;
        }
        o.seed = static_cast<uint64_t>(seed);
        o.batch_dimension = static_cast<int>(batch);
        o.seq_dimension = static_cast<int>(seq);
        o.shared_arena = arena != 0;
        return MakeOneDnnTransformerBackend(o);
      });
}

}  // namespace gearbox
