#include "services/kv_transport/cuda/crc32c_combine.h"

namespace ced::kv_transport {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

uint32_t Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if (vec & 1u) sum ^= mat[i];
  }
  return sum;
}

void Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Times(mat, mat[n]);
}

// crc_a advanced over len_b zero bytes (the register-level operator; the
// pre/post inversions of CRC32C cancel out in the combination).
uint32_t Shift(uint32_t crc_a, uint64_t len_b) {
  if (len_b == 0) return crc_a;
  uint32_t even[32], odd[32];
  odd[0] = kPoly;  // one zero bit
  uint32_t row = 1;
  for (int n = 1; n < 32; ++n, row <<= 1) odd[n] = row;
  Square(even, odd);  // two zero bits
  Square(odd, even);  // four zero bits
  do {
    Square(even, odd);  // one zero byte, then 4, 16, ...
    if (len_b & 1u) crc_a = Times(even, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
    Square(odd, even);
    if (len_b & 1u) crc_a = Times(odd, crc_a);
    len_b >>= 1;
  } while (len_b != 0);
  return crc_a;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return Shift(crc_a, len_b) ^ crc_b;
}

Crc32cFolder::Crc32cFolder(uint64_t len_b) {
  for (int bit = 0; bit < 32; ++bit) shift_[bit] = Shift(uint32_t{1} << bit, len_b);
}

uint32_t Crc32cFolder::Fold(uint32_t crc_a, uint32_t crc_b) const {
  return Times(shift_.data(), crc_a) ^ crc_b;
}

}  // namespace ced::kv_transport
