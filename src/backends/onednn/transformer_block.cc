#include <cmath>
#include <random>

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

// Activations of one run (a gear keeps a pool of them, one per concurrent run).
struct Workspace {
  std::vector<float> ln1, qkv, scores, ctx, x1, ln2, hidden4, mask;
  std::vector<uint8_t> scratchpad;
  size_t bytes() const {
    return (ln1.size() + qkv.size() + scores.size() + ctx.size() + x1.size() + ln2.size() +
            hidden4.size() + mask.size()) *
               sizeof(float) +
           scratchpad.size();
  }
};

class OneDnnBlockExecutable final : public Executable {
 public:
  OneDnnBlockExecutable(dnnl::engine engine, std::shared_ptr<const Weights> w,
                        std::unique_ptr<Primitives> p, int seq_dim)
      : engine_(std::move(engine)), w_(std::move(w)), p_(std::move(p)), seq_dim_(seq_dim) {
    free_.push_back(NewWorkspace());  // compile pays for the first one
    bytes_ = static_cast<int64_t>(free_.back()->bytes());
  }

  int64_t bytes() const override { return bytes_; }

  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                   const RunShape& shape) override {
    if (inputs.size() != 1 || outputs.size() != 1) {
      return internal::InvalidField("tensors", Cat(inputs.size(), " in / ", outputs.size(), " out"),
                                    "1 input x and 1 output y");
    }
    const int64_t valid_s = shape.extent[seq_dim_];
    std::unique_ptr<Workspace> ws = TakeWorkspace();
    // Key mask: 0 for valid keys, a large negative for padding (finite, so
    // exp() gives 0 without inf - inf).
    for (int64_t j = 0; j < p_->s; ++j)
      ws->mask[static_cast<size_t>(j)] = j < valid_s ? 0.0f : -1e30f;
    try {
      dnnl::stream stream(engine_);
      const Primitives& p = *p_;
      auto mem = [&](const memory::desc& md, const void* ptr) {
        return memory(md, engine_, const_cast<void*>(ptr));
      };
      memory x = mem(p.x_md, static_cast<const char*>(inputs[0].data) + inputs[0].byte_offset);
      memory y = mem(p.x_md, static_cast<const char*>(outputs[0].data) + outputs[0].byte_offset);
      memory scratch =
          mem(memory::desc({static_cast<int64_t>(ws->scratchpad.size())}, dt::u8, tag::a),
              ws->scratchpad.data());
      memory ln1 = mem(p.row_h_md, ws->ln1.data()), qkv = mem(p.qkv_md, ws->qkv.data());
      memory scores = mem(p.scores_md, ws->scores.data()), mask = mem(p.mask_md, ws->mask.data());
      memory ctx = mem(p.ctx_md, ws->ctx.data()), x1 = mem(p.row_h_md, ws->x1.data());
      memory ln2 = mem(p.row_h_md, ws->ln2.data()), hidden4 = mem(p.hidden4_md, ws->hidden4.data());
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
      ReturnWorkspace(std::move(ws));
      return absl::InternalError(Cat("oneDNN run failed: ", e.what()));
    }
    ReturnWorkspace(std::move(ws));
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Workspace> NewWorkspace() const {
    const Primitives& p = *p_;
    auto ws = std::make_unique<Workspace>();
    const size_t rows = static_cast<size_t>(p.rows), h = static_cast<size_t>(p.h);
    ws->ln1.assign(rows * h, 0);
    ws->qkv.assign(rows * 3 * h, 0);
    ws->scores.assign(static_cast<size_t>(p.b * p.heads * p.s * p.s), 0);
    ws->ctx.assign(rows * h, 0);
    ws->x1.assign(rows * h, 0);
    ws->ln2.assign(rows * h, 0);
    ws->hidden4.assign(rows * static_cast<size_t>(p.mlp), 0);
    ws->mask.assign(static_cast<size_t>(p.s), 0);
    ws->scratchpad.assign(std::max<size_t>(p.scratchpad_bytes, 1), 0);
    return ws;
  }
  std::unique_ptr<Workspace> TakeWorkspace() {
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        auto ws = std::move(free_.back());
        free_.pop_back();
        return ws;
      }
    }
    return NewWorkspace();  // more concurrent runs than workspaces: grow
  }
  void ReturnWorkspace(std::unique_ptr<Workspace> ws) {
    MutexLock lock(&mu_);
    free_.push_back(std::move(ws));
  }

  dnnl::engine engine_;
  std::shared_ptr<const Weights> w_;
  std::unique_ptr<Primitives> p_;
  int seq_dim_;  // which gear dimension carries the sequence (for the key mask)
  int64_t bytes_ = 0;
  Mutex mu_;  // guards the free workspaces
  std::vector<std::unique_ptr<Workspace>> free_ ABSL_GUARDED_BY(mu_);
};

class OneDnnTransformerBackend final : public Backend {
 public:
  explicit OneDnnTransformerBackend(const TransformerBlockOptions& o)
      : options_(o), engine_(dnnl::engine::kind::cpu, 0), weights_(MakeWeights(o)) {
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
          engine_, weights_, std::move(p), options_.seq_dimension));
    } catch (const dnnl::error& e) {
      return absl::InternalError(Cat("oneDNN could not create the primitives for batch ", b,
                                     " x seq ", s, ": ", e.what()));
    }
  }

 private:
  TransformerBlockOptions options_;
  dnnl::engine engine_;
  std::shared_ptr<const Weights> weights_;
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
          static const char* known[] = {"hidden", "heads",     "mlp_ratio",
                                        "seed",   "batch_dim", "seq_dim"};
          if (std::find(std::begin(known), std::end(known), key) == std::end(known)) {
            return internal::InvalidField(
                Cat("onednn.", key), Cat("\"", value, "\""),
                "unknown parameter; known: hidden, heads, mlp_ratio, seed, batch_dim, seq_dim");
          }
        }
        TransformerBlockOptions o;
        auto get = [&](const char* key, int64_t fallback, int64_t min, int64_t max, int64_t* out) {
          auto v = IntParam(params, key, fallback, min, max);
          if (v.ok()) *out = *v;
          return v.status();
        };
        int64_t seed = 1, batch = 0, seq = 1;
        for (absl::Status s :
             {get("hidden", 64, 1, 16384, &o.hidden), get("heads", 4, 1, 16384, &o.heads),
              get("mlp_ratio", 4, 1, 16, &o.mlp_ratio), get("seed", 1, 0, INT64_MAX, &seed),
              get("batch_dim", 0, -1, kMaxDimensions - 1, &batch),
              get("seq_dim", 1, 0, kMaxDimensions - 1, &seq)}) {
          if (!s.ok()) return s;
        }
        o.seed = static_cast<uint64_t>(seed);
        o.batch_dimension = static_cast<int>(batch);
        o.seq_dimension = static_cast<int>(seq);
        return MakeOneDnnTransformerBackend(o);
      });
}

}  // namespace gearbox
