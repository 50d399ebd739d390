#include "kernels/cpu/math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/thread_pool.h"

namespace ced::kernels {
namespace {

// Rows per parallel task of the row-wise kernels.
constexpr int kRowsPerTask = 16;

void RmsNormRow(const float* xi, int d, const float* w, float eps, float* oi) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
#pragma omp simd
  for (int j = 0; j < d; ++j) oi[j] = xi[j] * inv * w[j];
}

void RopeRow(float* x, int heads, int head_dim, const float* cs, const float* sn) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + static_cast<size_t>(h) * head_dim;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

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

inline float Sum16(V16 v) {
  float s = 0.0f;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}

// y[r] (+)= w[r, :] . x for rows [r0, r1): four weight rows at a time share
// each load of x; each row is read once, front to back.
void GemvRows(const float* x, int in, const float* w, int r0, int r1, float* y, bool acc) {
  const int in16 = in / 16 * 16;
  int r = r0;
  for (; r + 4 <= r1; r += 4) {
    const float* w0 = w + static_cast<size_t>(r) * in;
    const float* w1 = w0 + in;
    const float* w2 = w1 + in;
    const float* w3 = w2 + in;
    V16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int i = 0; i < in16; i += 16) {
      __builtin_prefetch(w0 + i + 4 * in, 0, 0);
      __builtin_prefetch(w2 + i + 4 * in, 0, 0);
      const V16 xv = LoadV16(x + i);
      a0 += LoadV16(w0 + i) * xv;
      a1 += LoadV16(w1 + i) * xv;
      a2 += LoadV16(w2 + i) * xv;
      a3 += LoadV16(w3 + i) * xv;
    }
    float s[4] = {Sum16(a0), Sum16(a1), Sum16(a2), Sum16(a3)};
    for (int i = in16; i < in; ++i) {
      s[0] += w0[i] * x[i];
      s[1] += w1[i] * x[i];
      s[2] += w2[i] * x[i];
      s[3] += w3[i] * x[i];
    }
    for (int k = 0; k < 4; ++k) y[r + k] = acc ? y[r + k] + s[k] : s[k];
  }
  for (; r < r1; ++r) {
    const float* wr = w + static_cast<size_t>(r) * in;
    V16 a = {};
    for (int i = 0; i < in16; i += 16) a += LoadV16(wr + i) * LoadV16(x + i);
    float s = Sum16(a);
    for (int i = in16; i < in; ++i) s += wr[i] * x[i];
    y[r] = acc ? y[r] + s : s;
  }
}

// Columns [c0, c1) of one target, through BLAS.
void GemmColumns(const float* x, int n, int in, const GemmTarget& t, int c0, int c1) {
  const float* wp = t.w + static_cast<size_t>(c0) * in;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, c1 - c0, in, 1.0f, x, in, wp, in,
              t.accumulate ? 1.0f : 0.0f, t.y + c0, t.out);
}

}  // namespace

void RmsNormCpu(const float* x, int n, int d, const float* w, float eps, float* out) {
  ForRows(n, [&](int i) {
    RmsNormRow(x + static_cast<size_t>(i) * d, d, w, eps, out + static_cast<size_t>(i) * d);
  });
}

void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions, double theta) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / head_dim);
  std::vector<float> cs(half), sn(half);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < half; ++i) {
      const double angle = positions[r] * inv_freq[i];
      cs[i] = static_cast<float>(std::cos(angle));
      sn[i] = static_cast<float>(std::sin(angle));
    }
    RopeRow(x + static_cast<size_t>(r) * heads * head_dim, heads, head_dim, cs.data(), sn.data());
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
  ForRows(n, [&](int r) {
    RopeRow(x + static_cast<size_t>(r) * heads * head_dim, heads, head_dim,
            table.cos_row(positions[r]), table.sin_row(positions[r]));
  });
}

void SiluMulCpu(float* gate, const float* up, size_t count) {
  constexpr size_t kChunk = 16384;
  const int tasks = static_cast<int>((count + kChunk - 1) / kChunk);
  ParallelFor(
      tasks,
      [&](int t) {
        const size_t i0 = t * kChunk, i1 = std::min(count, i0 + kChunk);
#pragma omp simd
        for (size_t i = i0; i < i1; ++i) {
          const float g = gate[i];
          gate[i] = g / (1.0f + ExpSimd(-g)) * up[i];
        }
      },
      count > 4 * kChunk);
}

void AddCpu(float* x, const float* y, size_t count) {
#pragma omp simd
  for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

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
    ParallelFor(
        static_cast<int>(tasks.size()),
        [&](int k) {
          const GemmTarget& t = targets[tasks[k].first];
          const int r0 = tasks[k].second, r1 = std::min(t.out, r0 + rows_per_task);
          GemvRows(x, in, t.w, r0, r1, t.y, t.accumulate);
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
