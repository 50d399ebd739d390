#include "kernels/cpu/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels_cpu/isa_param.h"

namespace ced::kernels {
namespace {

constexpr KvFormat kAllFormats[] = {KvFormat::kF32, KvFormat::kBF16, KvFormat::kFP8E4M3,
                                    KvFormat::kFP4E2M1};
const float kInf = std::numeric_limits<float>::infinity();

// Rows of n values whose 16-groups have magnitudes spread over 1e-3 .. 1e2.
std::vector<float> RandomRow(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 2.0f);
  std::vector<float> row(n);
  for (size_t g = 0; g < n; g += kFp4GroupSize) {
    float scale = std::pow(10.0f, log_scale(*rng));
    for (size_t i = g; i < std::min(n, g + kFp4GroupSize); ++i) row[i] = normal(*rng) * scale;
  }
  return row;
}

std::vector<float> RoundTrip(KvFormat f, const std::vector<float>& src,
                             std::vector<uint8_t>* bytes = nullptr) {
  std::vector<uint8_t> buf(KvRowBytes(f, src.size()));
  EncodeRow(f, src.data(), src.size(), buf.data());
  std::vector<float> out(src.size());
  DecodeRow(f, buf.data(), src.size(), out.data());
  if (bytes) *bytes = buf;
  return out;
}

// Every test runs once per kernel variant the CPU supports: EncodeRow and
// DecodeRow(Slice) are the variant's; the scalar conversions are one
// portable reference written differently (frexp/ldexp, a search over codes).
class KvCodecTest : public IsaTest {};

TEST_P(KvCodecTest, RowBytesAndNames) {
  EXPECT_EQ(KvRowBytes(KvFormat::kFP4E2M1, 512), 288u);  // 256 + 32
  EXPECT_EQ(KvRowBytes(KvFormat::kFP4E2M1, 64), 36u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8E4M3, 512), 512u);
  EXPECT_EQ(KvRowBytes(KvFormat::kBF16, 512), 1024u);
  EXPECT_EQ(KvRowBytes(KvFormat::kF32, 512), 2048u);
  for (KvFormat f : kAllFormats) {
    EXPECT_DOUBLE_EQ(KvRowBytes(f, 1024) * 8.0 / 1024, KvBitsPerValue(f)) << KvFormatName(f);
    KvFormat parsed;
    ASSERT_TRUE(ParseKvFormat(KvFormatName(f), &parsed));
    EXPECT_EQ(parsed, f);
  }
  KvFormat parsed;
  EXPECT_FALSE(ParseKvFormat("fp16", &parsed));
}

TEST_P(KvCodecTest, F32IsExact) {
  std::mt19937 rng(1);
  std::vector<float> row = RandomRow(256, &rng);
  row[3] = -0.0f;
  row[4] = std::numeric_limits<float>::denorm_min();
  row[5] = std::numeric_limits<float>::max();
  std::vector<float> out = RoundTrip(KvFormat::kF32, row);
  EXPECT_EQ(std::memcmp(row.data(), out.data(), row.size() * 4), 0);
}

TEST_P(KvCodecTest, Bf16RelativeError) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> row = RandomRow(512, &rng);
    std::vector<float> out = RoundTrip(KvFormat::kBF16, row);
    for (size_t i = 0; i < row.size(); ++i) {
      ASSERT_LE(std::fabs(out[i] - row[i]), std::ldexp(std::fabs(row[i]), -8)) << row[i];
    }
  }
}

TEST_P(KvCodecTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(Bf16ToFloat(0x3f81), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-kInf)), -kInf);
}

TEST_P(KvCodecTest, Fp8RelativeErrorInNormalRange) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-6.0f, std::log2(448.0f));
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(exponent(rng)) * ((i & 1) ? -1.0f : 1.0f);
    float y = Fp8E4M3ToFloat(FloatToFp8E4M3(x));
    ASSERT_LE(std::fabs(y - x), std::ldexp(std::fabs(x), -4)) << x;
  }
  // Subnormals: absolute error at most half a unit of 2^-9.
  for (float x = 0.0f; x < std::ldexp(1.0f, -6); x += 1e-4f) {
    ASSERT_LE(std::fabs(Fp8E4M3ToFloat(FloatToFp8E4M3(x)) - x), std::ldexp(1.0f, -10)) << x;
  }
}

