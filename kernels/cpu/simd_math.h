// Vectorizable scalar math for the CPU kernels: plain C++ the compiler turns
// into SIMD inside `omp simd` loops, with no libm call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ced::kernels {

// Sixteen floats (one AVX-512 register; GCC vector extension) and unaligned
// loads and stores of them.
typedef float V16 __attribute__((vector_size(64)));
inline V16 LoadV16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreV16(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

// exp(x), Cephes expf: range reduction by ln 2 and a degree-5 polynomial,
// about 1 ulp. Arguments are clamped to [-87, 88]: the result is never a
// denormal, infinity or NaN (exp(-87) ~ 1.6e-38 stands for anything smaller).
inline float ExpSimd(float x) {
  x = std::max(x, -87.0f);
  x = std::min(x, 88.0f);
  // Round x / ln2 to nearest with the 1.5 * 2^23 trick (no libm call).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

}  // namespace ced::kernels
