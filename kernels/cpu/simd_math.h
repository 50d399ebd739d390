// Vector types and vectorizable math for the kernels of one variant
// (kernels/cpu/variant.h, included first). GCC vector extensions: VF is one
// native register of the variant (VI its int lanes). Code is written on VF
// only: wider GCC vectors are split, and their compares and shuffles
// scalarized, on narrower targets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cephes_exp.h"
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

// exp(x), Cephes expf (cephes_exp.h): about 1 ulp, arguments clamped to
// [-87, 88].
template <typename T, typename I>
inline T ExpOf(T x) {
  return CephesExp<T, I>(x);
}
inline float ExpSimd(float x) { return ExpOf<float, int32_t>(x); }
inline VF ExpVF(VF x) { return ExpOf<VF, VI>(x); }

}  // namespace ced::kernels::CED_VARIANT_NS
