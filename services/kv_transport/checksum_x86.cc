#include "services/kv_transport/checksum_x86.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

// Function-level targets: the translation unit itself is built for the
// baseline ISA. Everything that executes one of these instructions carries
// the attribute (lambdas do not inherit it, so there are none here).
#define CED_TARGET_SSE42 __attribute__((target("sse4.2")))
#define CED_TARGET_CLMUL __attribute__((target("sse4.2,pclmul")))
#define CED_TARGET_FOLD __attribute__((target("sse4.2,pclmul,avx512f,avx512dq,vpclmulqdq")))

namespace ced::kv_transport::x86 {
namespace {

inline uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));  // x86 is little-endian
  return word;
}

// ---- Shared helpers (SSE4.2 + PCLMULQDQ) ----------------------------------

// The hardware crc32 instruction has a latency of several cycles but a
// throughput of one per cycle, so one dependency chain leaves most of it idle.
// Long inputs are cut into interleaved streams computed independently (all but
// the first from a zero register) and combined: with raw(c, D) the register
// after feeding D to c, raw(c, A|B) = Z(raw(c, A)) ^ raw(0, B), where Z feeds
// |B| zero bytes. Z is linear over GF(2), so it is applied as four 256-entry
// tables indexed by the register's bytes.
struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> table{};
  CED_TARGET_SSE42 explicit ZeroShift(size_t bytes) {
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

CED_TARGET_SSE42 inline uint32_t Raw16(uint64_t lo, uint64_t hi) {
  return static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, lo), hi));
}

CED_TARGET_SSE42 inline uint32_t RawOf(__m128i v) {
  return Raw16(static_cast<uint64_t>(_mm_cvtsi128_si64(v)),
               static_cast<uint64_t>(_mm_extract_epi64(v, 1)));
}

CED_TARGET_SSE42 uint32_t ShiftZeros(uint32_t c, size_t bytes) {
  uint64_t r = c;
  for (size_t i = 0; i < bytes; i += 8) r = _mm_crc32_u64(r, 0);
  return static_cast<uint32_t>(r);
}

CED_TARGET_CLMUL __m128i Clmul(uint64_t a, uint64_t b) {
  return _mm_clmulepi64_si128(_mm_set_epi64x(0, static_cast<long long>(a)),
                              _mm_set_epi64x(0, static_cast<long long>(b)), 0x00);
}

