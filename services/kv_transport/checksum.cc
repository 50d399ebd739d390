#include "services/kv_transport/checksum.h"

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__SSE4_2__)
#include <nmmintrin.h>
#define CED_HAVE_SSE42_CRC 1
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__VPCLMULQDQ__) && defined(__PCLMUL__)
#include <immintrin.h>
#define CED_HAVE_CLMUL_FOLD 1
#endif
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

#ifdef CED_HAVE_CLMUL_FOLD
namespace {

// Folding with carry-less multiplies (VPCLMULQDQ on four 128-bit lanes): the
// contribution of a 16-byte block B to the CRC equals that of a 16-byte block
// G(B) placed d bytes later, and G is clmul(lo(B), K_lo) ^ clmul(hi(B), K_hi)
// for two constants of the distance d. Rather than transcribing constants for
// this bit order, they are solved for at start-up, from the definition, as a
// linear system over GF(2): for each of the 64 basis vectors e_i,
//   F(clmul(e_i, K)) == F(e_i-block followed by d zero bytes),
// with F the raw CRC register of a message (linear in the message). Any
// solution is exact by linearity; the tests check against the bitwise reference.
inline uint32_t Raw16(uint64_t lo, uint64_t hi) {
  return static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, lo), hi));
}

uint32_t ShiftZeros(uint32_t c, size_t bytes) {
  uint64_t r = c;
  for (size_t i = 0; i < bytes; i += 8) r = _mm_crc32_u64(r, 0);
  return static_cast<uint32_t>(r);
}

__m128i Clmul(uint64_t a, uint64_t b) {
  return _mm_clmulepi64_si128(_mm_set_epi64x(0, static_cast<long long>(a)),
                              _mm_set_epi64x(0, static_cast<long long>(b)), 0x00);
}

uint32_t RawOf(__m128i v) {
  return Raw16(static_cast<uint64_t>(_mm_cvtsi128_si64(v)),
               static_cast<uint64_t>(_mm_extract_epi64(v, 1)));
}

// K such that F(clmul(x, K)) == Z_d(F(block with x in half `half`)) for all x.
uint64_t SolveFold(size_t d, int half) {
  // Rows: 64 unknown bits (K) + 1 right-hand side bit, 32 equations per basis vector.
  struct Row {
    uint64_t mask;
    bool rhs;
  };
  std::vector<Row> rows;
  uint32_t column[64][64];  // column[i][k] = F(clmul(e_i, e_k))
  for (int i = 0; i < 64; ++i) {
    for (int k = 0; k < 64; ++k) column[i][k] = RawOf(Clmul(uint64_t{1} << i, uint64_t{1} << k));
  }
  for (int i = 0; i < 64; ++i) {
    const uint64_t e = uint64_t{1} << i;
    const uint32_t want = ShiftZeros(half == 0 ? Raw16(e, 0) : Raw16(0, e), d);
    for (int j = 0; j < 32; ++j) {
      Row r{0, ((want >> j) & 1) != 0};
      for (int k = 0; k < 64; ++k) {
        if ((column[i][k] >> j) & 1) r.mask |= uint64_t{1} << k;
      }
      rows.push_back(r);
    }
  }
  uint64_t k_value = 0;
  size_t rank = 0;
  int pivot_row[64];
  for (int col = 0; col < 64; ++col) {
    pivot_row[col] = -1;
    size_t p = rank;
    while (p < rows.size() && !((rows[p].mask >> col) & 1)) ++p;
    if (p == rows.size()) continue;
    std::swap(rows[p], rows[rank]);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (r != rank && ((rows[r].mask >> col) & 1)) {
        rows[r].mask ^= rows[rank].mask;
        rows[r].rhs ^= rows[rank].rhs;
      }
    }
    pivot_row[col] = static_cast<int>(rank++);
  }
  for (int col = 0; col < 64; ++col) {
    if (pivot_row[col] >= 0 && rows[pivot_row[col]].rhs) k_value |= uint64_t{1} << col;
  }
  return k_value;
}

struct FoldConstants {
  __m512i d256, d64;  // four lanes each moved 256 / 64 bytes on
  __m512i to_last;    // lanes 0..2 moved 48 / 32 / 16 bytes (onto lane 3); lane 3 kept
  FoldConstants() {
    auto pair = [](size_t d) {
      return std::pair<uint64_t, uint64_t>{SolveFold(d, 0), SolveFold(d, 1)};
    };
    const auto [a256, b256] = pair(256);
    const auto [a64, b64] = pair(64);
    const auto [a48, b48] = pair(48);
    const auto [a32, b32] = pair(32);
    const auto [a16, b16] = pair(16);
    auto lanes = [](uint64_t a, uint64_t b) {
      return _mm512_set_epi64(static_cast<long long>(b), static_cast<long long>(a),
                              static_cast<long long>(b), static_cast<long long>(a),
                              static_cast<long long>(b), static_cast<long long>(a),
                              static_cast<long long>(b), static_cast<long long>(a));
    };
    d256 = lanes(a256, b256);
    d64 = lanes(a64, b64);
    to_last = _mm512_set_epi64(0, 0, static_cast<long long>(b16), static_cast<long long>(a16),
                               static_cast<long long>(b32), static_cast<long long>(a32),
                               static_cast<long long>(b48), static_cast<long long>(a48));
  }
};

