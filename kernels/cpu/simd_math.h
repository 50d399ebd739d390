// Vector types and vectorizable math for the kernels of one variant
// (kernels/cpu/variant.h, included first). GCC vector extensions: VF is one
// native register of the variant (VI its int lanes). Code is written on VF
// only: wider GCC vectors are split, and their compares and shuffles
// scalarized, on narrower targets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/variant.h"

namespace ced::kernels::CED_VARIANT_NS {

constexpr int kLanes = CED_VEC_FLOATS;
typedef float VF __attribute__((vector_size(4 * CED_VEC_FLOATS)));
typedef int32_t VI __attribute__((vector_size(4 * CED_VEC_FLOATS)));

inline VF LoadVF(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreVF(float* p, VF v) { std::memcpy(p, &v, sizeof(v)); }
// The first n < kLanes floats at p; the other lanes 0.
inline VF LoadPartialVF(const float* p, int n) {
  VF v = {};
  std::memcpy(&v, p, n * sizeof(float));
  return v;
}
inline void StorePartialVF(float* p, VF v, int n) { std::memcpy(p, &v, n * sizeof(float)); }
inline float SumVF(VF v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}


// exp(x), Cephes expf: range reduction by ln 2 and a degree-5 polynomial,
// about 1 ulp. Arguments are clamped to [-87, 88]: the result is never a
// denormal, infinity or NaN (exp(-87) ~ 1.6e-38 stands for anything smaller).
// Written on vectors (GCC's vectorizer leaves the scalar form scalar on some
// targets); T is float or VF, and every lane computes the same float ops.
template <typename T, typename I>
inline T ExpOf(T x) {
  const T lo = T{} - 87.0f, hi = T{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Round x / ln2 to nearest with the 1.5 * 2^23 trick (no libm call).
  const T n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const T r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const T y = p * r * r + r + 1.0f;
  I bits;
  if constexpr (sizeof(T) == sizeof(float)) {
    bits = (static_cast<I>(n) + 127) << 23;
  } else {
    bits = (__builtin_convertvector(n, I) + 127) << 23;
  }
  T scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}
inline float ExpSimd(float x) { return ExpOf<float, int32_t>(x); }
inline VF ExpVF(VF x) { return ExpOf<VF, VI>(x); }

}  // namespace ced::kernels::CED_VARIANT_NS