TEST_P(KvCodecTest, Fp8SpecialValues) {
  EXPECT_EQ(FloatToFp8E4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(FloatToFp8E4M3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(FloatToFp8E4M3(kInf), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-kInf), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x00);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7f), 0.0f);                   // the NaN code reads as 0
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (0)
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);                // tie between 1 and 1.125
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);                // tie between 1.125 and 1.25
  // Every finite code survives a round trip.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST_P(KvCodecTest, Fp4ScalarCodes) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(Fp4E2M1ToFloat(static_cast<uint8_t>(c)), values[c]);
    EXPECT_EQ(Fp4E2M1ToFloat(static_cast<uint8_t>(c | 8)), -values[c]);
    EXPECT_EQ(FloatToFp4E2M1(values[c]), c);
    EXPECT_EQ(FloatToFp4E2M1(-values[c]), c | 8);  // -0 keeps its sign bit
  }
  // Ties go to the even code (mantissa 0).
  EXPECT_EQ(FloatToFp4E2M1(0.25f), 0);
  EXPECT_EQ(FloatToFp4E2M1(0.75f), 2);
  EXPECT_EQ(FloatToFp4E2M1(1.25f), 2);
  EXPECT_EQ(FloatToFp4E2M1(2.5f), 4);
  EXPECT_EQ(FloatToFp4E2M1(5.0f), 6);
  EXPECT_EQ(FloatToFp4E2M1(100.0f), 7);
  EXPECT_EQ(FloatToFp4E2M1(std::nanf("")), 0);
}

// After encoding, every |v| / scale <= 6, and E2M1 spacing is 0.5 on [0, 2],
// 1 on [2, 4] and 2 on [4, 6]: the rounding error is at most max(|v|, s) / 4,
// which for a group whose scale is a normal E4M3 (s within 2^-3 above amax/6)
// is at most amax / 4.
TEST_P(KvCodecTest, Fp4GroupErrorBound) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> row = RandomRow(512, &rng);
    std::vector<uint8_t> bytes;
    std::vector<float> out = RoundTrip(KvFormat::kFP4E2M1, row, &bytes);
    for (size_t g = 0; g < row.size(); g += kFp4GroupSize) {
      const float s = Fp8E4M3ToFloat(bytes[row.size() / 2 + g / kFp4GroupSize]);
      float amax = 0;
      for (size_t i = g; i < g + kFp4GroupSize; ++i) amax = std::max(amax, std::fabs(row[i]));
      EXPECT_GE(s * 6.0f, amax) << "group " << g << " clips";
      for (size_t i = g; i < g + kFp4GroupSize; ++i) {
        ASSERT_LE(std::fabs(out[i] - row[i]), std::max(std::fabs(row[i]), s) / 4 * 1.0001f)
            << "value " << row[i] << " scale " << s;
        if (amax >= 6 * std::ldexp(1.0f, -6)) {
          ASSERT_LE(std::fabs(out[i] - row[i]), 0.25f * amax * 1.0001f) << row[i];
        }
      }
    }
  }
}

TEST_P(KvCodecTest, Fp4SmallGroupsKeepPrecision) {
  // amax / 6 is below the smallest E4M3 subnormal: the scale must not round to 0.
  std::vector<float> row(32);
  for (size_t i = 0; i < row.size(); ++i) row[i] = 1e-3f * (static_cast<float>(i % 7) - 3.0f);
  std::vector<float> out = RoundTrip(KvFormat::kFP4E2M1, row);
  for (size_t i = 0; i < row.size(); ++i) {
    EXPECT_LE(std::fabs(out[i] - row[i]), std::ldexp(1.0f, -11)) << i;
  }
  EXPECT_NE(out[0], 0.0f);
}

TEST_P(KvCodecTest, NonFiniteInputs) {
  const float kNan = std::nanf("");
  std::vector<float> row(32, 1.0f);
  row[0] = kNan;
  row[1] = kInf;
  row[2] = -kInf;
  std::vector<float> f32 = RoundTrip(KvFormat::kF32, row);
  EXPECT_EQ(f32[0], 0.0f);
  EXPECT_EQ(f32[1], std::numeric_limits<float>::max());
  EXPECT_EQ(f32[2], -std::numeric_limits<float>::max());
  std::vector<float> bf16 = RoundTrip(KvFormat::kBF16, row);
  EXPECT_EQ(bf16[0], 0.0f);
  EXPECT_EQ(bf16[1], Bf16ToFloat(0x7f7f));  // largest finite bf16
  EXPECT_EQ(bf16[2], -Bf16ToFloat(0x7f7f));
  std::vector<float> fp8 = RoundTrip(KvFormat::kFP8E4M3, row);
  EXPECT_EQ(fp8[0], 0.0f);
  EXPECT_EQ(fp8[1], 448.0f);
  EXPECT_EQ(fp8[2], -448.0f);
  std::vector<float> fp4 = RoundTrip(KvFormat::kFP4E2M1, row);
  EXPECT_EQ(fp4[0], 0.0f);
  EXPECT_EQ(fp4[1], 6.0f * 448.0f);
  EXPECT_EQ(fp4[2], -6.0f * 448.0f);
  for (KvFormat f : kAllFormats) {
    for (float v : RoundTrip(f, row)) EXPECT_TRUE(std::isfinite(v)) << KvFormatName(f);
  }
}

