#include "kernels/cpu/math.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include <cmath>
#include <vector>

#include "kernels/cpu/simd_math.h"

namespace ced::kernels {

void RmsNormCpu(const float* x, int n, int d, const float* w, float eps, float* out) {
#pragma omp parallel for if (n > 16)
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * d;
    float* oi = out + static_cast<size_t>(i) * d;
    double ss = 0.0;
    for (int j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (int j = 0; j < d; ++j) oi[j] = xi[j] * inv * w[j];
  }
}

void RopeCpu(float* x, int n, int heads, int head_dim, const int32_t* positions, double theta) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / head_dim);
#pragma omp parallel for if (n > 16)
  for (int r = 0; r < n; ++r) {
    std::vector<float> cs(half), sn(half);
    for (int i = 0; i < half; ++i) {
      double angle = positions[r] * inv_freq[i];
      cs[i] = static_cast<float>(std::cos(angle));
      sn[i] = static_cast<float>(std::sin(angle));
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<size_t>(r) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void SiluMulCpu(float* gate, const float* up, size_t count) {
#pragma omp parallel for simd if (count > 65536)
  for (size_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + ExpSimd(-g)) * up[i];
  }
}

void AddCpu(float* x, const float* y, size_t count) {
  for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

void SetBlasSingleThreaded() { openblas_set_num_threads(1); }

// BLAS runs single-threaded; the output columns are split across the OpenMP
// team so one thread pool serves every kernel (no two pools spinning against
// each other on a small machine).
void GemmCpu(const float* x, int n, int in, const float* w, int out, float* y) {
  const double flops = 2.0 * n * in * out;
  const int threads = flops < 2e5 ? 1 : omp_get_max_threads();
  const int per = ((out + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int o0 = 0; o0 < out; o0 += per) {
    const int cols = std::min(per, out - o0);
    const float* wp = w + static_cast<size_t>(o0) * in;
    if (n == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, cols, in, 1.0f, wp, in, x, 1, 0.0f, y + o0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, in, 1.0f, x, in, wp, in, 0.0f,
                  y + o0, out);
    }
  }
}

}  // namespace ced::kernels
