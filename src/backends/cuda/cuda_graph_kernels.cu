// Kernels of the built-in "cuda_graph" model: y = tanh(x w + b) at valid
// positions (w, b fixed per channel), then each valid position adds the mean
// of y over the valid sequence positions of its (batch, channel). Padding is
// never read for valid outputs, and padded outputs are written as 0.
// Plain C++17 for nvcc; the C++20 side wraps it (cuda_graph_backend.cc).
#include <cuda_runtime.h>

#include <cstdint>

namespace gearbox {
namespace {

__global__ void AffineTanh(const float* x, float* y, const int64_t* valid, int batch_dim,
                           int seq_dim, int64_t batch, int64_t seq, int64_t hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch * seq * hidden) return;
  const int64_t c = i % hidden;
  const int64_t s = (i / hidden) % seq;
  const int64_t b = i / (hidden * seq);
  const bool in_batch = batch_dim < 0 || b < valid[batch_dim];
  const float w = 0.5f + 0.01f * static_cast<float>(c % 17);
  const float bias = 0.1f * static_cast<float>(c % 5) - 0.2f;
  y[i] = (in_batch && s < valid[seq_dim]) ? tanhf(x[i] * w + bias) : 0.0f;
}

__global__ void AddValidMean(float* y, const int64_t* valid, int batch_dim, int seq_dim,
                             int64_t batch, int64_t seq, int64_t hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // one (b, c)
  if (i >= batch * hidden) return;
  const int64_t b = i / hidden, c = i % hidden;
  if (batch_dim >= 0 && b >= valid[batch_dim]) return;
  const int64_t n = valid[seq_dim];
  float sum = 0.0f;
  for (int64_t s = 0; s < n; ++s) sum += y[(b * seq + s) * hidden + c];
  const float mean = sum / static_cast<float>(n);
  for (int64_t s = 0; s < n; ++s) y[(b * seq + s) * hidden + c] += mean;
}

}  // namespace

cudaError_t LaunchMaskedAffineMeanKernels(cudaStream_t stream, const int64_t* gears,
                                          void* const* inputs, void* const* outputs,
                                          const int64_t* valid, int batch_dim, int seq_dim,
                                          int64_t hidden) {
  const int64_t batch = batch_dim >= 0 ? gears[batch_dim] : 1;
  const int64_t seq = gears[seq_dim];
  const int64_t n = batch * seq * hidden;
  const int threads = 256;
  AffineTanh<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
      static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), valid, batch_dim,
      seq_dim, batch, seq, hidden);
  AddValidMean<<<static_cast<unsigned>((batch * hidden + threads - 1) / threads), threads, 0,
                 stream>>>(static_cast<float*>(outputs[0]), valid, batch_dim, seq_dim, batch, seq,
                           hidden);
  return cudaGetLastError();
}

}  // namespace gearbox
