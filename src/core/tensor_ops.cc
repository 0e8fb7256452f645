#include "gearbox/tensor_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "fmt/ranges.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::InvalidField;

// Strided view in bytes, the common ground of every copy below.
struct ByteView {
  char* base = nullptr;
  int ndim = 0;
  const int64_t* shape = nullptr;
  int64_t byte_strides[kMaxDimensions * 4] = {};
};

constexpr int kMaxTensorRank = kMaxDimensions * 4;

ByteView MakeView(const DLTensor& t, int64_t elem) {
  ByteView v;
  v.base = static_cast<char*>(t.data) + t.byte_offset;
  v.ndim = t.ndim;
  v.shape = t.shape;
  int64_t running = elem;
  for (int i = t.ndim - 1; i >= 0; --i) {
    v.byte_strides[i] = t.strides != nullptr ? t.strides[i] * elem : running;
    running *= t.shape[i];
  }
  return v;
}

// Copies a box of `extent` elements from src (starting at src_start) to dst
// (at dst_start). Axes contiguous in both views are merged first, so a run
// is as long as the layouts allow; contiguous innermost runs use memcpy.
void CopyBox(const ByteView& src, const int64_t* src_start, const ByteView& dst,
             const int64_t* dst_start, const int64_t* extent, int64_t elem) {
  const int n = src.ndim;
  if (n == 0) {
    std::memcpy(dst.base, src.base, elem);
    return;
  }
  for (int i = 0; i < n; ++i) {
    if (extent[i] == 0) return;
  }
  const char* s0 = src.base;
  char* d0 = dst.base;
  for (int i = 0; i < n; ++i) {
    s0 += src_start[i] * src.byte_strides[i];
    d0 += dst_start[i] * dst.byte_strides[i];
  }
  // Merged axes, innermost first.
  int64_t ext[kMaxTensorRank], ss[kMaxTensorRank], ds[kMaxTensorRank];
  int m = 0;
  ext[0] = extent[n - 1];
  ss[0] = src.byte_strides[n - 1];
  ds[0] = dst.byte_strides[n - 1];
  for (int i = n - 2; i >= 0; --i) {
    if (src.byte_strides[i] == ss[m] * ext[m] && dst.byte_strides[i] == ds[m] * ext[m]) {
      ext[m] *= extent[i];
    } else {
      ++m;
      ext[m] = extent[i];
      ss[m] = src.byte_strides[i];
      ds[m] = dst.byte_strides[i];
    }
  }
  const bool inner_contiguous = ss[0] == elem && ds[0] == elem;
  const int first_outer = inner_contiguous ? 1 : 0;
  int64_t index[kMaxTensorRank] = {};
  while (true) {
    const char* sp = s0;
    char* dp = d0;
    for (int a = first_outer; a <= m; ++a) {
      sp += index[a] * ss[a];
      dp += index[a] * ds[a];
    }
    if (inner_contiguous) {
      std::memcpy(dp, sp, static_cast<size_t>(ext[0] * elem));
    } else {
      std::memcpy(dp, sp, static_cast<size_t>(elem));
    }
    int a = first_outer;
    for (; a <= m; ++a) {
      if (++index[a] < ext[a]) break;
      index[a] = 0;
    }
    if (a > m) return;
  }
}

