// Row-wise and element-wise kernels of one variant (compiled once per
// variant); the public entry points in math.cc split the work over the pool.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kv_codec.h"
// Last: everything below is compiled for the variant.
#include "kernels/cpu/variant_kernels.h"

namespace ced::kernels::CED_VARIANT_NS {

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

void SiluMul(float* gate, const float* up, size_t count) {
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const VF g = LoadVF(gate + i);
    StoreVF(gate + i, g / (1.0f + ExpVF(-g)) * LoadVF(up + i));
  }
  for (; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + ExpSimd(-g)) * up[i];
  }
}

void Add(float* x, const float* y, size_t count) {
#pragma omp simd
  for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

// Four weight rows at a time share each load of x; each row is read once,
// front to back, 16 floats (one to four registers) per step.
void GemvRows(const float* x, int in, const float* w, int r0, int r1, float* y, bool acc) {
  const int in16 = in / 16 * 16;
  int r = r0;
  for (; r + 4 <= r1; r += 4) {
    const float* w0 = w + static_cast<size_t>(r) * in;
    const float* w1 = w0 + in;
    const float* w2 = w1 + in;
    const float* w3 = w2 + in;
    VF a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int i = 0; i < in16; i += 16) {
      __builtin_prefetch(w0 + i + 4 * in, 0, 0);
      __builtin_prefetch(w2 + i + 4 * in, 0, 0);
#pragma GCC unroll 4
      for (int c = 0; c < 16; c += kLanes) {
        const VF xv = LoadVF(x + i + c);
        a0 += LoadVF(w0 + i + c) * xv;
        a1 += LoadVF(w1 + i + c) * xv;
        a2 += LoadVF(w2 + i + c) * xv;
        a3 += LoadVF(w3 + i + c) * xv;
      }
    }
    float s[4] = {SumVF(a0), SumVF(a1), SumVF(a2), SumVF(a3)};
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
    VF a = {};
    for (int i = 0; i < in16; i += kLanes) a += LoadVF(wr + i) * LoadVF(x + i);
    float s = SumVF(a);
    for (int i = in16; i < in; ++i) s += wr[i] * x[i];
    y[r] = acc ? y[r] + s : s;
  }
}

}  // namespace ced::kernels::CED_VARIANT_NS