inline __m512i Fold(__m512i x, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                          _mm512_clmulepi64_epi128(x, k, 0x11));
}

// Loads 64 bytes at `p`; with kCopy also stores them at `dst`.
template <bool kCopy>
inline __m512i LoadBlock(const uint8_t* p, uint8_t* dst) {
  const __m512i v = _mm512_loadu_si512(p);
  if constexpr (kCopy) _mm512_storeu_si512(dst, v);
  return v;
}

// Raw register after feeding `size` (a multiple of 64, >= 256) bytes at `p` to
// `c`; with kCopy the bytes are also copied to `dst` on the way (one pass).
template <bool kCopy>
uint32_t FoldBlocks(uint32_t c, const uint8_t* p, size_t size, uint8_t* dst) {
  static const FoldConstants k;
  // The register enters as the first four message bytes XORed with it.
  __m512i x0 = _mm512_xor_si512(LoadBlock<kCopy>(p, dst),
                                _mm512_castsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i x1 = LoadBlock<kCopy>(p + 64, dst + 64);
  __m512i x2 = LoadBlock<kCopy>(p + 128, dst + 128);
  __m512i x3 = LoadBlock<kCopy>(p + 192, dst + 192);
  size_t i = 256;
  for (; i + 256 <= size; i += 256) {
    x0 = _mm512_xor_si512(Fold(x0, k.d256), LoadBlock<kCopy>(p + i, dst + i));
    x1 = _mm512_xor_si512(Fold(x1, k.d256), LoadBlock<kCopy>(p + i + 64, dst + i + 64));
    x2 = _mm512_xor_si512(Fold(x2, k.d256), LoadBlock<kCopy>(p + i + 128, dst + i + 128));
    x3 = _mm512_xor_si512(Fold(x3, k.d256), LoadBlock<kCopy>(p + i + 192, dst + i + 192));
  }
  // x0..x3 hold 256 consecutive bytes: fold them onto the last 64.
  __m512i x = _mm512_xor_si512(Fold(x0, k.d64), x1);
  x = _mm512_xor_si512(Fold(x, k.d64), x2);
  x = _mm512_xor_si512(Fold(x, k.d64), x3);
  for (; i < size; i += 64) x = _mm512_xor_si512(Fold(x, k.d64), LoadBlock<kCopy>(p + i, dst + i));
  // Four lanes onto the last one (lane 3 passes through the zero constant as 0;
  // add it back), then the 16 remaining bytes through the crc32 instruction.
  const __m512i moved = Fold(x, k.to_last);
  __m128i last = _mm512_extracti64x2_epi64(x, 3);
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 0));
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 1));
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 2));
  return RawOf(last);
}

}  // namespace
#endif

uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
#ifdef CED_HAVE_SSE42_CRC
  static const ZeroShift long_shift(kLong);
  static const ZeroShift short_shift(kShort);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#ifdef CED_HAVE_CLMUL_FOLD
  if (size >= 1024) {
    const size_t n = size & ~size_t{63};
    c = FoldBlocks<false>(c, p, n, nullptr);
    p += n;
    size -= n;
  }
#endif
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

uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size) {
#ifdef CED_HAVE_CLMUL_FOLD
  if (size >= 1024) {
    const size_t n = size & ~size_t{63};
    auto* d = static_cast<uint8_t*>(dst);
    const auto* p = static_cast<const uint8_t*>(src);
    crc = ~FoldBlocks<true>(~crc, p, n, d);
    if (n == size) return crc;
    std::memcpy(d + n, p + n, size - n);
    return Crc32c(crc, d + n, size - n);
  }
#endif
  if (size == 0) return crc;
  std::memcpy(dst, src, size);
  return Crc32c(crc, dst, size);  // the copy is in this core's cache
}

namespace {

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
uint32_t ShiftOver(uint32_t crc_a, uint64_t len_b) {
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
  return ShiftOver(crc_a, len_b) ^ crc_b;
}

Crc32cFolder::Crc32cFolder(uint64_t len_b) {
  for (int bit = 0; bit < 32; ++bit) shift_[bit] = ShiftOver(uint32_t{1} << bit, len_b);
}

uint32_t Crc32cFolder::Fold(uint32_t crc_a, uint32_t crc_b) const {
  return Times(shift_.data(), crc_a) ^ crc_b;
}

}  // namespace ced::kv_transport
