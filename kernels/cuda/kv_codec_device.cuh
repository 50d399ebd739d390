// Device versions of the K/V row codecs of kernels/cpu/kv_codec.cc. They must
// produce the same bytes as the CPU encoder (same rounding, clamping and fp4
// scale step-up rule) and the same floats on decode. CUDA-only header.
#pragma once

#include <cstdint>

#include "kernels/cpu/kv_codec.h"

namespace ced::kernels::cuda_codec {

constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
constexpr float kF32Max = 3.402823466e38f;
constexpr uint16_t kBf16MaxBits = 0x7f7f;

// std::clamp semantics (a NaN input passes through).
__device__ __forceinline__ float Clamp(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

__device__ __forceinline__ uint16_t FloatToBf16(float x) {
  uint32_t u = __float_as_uint(x);
  if (isnan(x)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float Bf16ToFloat(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ float Fp8E4M3ToFloat(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float out;
  if (exp == 0xf && mant == 7) {
    out = 0.0f;
  } else if (exp == 0) {
    out = ldexpf(static_cast<float>(mant), -9);
  } else {
    out = ldexpf(static_cast<float>(8 + mant), exp - 10);
  }
  return sign ? -out : out;
}

__device__ __forceinline__ uint8_t FloatToFp8E4M3(float x) {
  if (isnan(x)) return 0;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fminf(fabsf(x), kFp8Max);
  if (a < 0.015625f) {  // 2^-6: subnormal, units of 2^-9
    const int m = static_cast<int>(rintf(a * 512.0f));
    if (m == 8) return sign | (1 << 3);
    return sign | static_cast<uint8_t>(m);
  }
  int e;
  const float fr = frexpf(a, &e);
  int exp = e - 1 + 7;
  int m = static_cast<int>(rintf((fr * 2.0f - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && m > 6)) {
    exp = 15;
    m = 6;
  }
  return sign | static_cast<uint8_t>(exp << 3) | static_cast<uint8_t>(m);
}

__device__ __forceinline__ float Fp4Magnitude(int c) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
  return c < 4 ? 0.5f * c : (c == 7 ? 6.0f : static_cast<float>(c - 2));
}

__device__ __forceinline__ uint8_t FloatToFp4E2M1(float x) {
  if (isnan(x)) return 0;
  const uint8_t sign = signbit(x) ? 8 : 0;
  const float a = fabsf(x);
  int best = 0;
  float best_err = __int_as_float(0x7f800000);
  for (int c = 0; c < 8; ++c) {
    const float err = fabsf(a - Fp4Magnitude(c));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

__device__ __forceinline__ float Fp4E2M1ToFloat(uint8_t code) {
  const float v = Fp4Magnitude(code & 7);
  return (code & 8) ? -v : v;
}

__device__ __forceinline__ float EncodeF32(float v) {
  return isnan(v) ? 0.0f : Clamp(v, -kF32Max, kF32Max);
}

__device__ __forceinline__ uint16_t EncodeBf16(float v) {
  const float m = Bf16ToFloat(kBf16MaxBits);
  return FloatToBf16(isnan(v) ? 0.0f : Clamp(v, -m, m));
}

// Encodes one fp4 group of `len` (<= 16) values: packed nibbles into
// `codes` (len/2 bytes, rounded up) and the E4M3 scale into `*scale_out`.
__device__ __forceinline__ void EncodeFp4Group(const float* src, int len, uint8_t* codes,
                                               uint8_t* scale_out) {
  float amax = 0.0f;
  for (int i = 0; i < len; ++i) {
    const float v = src[i];
    if (isfinite(v)) {
      amax = fmaxf(amax, fabsf(v));
    } else if (isinf(v)) {
      amax = kFp8Max * kFp4Max;
    }
  }
  uint8_t scale_code = FloatToFp8E4M3(amax / kFp4Max);
  float scale = Fp8E4M3ToFloat(scale_code);
  if (amax > 0 && !(amax <= kFp4Max * scale) && scale_code < 0x7e) {
    ++scale_code;
    scale = Fp8E4M3ToFloat(scale_code);
  }
  *scale_out = scale_code;
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < len; i += 2) {
    const uint8_t lo = FloatToFp4E2M1(Clamp(src[i] * inv, -kFp4Max, kFp4Max));
    const uint8_t hi =
        i + 1 < len ? FloatToFp4E2M1(Clamp(src[i + 1] * inv, -kFp4Max, kFp4Max)) : 0;
    codes[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Value `idx` of a stored row of `n` values in format F.
template <KvFormat F>
__device__ __forceinline__ float LoadValue(const uint8_t* row, int n, int idx) {
  if constexpr (F == KvFormat::kF32) {
    return reinterpret_cast<const float*>(row)[idx];
  } else if constexpr (F == KvFormat::kBF16) {
    return Bf16ToFloat(reinterpret_cast<const uint16_t*>(row)[idx]);
  } else if constexpr (F == KvFormat::kFP8E4M3) {
    return Fp8E4M3ToFloat(row[idx]);
  } else {
    const uint8_t byte = row[idx / 2];
    const uint8_t code = (idx & 1) ? (byte >> 4) : (byte & 0xf);
    return Fp4E2M1ToFloat(code) * Fp8E4M3ToFloat(row[n / 2 + idx / kFp4GroupSize]);
  }
}

__host__ __device__ constexpr size_t RowBytes(KvFormat f, size_t n) {
  return f == KvFormat::kF32    ? 4 * n
         : f == KvFormat::kBF16 ? 2 * n
         : f == KvFormat::kFP8E4M3
             ? n
             : n / 2 + (n + kFp4GroupSize - 1) / kFp4GroupSize;
}

}  // namespace ced::kernels::cuda_codec
