// Transform and recover on real tensors (DLPack, host memory).
//
// A plan says which chunk of the request each variant covers; these
// functions move the bytes: GatherChunk builds a variant's padded input,
// ScatterChunk puts the valid part of a variant's output back in place.
// Recovering a request is ScatterChunk over every variant of its plan: it
// slices padding off and concatenates split chunks on every output axis that
// is bound to a gear dimension, not only the batch axis.
#ifndef GEARBOX_TENSOR_OPS_H_
#define GEARBOX_TENSOR_OPS_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "gearbox/export.h"
#include "gearbox/plan.h"

namespace gearbox {

// Tensor axis `axis` has the size of gear dimension `dimension`.
struct AxisBinding {
  int axis = 0;
  int dimension = 0;
};

// Bytes per element of a supported dtype (lanes == 1, bits a multiple of 8),
// or an error naming `field`.
GEARBOX_EXPORT absl::StatusOr<int64_t> ElementBytes(const DLDataType& dtype,
                                                    std::string_view field);

// Checks that `tensor` is a host tensor with data, a supported dtype, and the
// shape `expected` (strides may be anything; null means row-major compact).
GEARBOX_EXPORT absl::Status CheckHostTensor(const DLTensor& tensor,
                                            std::span<const int64_t> expected,
                                            std::string_view field);

// The shape of `full` with each bound axis replaced by the variant's gear
// (`use_gear`) or extent. `shape` must hold full.ndim entries.
GEARBOX_EXPORT absl::Status VariantShape(const DLTensor& full,
                                         std::span<const AxisBinding> bindings,
                                         const Variant& variant, bool use_gear,
                                         std::span<int64_t> shape);

// Destination tensors are descriptors of caller-owned memory: the data they
// point to is written, the descriptors themselves are not.
//
// Copies the part of `input` covered by `variant` into `chunk`, whose bound
// axes have the variant's gear sizes; the padding is filled with `pad_value`
// (converted to the dtype; a non-zero value needs an integer or IEEE dtype).
GEARBOX_EXPORT absl::Status GatherChunk(const DLTensor& input,
                                        std::span<const AxisBinding> bindings,
                                        const Variant& variant, double pad_value,
                                        const DLTensor* chunk);

// Copies the valid part of `chunk_output` (bound axes at gear sizes) into
// `output` (bound axes at request sizes) at the variant's offsets.
GEARBOX_EXPORT absl::Status ScatterChunk(const DLTensor& chunk_output,
                                         std::span<const AxisBinding> bindings,
                                         const Variant& variant, const DLTensor* output);

}  // namespace gearbox

#endif  // GEARBOX_TENSOR_OPS_H_