// Folding with carry-less multiplies: the contribution of a 16-byte block B to
// the CRC equals that of a 16-byte block G(B) placed d bytes later, and G is
// clmul(lo(B), K_lo) ^ clmul(hi(B), K_hi) for two constants of the distance d.
// Rather than transcribing constants for this bit order, they are solved for at
// start-up, from the definition, as a linear system over GF(2): for each of the
// 64 basis vectors e_i, F(clmul(e_i, K)) == F(e_i-block followed by d zero
// bytes), with F the raw CRC register of a message (linear in the message). Any
// solution is exact by linearity; the tests check against the portable code.
//
// K such that F(clmul(x, K)) == Z_d(F(block with x in half `half`)) for all x.
CED_TARGET_CLMUL uint64_t SolveFold(size_t d, int half) {
  // Rows: 64 unknown bits (K) + 1 right-hand side bit, 32 equations per basis vector.
  struct Row {
    uint64_t mask;
    bool rhs;
  };
  std::vector<Row> rows;
  rows.reserve(64 * 32);
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

// The (K_lo, K_hi) pair of distance d in one 128-bit lane.
CED_TARGET_CLMUL __m128i FoldPair(size_t d) {
  return _mm_set_epi64x(static_cast<long long>(SolveFold(d, 1)),
                        static_cast<long long>(SolveFold(d, 0)));
}

// Feeds `rounds` x 3 x `block` bytes at `p` to the raw register `c`.
template <size_t block>
CED_TARGET_SSE42 uint32_t ThreeWay(uint32_t c, const uint8_t* p, size_t rounds,
                                   const ZeroShift& shift) {
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

// ---- SSE4.2 variant ------------------------------------------------------------

// Three streams of kLong bytes each, then of kShort for what is left. (Running
// a 128-bit PCLMULQDQ fold of a fourth part alongside the streams measured
// slower than the streams alone on a Zen 5-class CPU, so this variant does not.)
constexpr size_t kLong = 4096;
constexpr size_t kShort = 256;

// Feeds `size` bytes (any) at `p` to the raw register `c`.
CED_TARGET_SSE42 uint32_t Sse42Raw(uint32_t c, const uint8_t* p, size_t size) {
  static const ZeroShift long_shift(kLong);
  static const ZeroShift short_shift(kShort);
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
  return c;
}

// ---- AVX-512 + VPCLMULQDQ variant --------------------------------------------

// Folding (above) on four 128-bit lanes of a 512-bit register.
struct FoldConstants {
  __m512i d256, d64;  // four lanes each moved 256 / 64 bytes on
  __m512i to_last;    // lanes 0..2 moved 48 / 32 / 16 bytes (onto lane 3); lane 3 kept
  CED_TARGET_FOLD FoldConstants()
      : d256(Lanes(FoldPair(256), FoldPair(256), FoldPair(256), FoldPair(256))),
        d64(Lanes(FoldPair(64), FoldPair(64), FoldPair(64), FoldPair(64))),
        to_last(Lanes(FoldPair(48), FoldPair(32), FoldPair(16), _mm_setzero_si128())) {}

  // Lane i = the i-th argument.
  static CED_TARGET_FOLD __m512i Lanes(__m128i l0, __m128i l1, __m128i l2, __m128i l3) {
    __m512i v = _mm512_castsi128_si512(l0);
    v = _mm512_inserti64x2(v, l1, 1);
    v = _mm512_inserti64x2(v, l2, 2);
    return _mm512_inserti64x2(v, l3, 3);
  }
};

CED_TARGET_FOLD inline __m512i Fold512(__m512i x, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                          _mm512_clmulepi64_epi128(x, k, 0x11));
}

// Loads 64 bytes at `p`; with kCopy also stores them at `dst`.
template <bool kCopy>
CED_TARGET_FOLD inline __m512i LoadBlock(const uint8_t* p, uint8_t* dst) {
  const __m512i v = _mm512_loadu_si512(p);
  if constexpr (kCopy) _mm512_storeu_si512(dst, v);
  return v;
}

// Raw register after feeding `size` (a multiple of 64, >= 256) bytes at `p` to
// `c`; with kCopy the bytes are also copied to `dst` on the way (one pass).
template <bool kCopy>
CED_TARGET_FOLD uint32_t FoldBlocks(uint32_t c, const uint8_t* p, size_t size, uint8_t* dst) {
  static const FoldConstants k;
  // The register enters as the first four message bytes XORed with it.
  __m512i x0 = _mm512_xor_si512(LoadBlock<kCopy>(p, dst),
                                _mm512_castsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i x1 = LoadBlock<kCopy>(p + 64, dst + 64);
  __m512i x2 = LoadBlock<kCopy>(p + 128, dst + 128);
  __m512i x3 = LoadBlock<kCopy>(p + 192, dst + 192);
  size_t i = 256;
  for (; i + 256 <= size; i += 256) {
    x0 = _mm512_xor_si512(Fold512(x0, k.d256), LoadBlock<kCopy>(p + i, dst + i));
    x1 = _mm512_xor_si512(Fold512(x1, k.d256), LoadBlock<kCopy>(p + i + 64, dst + i + 64));
    x2 = _mm512_xor_si512(Fold512(x2, k.d256), LoadBlock<kCopy>(p + i + 128, dst + i + 128));
    x3 = _mm512_xor_si512(Fold512(x3, k.d256), LoadBlock<kCopy>(p + i + 192, dst + i + 192));
  }
  // x0..x3 hold 256 consecutive bytes: fold them onto the last 64.
  __m512i x = _mm512_xor_si512(Fold512(x0, k.d64), x1);
  x = _mm512_xor_si512(Fold512(x, k.d64), x2);
  x = _mm512_xor_si512(Fold512(x, k.d64), x3);
  for (; i < size; i += 64) {
    x = _mm512_xor_si512(Fold512(x, k.d64), LoadBlock<kCopy>(p + i, dst + i));
  }
  // Four lanes onto the last one (lane 3 passes through the zero constant as 0;
  // add it back), then the 16 remaining bytes through the crc32 instruction.
  const __m512i moved = Fold512(x, k.to_last);
  __m128i last = _mm512_extracti64x2_epi64(x, 3);
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 0));
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 1));
  last = _mm_xor_si128(last, _mm512_extracti64x2_epi64(moved, 2));
  return RawOf(last);
}

constexpr size_t kFoldMin = 1024;  // below this the crc32 streams win

}  // namespace

uint32_t Sse42Crc32c(uint32_t crc, const void* data, size_t size) {
  if (size == 0) return crc;
  return ~Sse42Raw(~crc, static_cast<const uint8_t*>(data), size);
}

uint32_t Sse42CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size) {
  // Copy a few rounds at a time and checksum the copy while it is in this
  // core's L1 cache: one pass over memory.
  constexpr size_t kChunk = 3 * kLong;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  uint32_t c = ~crc;
  for (size_t off = 0; off < size; off += kChunk) {
    const size_t n = std::min(kChunk, size - off);
    std::memcpy(d + off, s + off, n);
    c = Sse42Raw(c, d + off, n);
  }
  return ~c;
}

uint32_t FoldCrc32c(uint32_t crc, const void* data, size_t size) {
  if (size < kFoldMin) return Sse42Crc32c(crc, data, size);
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t n = size & ~size_t{63};
  const uint32_t c = FoldBlocks<false>(~crc, p, n, nullptr);
  return ~Sse42Raw(c, p + n, size - n);
}

uint32_t FoldCopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size) {
  if (size < kFoldMin) return Sse42CopyCrc32c(crc, dst, src, size);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* p = static_cast<const uint8_t*>(src);
  const size_t n = size & ~size_t{63};
  const uint32_t c = FoldBlocks<true>(~crc, p, n, d);
  std::memcpy(d + n, p + n, size - n);
  return ~Sse42Raw(c, d + n, size - n);
}

}  // namespace ced::kv_transport::x86

#endif  // defined(__x86_64__)
