// Vector types and vectorizable math for the kernels of one variant
// (kernels/cpu/variant.h, included first). GCC vector extensions: VF is one
// native register of the variant; V16 is sixteen floats (one zmm register,
// two ymm, four xmm) for code whose shape is 16 wide, e.g. 16 x 16 transposes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/variant.h"

namespace ced::kernels::CED_VARIANT_NS {

constexpr int kLanes = CED_VEC_FLOATS;
typedef float VF __attribute__((vector_size(4 * CED_VEC_FLOATS)));
typedef float V16 __attribute__((vector_size(64)));

inline VF LoadVF(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreVF(float* p, VF v) { std::memcpy(p, &v, sizeof(v)); }
inline float SumVF(VF v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

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

}  // namespace ced::kernels::CED_VARIANT_NS
