#include "kernels/cpu/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/kernel_table.h"

namespace ced::kernels {
namespace {

constexpr float kFp8Max = 448.0f;
// E2M1 magnitudes for codes 0..7; bit 3 is the sign.
constexpr float kFp4Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

std::string_view KvFormatName(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return "f32";
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kFP8E4M3: return "fp8_e4m3";
    case KvFormat::kFP4E2M1: return "fp4_e2m1";
  }
  return "unknown";
}

bool ParseKvFormat(std::string_view name, KvFormat* out) {
  for (int i = 0; i < kNumKvFormats; ++i) {
    auto f = static_cast<KvFormat>(i);
    if (KvFormatName(f) == name) {
      *out = f;
      return true;
    }
  }
  return false;
}

size_t KvRowBytes(KvFormat f, size_t n) {
  switch (f) {
    case KvFormat::kF32: return 4 * n;
    case KvFormat::kBF16: return 2 * n;
    case KvFormat::kFP8E4M3: return n;
    case KvFormat::kFP4E2M1: return n / 2 + (n + kFp4GroupSize - 1) / kFp4GroupSize;
  }
  return 0;
}

double KvBitsPerValue(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return 32;
    case KvFormat::kBF16: return 16;
    case KvFormat::kFP8E4M3: return 8;
    case KvFormat::kFP4E2M1: return 4.5;
  }
  return 0;
}

uint16_t FloatToBf16(float x) {
  uint32_t u = FloatBits(x);
  if (std::isnan(x)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t FloatToFp16(float x) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  float a = std::fabs(x);
  if (std::isnan(x)) return 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24
    auto m = static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
    return sign | m;
  }
  int e;
  float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  float m = std::nearbyint((fr * 2.0f - 1.0f) * 1024.0f);
  int exp = e - 1 + 15;
  if (m >= 1024.0f) {
    m = 0;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exp << 10) | static_cast<uint16_t>(m);
}

float Fp8E4M3ToFloat(uint8_t v) {
  int sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float out;
  if (exp == 0xf && mant == 7) {
    out = 0.0f;  // NaN code; never produced by the encoder
  } else if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -9);
  } else {
    out = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  }
  return sign ? -out : out;
}

uint8_t FloatToFp8E4M3(float x) {
  if (std::isnan(x)) return 0;
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::min(std::fabs(x), kFp8Max);
  if (a < std::ldexp(1.0f, -6)) {  // subnormal: units of 2^-9
    int m = static_cast<int>(std::nearbyint(a * 512.0f));
    if (m == 8) return sign | (1 << 3);
    return sign | static_cast<uint8_t>(m);
  }
  int e;
  float fr = std::frexp(a, &e);  // a = fr * 2^e
  int exp = e - 1 + 7;
  int m = static_cast<int>(std::nearbyint((fr * 2.0f - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && m > 6)) {
    exp = 15;
    m = 6;  // 448
  }
  return sign | static_cast<uint8_t>(exp << 3) | static_cast<uint8_t>(m);
}

uint8_t FloatToFp4E2M1(float x) {
  if (std::isnan(x)) return 0;
  uint8_t sign = std::signbit(x) ? 8 : 0;
  float a = std::fabs(x);
  // Round to nearest representable magnitude (ties to the even code).
  int best = 0;
  float best_err = INFINITY;
  for (int c = 0; c < 8; ++c) {
    float err = std::fabs(a - kFp4Values[c]);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

float Fp4E2M1ToFloat(uint8_t code) {
  float v = kFp4Values[code & 7];
  return (code & 8) ? -v : v;
}

namespace {

const KvCodecTable& ActiveCodecs() {
  return ForIsa(ActiveCpuIsa(), generic::kCodecTable, avx2::kCodecTable, avx512::kCodecTable);
}

}  // namespace

void EncodeRow(KvFormat f, const float* src, size_t n, uint8_t* dst) {
  ActiveCodecs().encode_row(f, src, n, dst);
}

void DecodeRowSlice(KvFormat f, const uint8_t* src, size_t n, size_t begin, size_t count,
                    float* dst) {
  ActiveCodecs().decode_row_slice(f, src, n, begin, count, dst);
}

void DecodeRow(KvFormat f, const uint8_t* src, size_t n, float* dst) {
  DecodeRowSlice(f, src, n, 0, n, dst);
}

}  // namespace ced::kernels
