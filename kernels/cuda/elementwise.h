// Element-wise and row-wise CUDA kernels on f32 row-major device buffers.
//
// Every pointer is device memory unless named `_host`; work is queued on
// `stream` and the call returns without waiting. Each function returns the
// launch status (cudaSuccess, or the error of the launch).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ced::kernels {

// out[i, :] = table[tokens[i], :]; table [vocab, d], out [n, d]; tokens on
// the device, each in [0, vocab).
cudaError_t EmbedCuda(const int32_t* tokens, int n, const float* table, int d, float* out,
                      cudaStream_t stream);
// out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w for rows of [n, d]; may alias.
// The sum of squares is accumulated in double, like the CPU kernel.
cudaError_t RmsNormCuda(const float* x, int n, int d, const float* w, float eps, float* out,
                        cudaStream_t stream);
// Fused residual: x[i] += y[i], then out[i] = rmsnorm(x[i], w). out must not
// alias y.
cudaError_t AddRmsNormCuda(float* x, const float* y, int n, int d, const float* w, float eps,
                           float* out, cudaStream_t stream);
// Rotate-half RoPE in place on x [n, heads, head_dim] at positions[i]
// (device array of n). Angles are computed in double, like the CPU kernel.
cudaError_t RopeCuda(float* x, int n, int heads, int head_dim, const int32_t* positions,
                     double theta, cudaStream_t stream);
// gate[i] = silu(gate[i]) * up[i].
cudaError_t SiluMulCuda(float* gate, const float* up, size_t count, cudaStream_t stream);
// x[i] += y[i].
cudaError_t AddCuda(float* x, const float* y, size_t count, cudaStream_t stream);
// Mixture-of-experts combine (DESIGN.md §1.7): for each row i < n of x [n, d],
// x[i] += sum over j < k, in order, of weights[i*k+j] * y[rows[i*k+j], :].
// rows and weights are device arrays of n*k; y holds the experts' outputs.
cudaError_t MoeCombineCuda(float* x, int n, int d, int k, const float* y, const int32_t* rows,
                           const float* weights, cudaStream_t stream);
// dst[i] = bf16(src[i]) (round to nearest even), for bf16 GEMM inputs.
cudaError_t F32ToBf16Cuda(const float* src, uint16_t* dst, size_t count, cudaStream_t stream);

}  // namespace ced::kernels
