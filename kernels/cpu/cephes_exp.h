// exp(x) by Cephes' expf, on a float or a GCC float vector: the one
// definition the CPU kernels (simd_math.h, per variant) and the sampler
// (portable 16-byte vectors) use. No variant macros: header-only, any target.
#pragma once

#include <cstdint>
#include <cstring>

namespace ced::kernels {

// Range reduction by ln 2 and a degree-5 polynomial, about 1 ulp. Arguments
// are clamped to [-87, 88]: the result is never a denormal, infinity or NaN
// (exp(-87) ~ 1.6e-38 stands for anything smaller; a NaN argument gives an
// unspecified finite value). Written on vectors (GCC's vectorizer leaves the
// scalar form scalar on some targets); T is float or a GCC float vector, I
// the int32 type of the same shape, and every lane computes the same float
// ops.
template <typename T, typename I>
inline T CephesExp(T x) {
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

}  // namespace ced::kernels
