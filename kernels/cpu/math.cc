#include "kernels/cpu/math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ced::kernels {
namespace {

// Rows per parallel task of the row-wise kernels.
constexpr int kRowsPerTask = 16;

// Runs rows [0, n) of a row-wise kernel in tasks of kRowsPerTask rows.
template <typename F>
void ForRows(int n, F&& row_fn) {
  const int tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  ParallelFor(
      tasks,
      [&](int t) {
        const int r1 = std::min(n, (t + 1) * kRowsPerTask);
        for (int r = t * kRowsPerTask; r < r1; ++r) row_fn(r);
      },
      n > kRowsPerTask);
}

// Columns [c0, c1) of one target, through BLAS.
void GemmColumns(const float* x, int n, int in, const GemmTarget& t, int c0, int c1) {
  const float* wp = t.w + static_cast<size_t>(c0) * in;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, c1 - c0, in, 1.0f, x, in, wp, in,
              t.accumulate ? 1.0f : 0.0f, t.y + c0, t.out);
}

}  // namespace

void RmsNormCpu(const float* x, int n, int d, const float* w, float eps, float* out) {
  const KernelTable& k = ActiveKernels();
  ForRows(n, [&](int i) {
    k.rms_norm_row(x + static_cast<size_t>(i) * d, d, w, eps, out + static_cast<size_t>(i) * d);
  });
}

void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions, double theta) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / head_dim);
  std::vector<float> cs(half), sn(half);
  const auto rope_row = ActiveKernels().rope_row;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < half; ++i) {
      const double angle = positions[r] * inv_freq[i];
      cs[i] = static_cast<float>(std::cos(angle));
      sn[i] = static_cast<float>(std::sin(angle));
    }
    rope_row(x + static_cast<size_t>(r) * heads * head_dim, heads, head_dim, cs.data(),
             sn.data());
  }
}

void RopeTable::Reserve(double theta, int head_dim, int positions) {
  if (theta != theta_ || head_dim != head_dim_) {
    theta_ = theta;
    head_dim_ = head_dim;
    half_ = head_dim / 2;
    rows_ = 0;
    cos_.clear();
    sin_.clear();
  }
  if (positions <= rows_) return;
  // Grow geometrically: decode asks for one more position per step.
  const int rows = std::max(positions, std::min(2 * rows_, positions + 4096));
  std::vector<double> inv_freq(half_);
  for (int i = 0; i < half_; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / head_dim);
  cos_.resize(static_cast<size_t>(rows) * half_);
  sin_.resize(static_cast<size_t>(rows) * half_);
  for (int p = rows_; p < rows; ++p) {
    for (int i = 0; i < half_; ++i) {
      const double angle = p * inv_freq[i];
      cos_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::cos(angle));
      sin_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::sin(angle));
    }
  }
  rows_ = rows;
}

void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions,
             const RopeTable& table) {
  const KernelTable& k = ActiveKernels();
  ForRows(n, [&](int r) {
    k.rope_row(x + static_cast<size_t>(r) * heads * head_dim, heads, head_dim,
            table.cos_row(positions[r]), table.sin_row(positions[r]));
  });
}

void SiluMulCpu(float* gate, const float* up, size_t count) {
  constexpr size_t kChunk = 16384;
  const KernelTable& k = ActiveKernels();
  const int tasks = static_cast<int>((count + kChunk - 1) / kChunk);
  ParallelFor(
      tasks,
      [&](int t) {
        const size_t i0 = t * kChunk, i1 = std::min(count, i0 + kChunk);
        k.silu_mul(gate + i0, up + i0, i1 - i0);
      },
      count > 4 * kChunk);
}

void AddCpu(float* x, const float* y, size_t count) { ActiveKernels().add(x, y, count); }

void SetBlasSingleThreaded() { openblas_set_num_threads(1); }

void GemmCpu(const float* x, int n, int in, const float* w, int out, float* y) {
  GemmTarget t;
  t.w = w;
  t.out = out;
  t.y = y;
  GemmMultiCpu(x, n, in, &t, 1);
}

void GemmMultiCpu(const float* x, int n, int in, const GemmTarget* targets, int count) {
  int total = 0;
  for (int i = 0; i < count; ++i) total += targets[i].out;
  if (total == 0 || n == 0) return;
  const double flops = 2.0 * n * in * total;
  const bool parallel = flops >= 2e5;

  if (n == 1) {
    // Batch 1 is a stream over the weights: tasks of ~64 KiB of rows, taken
    // dynamically so a thread that loses its core holds up no fixed share.
    const int rows_per_task =
        std::max(4, static_cast<int>((65536 / (static_cast<size_t>(in) * 4)) / 4 * 4));
    std::vector<std::pair<int, int>> tasks;  // (target, first row)
    for (int i = 0; i < count; ++i) {
      for (int r = 0; r < targets[i].out; r += rows_per_task) tasks.emplace_back(i, r);
    }
    const auto gemv_rows = ActiveKernels().gemv_rows;
    ParallelFor(
        static_cast<int>(tasks.size()),
        [&](int k) {
          const GemmTarget& t = targets[tasks[k].first];
          const int r0 = tasks[k].second, r1 = std::min(t.out, r0 + rows_per_task);
          gemv_rows(x, in, t.w, r0, r1, t.y, t.accumulate);
        },
        parallel);
    return;
  }

  // The outputs' columns side by side, one contiguous range per thread
  // (BLAS packs the input once per call: few, wide calls).
  const int threads = parallel ? PoolThreads() : 1;
  ParallelRun(
      [&](int thread, int nthreads) {
        const int per = ((total + nthreads - 1) / nthreads + 15) / 16 * 16;
        const int v0 = thread * per, v1 = std::min(total, v0 + per);
        int base = 0;
        for (int i = 0; i < count && base < v1; base += targets[i].out, ++i) {
          const int c0 = std::max(v0 - base, 0), c1 = std::min(v1 - base, targets[i].out);
          if (c0 < c1) GemmColumns(x, n, in, targets[i], c0, c1);
        }
      },
      threads);
}

}  // namespace ced::kernels
