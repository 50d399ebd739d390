// Element-wise and row-wise CPU kernels on f32 row-major buffers. Loops big
// enough to pay for it run on the worker pool (kernels/cpu/thread_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ced::kernels {

// out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w for rows i of [n, d]; may alias.
void RmsNormCpu(const float* x, int n, int d, const float* w, float eps, float* out);
// Rotate-half RoPE in place on x [n, heads, head_dim] at positions[i].
void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions, double theta);

// cos/sin of every (position, frequency) pair RoPE needs, computed once:
// rows [0, positions) of half = head_dim / 2 values, the same float values
// RopeCpu computes (double angle, rounded once).
class RopeTable {
 public:
  // Makes rows [0, positions) available for (theta, head_dim); recomputes
  // everything when theta or head_dim change.
  void Reserve(double theta, int head_dim, int positions);
  const float* cos_row(int pos) const { return cos_.data() + static_cast<size_t>(pos) * half_; }
  const float* sin_row(int pos) const { return sin_.data() + static_cast<size_t>(pos) * half_; }
  int half() const { return half_; }

 private:
  double theta_ = 0;
  int head_dim_ = 0, half_ = 0, rows_ = 0;
  std::vector<float> cos_, sin_;
};
// RopeCpu with the angles from `table` (reserved for every position used).
void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions,
             const RopeTable& table);

// gate[i] = silu(gate[i]) * up[i].
void SiluMulCpu(float* gate, const float* up, size_t count);
// x[i] += y[i].
void AddCpu(float* x, const float* y, size_t count);
// Makes BLAS single-threaded: parallelism comes from the worker pool around it.
void SetBlasSingleThreaded();

// One output of a GEMM: y[n, out] = x[n, in] * w[out, in]^T, or y += that
// when `accumulate`.
struct GemmTarget {
  const float* w = nullptr;
  int out = 0;
  float* y = nullptr;
  bool accumulate = false;
};
// y[n, out] = x[n, in] * w[out, in]^T through BLAS, columns split across threads.
void GemmCpu(const float* x, int n, int in, const float* w, int out, float* y);
// Several products of the same input in one parallel loop: the outputs'
// columns, side by side, are split across the threads. Batch-1 products
// (n == 1) stream each weight row once through a SIMD dot-product kernel.
void GemmMultiCpu(const float* x, int n, int in, const GemmTarget* targets, int count);

}  // namespace ced::kernels
