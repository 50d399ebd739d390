// Element-wise and row-wise CPU kernels on f32 row-major buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ced::kernels {

// out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w for rows i of [n, d]; may alias.
void RmsNormCpu(const float* x, int n, int d, const float* w, float eps, float* out);
// Rotate-half RoPE in place on x [n, heads, head_dim] at positions[i].
void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions, double theta);
// gate[i] = silu(gate[i]) * up[i].
void SiluMulCpu(float* gate, const float* up, size_t count);
// x[i] += y[i].
void AddCpu(float* x, const float* y, size_t count);
// Makes BLAS single-threaded: parallelism comes from OpenMP around it.
void SetBlasSingleThreaded();
// y[n, out] = x[n, in] * w[out, in]^T through BLAS, columns split across threads.
void GemmCpu(const float* x, int n, int in, const float* w, int out, float* y);

}  // namespace ced::kernels
