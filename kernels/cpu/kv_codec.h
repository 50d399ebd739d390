// K/V cache storage formats and their row codecs (DESIGN.md §1.5).
//
// A "row" is one K or V entry of one token for one layer: n = G*D values.
// Every function is thread-compatible and touches only the buffers it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ced::kernels {

enum class KvFormat : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kFP8E4M3 = 2,
  kFP4E2M1 = 3,  // 4-bit E2M1 values, one E4M3 scale per 16 values
};
inline constexpr int kNumKvFormats = 4;
inline constexpr int kFp4GroupSize = 16;

// "f32", "bf16", "fp8_e4m3", "fp4_e2m1".
std::string_view KvFormatName(KvFormat f);
// Returns false when `name` is not one of the names above.
bool ParseKvFormat(std::string_view name, KvFormat* out);
// Bytes needed to store one row of n values. For fp4, n must be a multiple of 16.
size_t KvRowBytes(KvFormat f, size_t n);
// Bits per value including scales (32, 16, 8, 4.5).
double KvBitsPerValue(KvFormat f);

// Encodes n floats into `dst` (KvRowBytes(f, n) bytes). Non-finite inputs are
// clamped to the format's largest finite value (NaN becomes 0).
void EncodeRow(KvFormat f, const float* src, size_t n, uint8_t* dst);
// Decodes a row written by EncodeRow into n floats.
void DecodeRow(KvFormat f, const uint8_t* src, size_t n, float* dst);
// Decodes values [begin, begin+count) of a row of n values; begin and count are
// multiples of 16 for fp4 (head slices are).
void DecodeRowSlice(KvFormat f, const uint8_t* src, size_t n, size_t begin, size_t count,
                    float* dst);

// Scalar conversions, exposed for tests and other kernels.
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t h);
uint8_t FloatToFp8E4M3(float x);
float Fp8E4M3ToFloat(uint8_t v);
uint8_t FloatToFp4E2M1(float x);  // 4-bit code in the low nibble
float Fp4E2M1ToFloat(uint8_t code);
float Fp16ToFloat(uint16_t h);
uint16_t FloatToFp16(float x);

}  // namespace ced::kernels
