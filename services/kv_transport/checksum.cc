#include "services/kv_transport/checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && defined(__SSE4_2__)
#include <nmmintrin.h>
#define CED_HAVE_SSE42_CRC 1
#endif

namespace ced::kv_transport {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables BuildTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}

const Tables& GetTables() {
  static const Tables tables = BuildTables();
  return tables;
}

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t size) {
  const Tables& t = GetTables();
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    // Assemble little-endian words byte by byte: no alignment or endianness assumptions.
    const uint32_t lo = (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24) ^
                        c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#ifdef CED_HAVE_SSE42_CRC
namespace {

// The hardware crc32 instruction has a latency of several cycles but a throughput
// of one per cycle, so one dependency chain leaves most of it idle. Long inputs
// are therefore cut into three interleaved streams of `kLong` (then `kShort`)
// bytes each, computed independently (streams 1 and 2 start from a zero
// register) and combined: with raw(c, D) the register after feeding D to c,
// raw(c, A|B|C) = Z(Z(raw(c, A)) ^ raw(0, B)) ^ raw(0, C), where Z feeds as many
// zero bytes as one stream holds. Z is linear over GF(2), so it is applied as
// four 256-entry tables indexed by the register's bytes.
constexpr size_t kLong = 4096;
constexpr size_t kShort = 256;

struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> table{};
  explicit ZeroShift(size_t bytes) {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint64_t c = uint32_t{1} << bit;
      for (size_t i = 0; i < bytes; i += 8) c = _mm_crc32_u64(c, 0);
      basis[bit] = static_cast<uint32_t>(c);
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (int j = 0; j < 8; ++j) {
          if (v & (1u << j)) r ^= basis[8 * k + j];
        }
        table[k][v] = r;
      }
    }
  }
  uint32_t operator()(uint32_t c) const {
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^
           table[3][c >> 24];
  }
};

inline uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));  // x86 is little-endian
  return word;
}

// Feeds `rounds` x 3 x `block` bytes at `p` to the raw register `c`.
template <size_t block>
uint32_t ThreeWay(uint32_t c, const uint8_t* p, size_t rounds, const ZeroShift& shift) {
  for (; rounds > 0; --rounds, p += 3 * block) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < block; i += 8) {
      c0 = _mm_crc32_u64(c0, Load64(p + i));
      c1 = _mm_crc32_u64(c1, Load64(p + block + i));
      c2 = _mm_crc32_u64(c2, Load64(p + 2 * block + i));
    }
    c = shift(shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^
        static_cast<uint32_t>(c2);
  }
  return c;
}

}  // namespace
#endif

uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
#ifdef CED_HAVE_SSE42_CRC
  static const ZeroShift long_shift(kLong);
  static const ZeroShift short_shift(kShort);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  if (size >= 3 * kLong) {
    const size_t rounds = size / (3 * kLong);
    c = ThreeWay<kLong>(c, p, rounds, long_shift);
    p += rounds * 3 * kLong;
    size -= rounds * 3 * kLong;
  }
  if (size >= 3 * kShort) {
    const size_t rounds = size / (3 * kShort);
    c = ThreeWay<kShort>(c, p, rounds, short_shift);
    p += rounds * 3 * kShort;
    size -= rounds * 3 * kShort;
  }
  uint64_t c64 = c;
  for (; size >= 8; size -= 8, p += 8) c64 = _mm_crc32_u64(c64, Load64(p));
  c = static_cast<uint32_t>(c64);
  while (size-- > 0) c = _mm_crc32_u8(c, *p++);
  return ~c;
#else
  return Crc32cPortable(crc, data, size);
#endif
}

}  // namespace ced::kv_transport