// Writes the pad value into every element of a box of dst.
void FillBox(const ByteView& dst, const int64_t* start, const int64_t* extent,
             const unsigned char* value, int64_t elem) {
  const int n = dst.ndim;
  for (int i = 0; i < n; ++i) {
    if (extent[i] == 0) return;
  }
  if (n == 0) {
    std::memcpy(dst.base, value, static_cast<size_t>(elem));
    return;
  }
  // One run along the innermost axis per index of the outer axes; a
  // contiguous run is filled by doubling memcpy, not element by element.
  const int inner = n - 1;
  const int64_t run = extent[inner];
  const int64_t stride = dst.byte_strides[inner];
  int64_t index[kMaxTensorRank] = {};
  while (true) {
    char* d = dst.base + start[inner] * stride;
    for (int i = 0; i < inner; ++i) d += (start[i] + index[i]) * dst.byte_strides[i];
    if (stride == elem) {
      std::memcpy(d, value, static_cast<size_t>(elem));
      for (int64_t filled = 1; filled < run;) {
        const int64_t chunk = std::min(filled, run - filled);
        std::memcpy(d + filled * elem, d, static_cast<size_t>(chunk * elem));
        filled += chunk;
      }
    } else {
      for (int64_t k = 0; k < run; ++k)
        std::memcpy(d + k * stride, value, static_cast<size_t>(elem));
    }
    int i = inner - 1;
    for (; i >= 0; --i) {
      if (++index[i] < extent[i]) break;
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

absl::Status EncodePadValue(const DLDataType& dtype, double value, unsigned char* out) {
  const int bytes = dtype.bits / 8;
  std::memset(out, 0, 16);
  if (value == 0.0) return absl::OkStatus();  // all-zero bytes are 0 in every dtype here
  auto put = [&](auto typed) { std::memcpy(out, &typed, sizeof(typed)); };
  switch (dtype.code) {
    case kDLFloat:
      if (bytes == 4) return put(static_cast<float>(value)), absl::OkStatus();
      if (bytes == 8) return put(value), absl::OkStatus();
      break;
    case kDLInt:
      if (bytes == 1) return put(static_cast<int8_t>(value)), absl::OkStatus();
      if (bytes == 2) return put(static_cast<int16_t>(value)), absl::OkStatus();
      if (bytes == 4) return put(static_cast<int32_t>(value)), absl::OkStatus();
      if (bytes == 8) return put(static_cast<int64_t>(value)), absl::OkStatus();
      break;
    case kDLUInt:
      if (bytes == 1) return put(static_cast<uint8_t>(value)), absl::OkStatus();
      if (bytes == 2) return put(static_cast<uint16_t>(value)), absl::OkStatus();
      if (bytes == 4) return put(static_cast<uint32_t>(value)), absl::OkStatus();
      if (bytes == 8) return put(static_cast<uint64_t>(value)), absl::OkStatus();
      break;
    default:
      break;
  }
  return InvalidField(
      "pad_value", internal::Cat(value),
      internal::Cat("dtype code ", dtype.code, " with ", dtype.bits, " bits pads only with 0"));
}

absl::Status CheckBindings(const DLTensor& t, std::span<const AxisBinding> bindings,
                           const Variant& v, std::string_view field) {
  for (const AxisBinding& b : bindings) {
    if (b.axis < 0 || b.axis >= t.ndim) {
      return InvalidField(internal::Cat(field, ".axis"), internal::Cat(b.axis),
                          internal::Cat("axes of a rank-", t.ndim, " tensor are 0..", t.ndim - 1));
    }
    if (b.dimension < 0 || b.dimension >= v.num_dimensions) {
      return InvalidField(internal::Cat(field, ".dimension"), internal::Cat(b.dimension),
                          internal::Cat("the plan has ", v.num_dimensions, " dimensions"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ElementBytes(const DLDataType& dtype, std::string_view field) {
  const bool known = dtype.code == kDLInt || dtype.code == kDLUInt || dtype.code == kDLFloat ||
                     dtype.code == kDLBfloat || dtype.code == kDLComplex;
  if (!known || dtype.lanes != 1 || dtype.bits == 0 || dtype.bits % 8 != 0) {
    return InvalidField(
        internal::Cat(field, ".dtype"),
        internal::Cat("code ", dtype.code, " bits ", dtype.bits, " lanes ", dtype.lanes),
        "int, uint, float, bfloat or complex with whole bytes and 1 lane");
  }
  return dtype.bits / 8;
}

absl::Status CheckHostTensor(const DLTensor& tensor, std::span<const int64_t> expected,
                             std::string_view field) {
  if (tensor.device.device_type != kDLCPU && tensor.device.device_type != kDLCUDAHost) {
    return InvalidField(internal::Cat(field, ".device"), internal::Cat(tensor.device.device_type),
                        "host tensors only (kDLCPU or kDLCUDAHost)");
  }
  if (tensor.ndim != static_cast<int>(expected.size()) || tensor.ndim > kMaxTensorRank) {
    return InvalidField(internal::Cat(field, ".ndim"), internal::Cat(tensor.ndim),
                        internal::Cat("rank ", expected.size(), " expected"));
  }
  if (auto bytes = ElementBytes(tensor.dtype, field); !bytes.ok()) return bytes.status();
  if (tensor.data == nullptr) return InvalidField(internal::Cat(field, ".data"), "null", "data");
  for (int i = 0; i < tensor.ndim; ++i) {
    if (tensor.shape[i] != expected[i]) {
      return InvalidField(
          internal::Cat(field, ".shape"),
          internal::Cat("[",
                        fmt::format("{}", fmt::join(tensor.shape, tensor.shape + tensor.ndim, ",")),
                        "]"),
          internal::Cat("shape [", fmt::format("{}", fmt::join(expected, ",")), "] expected"));
    }
  }
  return absl::OkStatus();
}

absl::Status VariantShape(const DLTensor& full, std::span<const AxisBinding> bindings,
                          const Variant& variant, bool use_gear, std::span<int64_t> shape) {
  if (auto s = CheckBindings(full, bindings, variant, "binding"); !s.ok()) return s;
  if (static_cast<int>(shape.size()) < full.ndim) {
    return InvalidField("shape", internal::Cat(shape.size(), " entries"),
                        internal::Cat("room for ", full.ndim));
  }
  for (int i = 0; i < full.ndim; ++i) shape[i] = full.shape[i];
  for (const AxisBinding& b : bindings) {
    shape[b.axis] = use_gear ? variant.gear[b.dimension] : variant.extent[b.dimension];
  }
  return absl::OkStatus();
}

absl::Status GatherChunk(const DLTensor& input, std::span<const AxisBinding> bindings,
                         const Variant& variant, double pad_value, const DLTensor* chunk) {
  if (chunk == nullptr) return InvalidField("chunk", "null", "a destination tensor");
  if (input.ndim > kMaxTensorRank || input.ndim < 0) {
    return InvalidField("input.ndim", internal::Cat(input.ndim),
                        internal::Cat("rank 0..", kMaxTensorRank));
  }
  if (auto s = CheckBindings(input, bindings, variant, "binding"); !s.ok()) return s;
  // The input must cover the request: bound axes reach offset + extent.
  for (const AxisBinding& b : bindings) {
    const int64_t need = variant.offset[b.dimension] + variant.extent[b.dimension];
    if (input.shape[b.axis] < need) {
      return InvalidField(internal::Cat("input.shape[", b.axis, "]"),
                          internal::Cat(input.shape[b.axis]),
                          internal::Cat("the plan reads up to ", need, " along this axis"));
    }
  }
  int64_t chunk_shape[kMaxTensorRank];
  if (auto s = VariantShape(input, bindings, variant, true, {chunk_shape, kMaxTensorRank});
      !s.ok()) {
    return s;
  }
  if (auto s = CheckHostTensor(input, {input.shape, static_cast<size_t>(input.ndim)}, "input");
      !s.ok()) {
    return s;
  }
  if (auto s = CheckHostTensor(*chunk, {chunk_shape, static_cast<size_t>(input.ndim)}, "chunk");
      !s.ok()) {
    return s;
  }
  if (chunk->dtype.code != input.dtype.code || chunk->dtype.bits != input.dtype.bits) {
    return InvalidField("chunk.dtype",
                        internal::Cat("code ", chunk->dtype.code, " bits ", chunk->dtype.bits),
                        "the input's dtype");
  }
  const int64_t elem = input.dtype.bits / 8;
  unsigned char pad_bytes[16];
  if (auto s = EncodePadValue(input.dtype, pad_value, pad_bytes); !s.ok()) return s;

  const ByteView src = MakeView(input, elem);
  const ByteView dst = MakeView(*chunk, elem);
  int64_t src_start[kMaxTensorRank] = {};
  int64_t zero[kMaxTensorRank] = {};
  int64_t extent[kMaxTensorRank];
  for (int i = 0; i < input.ndim; ++i) extent[i] = chunk_shape[i];
  for (const AxisBinding& b : bindings) {
    src_start[b.axis] = variant.offset[b.dimension];
    extent[b.axis] = variant.extent[b.dimension];
  }
  CopyBox(src, src_start, dst, zero, extent, elem);
  // Padding: for each bound axis, the slab [extent, gear) along it (the full
  // range on the other axes; overlaps are filled twice, harmlessly).
  for (const AxisBinding& b : bindings) {
    const int64_t valid = variant.extent[b.dimension];
    const int64_t gear = variant.gear[b.dimension];
    if (gear <= valid) continue;
    int64_t start[kMaxTensorRank] = {};
    int64_t box[kMaxTensorRank];
    for (int i = 0; i < input.ndim; ++i) box[i] = chunk_shape[i];
    start[b.axis] = valid;
    box[b.axis] = gear - valid;
    FillBox(dst, start, box, pad_bytes, elem);
  }
  return absl::OkStatus();
}

absl::Status ScatterChunk(const DLTensor& chunk_output, std::span<const AxisBinding> bindings,
                          const Variant& variant, const DLTensor* output) {
  if (output == nullptr) return InvalidField("output", "null", "a destination tensor");
  if (chunk_output.ndim > kMaxTensorRank || chunk_output.ndim < 0) {
    return InvalidField("chunk_output.ndim", internal::Cat(chunk_output.ndim),
                        internal::Cat("rank 0..", kMaxTensorRank));
  }
  if (auto s = CheckBindings(chunk_output, bindings, variant, "binding"); !s.ok()) return s;
  if (output->ndim != chunk_output.ndim) {
    return InvalidField("output.ndim", internal::Cat(output->ndim),
                        internal::Cat("the chunk output's rank ", chunk_output.ndim));
  }
  // Expected chunk shape: the output's shape with bound axes at gear sizes.
  int64_t chunk_shape[kMaxTensorRank];
  for (int i = 0; i < output->ndim; ++i) chunk_shape[i] = output->shape[i];
  for (const AxisBinding& b : bindings) chunk_shape[b.axis] = variant.gear[b.dimension];
  if (auto s = CheckHostTensor(chunk_output, {chunk_shape, static_cast<size_t>(chunk_output.ndim)},
                               "chunk_output");
      !s.ok()) {
    return s;
  }
  if (auto s =
          CheckHostTensor(*output, {output->shape, static_cast<size_t>(output->ndim)}, "output");
      !s.ok()) {
    return s;
  }
  if (chunk_output.dtype.code != output->dtype.code ||
      chunk_output.dtype.bits != output->dtype.bits) {
    return InvalidField("output.dtype",
                        internal::Cat("code ", output->dtype.code, " bits ", output->dtype.bits),
                        "the chunk output's dtype");
  }
  for (const AxisBinding& b : bindings) {
    const int64_t need = variant.offset[b.dimension] + variant.extent[b.dimension];
    if (output->shape[b.axis] < need) {
      return InvalidField(internal::Cat("output.shape[", b.axis, "]"),
                          internal::Cat(output->shape[b.axis]),
                          internal::Cat("the plan writes up to ", need, " along this axis"));
    }
  }
  const int64_t elem = output->dtype.bits / 8;
  const ByteView src = MakeView(chunk_output, elem);
  const ByteView dst = MakeView(*output, elem);
  int64_t zero[kMaxTensorRank] = {};
  int64_t dst_start[kMaxTensorRank] = {};
  int64_t extent[kMaxTensorRank];
  for (int i = 0; i < output->ndim; ++i) extent[i] = output->shape[i];
  for (const AxisBinding& b : bindings) {
    dst_start[b.axis] = variant.offset[b.dimension];
    extent[b.axis] = variant.extent[b.dimension];
  }
  CopyBox(src, zero, dst, dst_start, extent, elem);
  return absl::OkStatus();
}

}  // namespace gearbox
