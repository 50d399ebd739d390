// Row codecs of one variant (compiled once per variant): branch-free forms of
// the scalar conversions in kv_codec.cc, which the compiler vectorizes for
// the variant's registers. Results equal the scalar functions bit for bit
// (tests/kernels_cpu/kv_codec_test.cc checks every variant against them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_codec.h"
// Last: everything below is compiled for the variant.
#include "kernels/cpu/variant_kernels.h"

namespace ced::kernels::CED_VARIANT_NS {
namespace {

constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
constexpr float kF32Max = std::numeric_limits<float>::max();

inline uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float Float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
// Round to nearest even integer for |x| < 2^22, without a libm call.
inline float RoundEven(float x) { return (x + 12582912.0f) - 12582912.0f; }

inline uint8_t EncodeFp8(float x) {
  const uint32_t u = Bits(x);
  const uint32_t sign = (u >> 24) & 0x80;
  const bool nan = (u & 0x7fffffff) > 0x7f800000;
  const float a = std::min(Float(u & 0x7fffffff), kFp8Max);
  // Below 2^-6: subnormal codes, units of 2^-9 (8 is the smallest normal).
  const uint32_t sub = static_cast<uint32_t>(RoundEven(a * 512.0f));
  // Normal: round the f32 mantissa to 3 bits (nearest even); a carry bumps
  // the exponent; rebias 127 -> 7.
  uint32_t b = Bits(a);
  b += 0x7ffff + ((b >> 20) & 1);
  const uint32_t normal = (b >> 20) - (120u << 3);
  const uint32_t code = a < 0.015625f ? sub : normal;
  return nan ? 0 : static_cast<uint8_t>(sign | code);
}

inline float DecodeFp8(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t exp = (v >> 3) & 0xf, mant = v & 7;
  const float normal = Float(sign | ((exp + 120) << 23) | (mant << 20));
  const float sub = Float(sign | Bits(static_cast<float>(mant) * (1.0f / 512.0f)));
  const float out = exp == 0 ? sub : normal;
  return (v & 0x7f) == 0x7f ? Float(sign) : out;  // the NaN code decodes to (signed) 0
}

// |a| (already scaled into [0, 6] or NaN) to the nearest E2M1 magnitude code,
// ties to the even code.
inline uint8_t EncodeFp4(float v) {
  const uint32_t u = Bits(v);
  const uint8_t sign = (u >> 28) & 8;
  const bool nan = (u & 0x7fffffff) > 0x7f800000;
  const float a = Float(u & 0x7fffffff);
  const int c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                (a >= 3.5f) + (a > 5.0f);
  return nan ? 0 : static_cast<uint8_t>(sign | c);
}

inline float DecodeFp4(uint32_t code) {
  const uint32_t e = (code >> 1) & 3, m = code & 1;
  const uint32_t mag = e == 0 ? (m ? 0x3f000000u : 0u) : ((e + 126) << 23) | (m << 22);
  return Float(((code & 8) << 28) | mag);
}

}  // namespace

void EncodeRow(KvFormat f, const float* src, size_t n, uint8_t* dst) {
  switch (f) {
    case KvFormat::kF32:
      for (size_t i = 0; i < n; ++i) {
        float v = src[i];
        v = v != v ? 0.0f : std::min(std::max(v, -kF32Max), kF32Max);
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return;
    case KvFormat::kBF16: {
      // Clamp before rounding: values above the largest bf16 would round to inf.
      const float bf16_max = Float(0x7f7fu << 16);
      for (size_t i = 0; i < n; ++i) {
        const float v = src[i] != src[i] ? 0.0f : std::min(std::max(src[i], -bf16_max), bf16_max);
        uint32_t u = Bits(v);
        u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
        const uint16_t h = static_cast<uint16_t>(u >> 16);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    }
    case KvFormat::kFP8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = EncodeFp8(src[i]);
      return;
    case KvFormat::kFP4E2M1: {
      uint8_t* scales = dst + n / 2;
      for (size_t g = 0; g < n; g += kFp4GroupSize) {
        const size_t len = std::min<size_t>(kFp4GroupSize, n - g);
        float amax = 0.0f;
        for (size_t i = 0; i < len; ++i) {
          const float v = src[g + i];
          if (std::isfinite(v)) {
            amax = std::max(amax, std::fabs(v));
          } else if (std::isinf(v)) {
            amax = kFp8Max * kFp4Max;
          }
        }
        uint8_t scale_code = EncodeFp8(amax / kFp4Max);
        float scale = DecodeFp8(scale_code);
        // If rounding shrank the scale (possibly to 0 for a group of tiny
        // values), step it up so no value saturates.
        if (amax > 0 && !(amax <= kFp4Max * scale) && scale_code < 0x7e) {
          ++scale_code;
          scale = DecodeFp8(scale_code);
        }
        scales[g / kFp4GroupSize] = scale_code;
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        uint8_t codes[kFp4GroupSize + 1] = {};
        for (size_t i = 0; i < len; ++i) {
          codes[i] = EncodeFp4(std::clamp(src[g + i] * inv, -kFp4Max, kFp4Max));
        }
        for (size_t i = 0; i < len; i += 2) {
          dst[(g + i) / 2] = static_cast<uint8_t>(codes[i] | (i + 1 < len ? codes[i + 1] << 4 : 0));
        }
      }
      return;
    }
  }
}

void DecodeRowSlice(KvFormat f, const uint8_t* src, size_t n, size_t begin, size_t count,
                    float* dst) {
  switch (f) {
    case KvFormat::kF32:
      std::memcpy(dst, src + 4 * begin, 4 * count);
      return;
    case KvFormat::kBF16: {
      const uint8_t* s = src + 2 * begin;
      for (size_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Float(static_cast<uint32_t>(h) << 16);
      }
      return;
    }
    case KvFormat::kFP8E4M3: {
      const uint8_t* s = src + begin;
      for (size_t i = 0; i < count; ++i) dst[i] = DecodeFp8(s[i]);
      return;
    }
    case KvFormat::kFP4E2M1: {
      const uint8_t* scales = src + n / 2;
      size_t i = 0;
      // Whole groups (begin and count are multiples of 16 for head slices).
      if (begin % kFp4GroupSize == 0) {
        for (; i + kFp4GroupSize <= count; i += kFp4GroupSize) {
          const size_t idx = begin + i;
          const float scale = DecodeFp8(scales[idx / kFp4GroupSize]);
          const uint8_t* bytes = src + idx / 2;
          for (int j = 0; j < kFp4GroupSize; ++j) {
            const uint32_t code = (bytes[j / 2] >> (4 * (j & 1))) & 0xf;
            dst[i + j] = DecodeFp4(code) * scale;
          }
        }
      }
      for (; i < count; ++i) {
        const size_t idx = begin + i;
        const uint8_t byte = src[idx / 2];
        const uint32_t code = (idx & 1) ? (byte >> 4) : (byte & 0xf);
        dst[i] = DecodeFp4(code) * DecodeFp8(scales[idx / kFp4GroupSize]);
      }
      return;
    }
  }
}

extern const KvCodecTable kCodecTable;
const KvCodecTable kCodecTable = {EncodeRow, DecodeRowSlice};

}  // namespace ced::kernels::CED_VARIANT_NS