TEST_P(KvCodecTest, Fp16Conversions) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(FloatToFp16(kInf), 0x7c00);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);         // tie -> even
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToFp16(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal rounds up to normal
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::nanf("")))));
  EXPECT_EQ(Fp16ToFloat(0x7c00), kInf);
  EXPECT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  // Every non-NaN half survives a round trip through float.
  for (int h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;
    ASSERT_EQ(FloatToFp16(Fp16ToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  // Relative error of rounding normal values is at most 2^-11.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-14.0f, 15.9f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(exponent(rng));
    ASSERT_LE(std::fabs(Fp16ToFloat(FloatToFp16(x)) - x), std::ldexp(x, -11)) << x;
  }
}

TEST_P(KvCodecTest, DecodeRowSliceMatchesDecodeRow) {
  std::mt19937 rng(6);
  const size_t n = 256;
  for (KvFormat f : kAllFormats) {
    std::vector<float> row = RandomRow(n, &rng);
    std::vector<uint8_t> bytes;
    std::vector<float> full = RoundTrip(f, row, &bytes);
    for (size_t begin = 0; begin < n; begin += 32) {
      for (size_t count : {16, 32, 64}) {
        if (begin + count > n) continue;
        std::vector<float> part(count);
        DecodeRowSlice(f, bytes.data(), n, begin, count, part.data());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(part[i], full[begin + i]) << KvFormatName(f) << " at " << begin + i;
        }
      }
    }
  }
}

TEST_P(KvCodecTest, RowCodecsEqualTheScalarConversionsBitForBit) {
  // Every fp8 code decodes like the scalar decoder (through a row of all 256).
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  std::vector<float> decoded(256);
  DecodeRow(KvFormat::kFP8E4M3, codes.data(), 256, decoded.data());
  for (int c = 0; c < 256; ++c) {
    const float want = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    ASSERT_EQ(std::memcmp(&decoded[c], &want, 4), 0) << "code " << c << ": " << decoded[c];
  }
  // Values: random over many magnitudes, every fp8 value and the midpoints
  // between neighbours (rounding ties), fp8 subnormals, signed zeros,
  // saturation, infinities and NaN.
  std::mt19937 rng(11);
  std::vector<float> values;
  for (int c = 0; c < 127; ++c) {
    const float v = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    const float next = Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    for (float x : {v, (v + next) / 2, std::nextafter((v + next) / 2, 0.0f),
                    std::nextafter((v + next) / 2, 1e9f)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 479.9f, 480.0f, 1e30f, kInf, -kInf,
                  std::numeric_limits<float>::quiet_NaN(), 0.25f, 0.75f, 1.25f, 1.75f, 2.5f,
                  3.5f, 5.0f, 6.0f, 1e-40f, std::numeric_limits<float>::max()}) {
    values.push_back(x);
    values.push_back(-x);
  }
  std::uniform_real_distribution<float> exponent(-30.0f, 12.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  while (values.size() % kFp4GroupSize != 0 || values.size() < 20000) {
    values.push_back((sign(rng) ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
  }
  const size_t n = values.size();
  std::vector<uint8_t> bytes(KvRowBytes(KvFormat::kFP8E4M3, n));
  EncodeRow(KvFormat::kFP8E4M3, values.data(), n, bytes.data());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bytes[i], FloatToFp8E4M3(values[i])) << "value " << values[i];
  }
  bytes.assign(KvRowBytes(KvFormat::kBF16, n), 0);
  EncodeRow(KvFormat::kBF16, values.data(), n, bytes.data());
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    const float v = values[i];
    const float clamped = std::isnan(v) ? 0.0f : std::clamp(v, -3.3895314e38f, 3.3895314e38f);
    ASSERT_EQ(h, FloatToBf16(clamped)) << "value " << v;
  }
  // fp4: each group's scale and codes against the scalar functions.
  bytes.assign(KvRowBytes(KvFormat::kFP4E2M1, n), 0);
  EncodeRow(KvFormat::kFP4E2M1, values.data(), n, bytes.data());
  std::vector<float> out(n);
  DecodeRow(KvFormat::kFP4E2M1, bytes.data(), n, out.data());
  for (size_t g = 0; g < n; g += kFp4GroupSize) {
    const float scale = Fp8E4M3ToFloat(bytes[n / 2 + g / kFp4GroupSize]);
    for (size_t i = g; i < g + kFp4GroupSize; ++i) {
      const uint8_t code = (bytes[i / 2] >> (4 * (i & 1))) & 0xf;
      const float inv = scale > 0 ? 1.0f / scale : 0.0f;
      ASSERT_EQ(code, FloatToFp4E2M1(std::clamp(values[i] * inv, -6.0f, 6.0f)))
          << "value " << values[i] << " scale " << scale;
      ASSERT_EQ(out[i], Fp4E2M1ToFloat(code) * scale) << "value " << values[i];
    }
  }
}

CED_INSTANTIATE_FOR_EVERY_ISA(KvCodecTest);

}  // namespace
}  // namespace ced::kernels
