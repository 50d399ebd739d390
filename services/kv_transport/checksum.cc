#include "services/kv_transport/checksum.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "services/kv_transport/checksum_x86.h"

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

namespace {

uint32_t PortableCopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size) {
  // Copy a piece at a time and checksum the copy while it is in this core's
  // L1 cache: one pass over memory.
  constexpr size_t kChunk = 16 << 10;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < size; off += kChunk) {
    const size_t n = std::min(kChunk, size - off);
    std::memcpy(d + off, s + off, n);
    crc = Crc32cPortable(crc, d + off, n);
  }
  return crc;
}

struct Impl {
  uint32_t (*crc)(uint32_t, const void*, size_t);
  uint32_t (*copy)(uint32_t, void*, const void*, size_t);
};

constexpr int kNumImpls = 3;

Impl ImplFor(Crc32cImpl impl) {
  switch (impl) {
#if defined(__x86_64__)
    case Crc32cImpl::kAvx512Fold: return {&x86::FoldCrc32c, &x86::FoldCopyCrc32c};
    case Crc32cImpl::kSse42: return {&x86::Sse42Crc32c, &x86::Sse42CopyCrc32c};
#endif
    default: return {&Crc32cPortable, &PortableCopyCrc32c};
  }
}

bool CpuHas(Crc32cImpl impl) {
#if defined(__x86_64__)
  // libgcc's CPU model also checks XCR0 (the OS saves the register state).
  __builtin_cpu_init();
  const bool sse42 = __builtin_cpu_supports("sse4.2");
  switch (impl) {
    case Crc32cImpl::kPortable: return true;
    case Crc32cImpl::kSse42: return sse42;
    case Crc32cImpl::kAvx512Fold:
      return sse42 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("vpclmulqdq");
  }
  return false;
#else
  return impl == Crc32cImpl::kPortable;
#endif
}

// What each kernel variant runs, and the implementations' entry points, both
// decided once per process.
struct Dispatch {
  std::array<bool, kNumImpls> supported{};
  std::array<Crc32cImpl, kernels::kNumCpuIsas> by_isa{};
  std::array<Impl, kNumImpls> impls{};

  Dispatch() {
    for (int i = 0; i < kNumImpls; ++i) {
      supported[i] = CpuHas(static_cast<Crc32cImpl>(i));
      impls[i] = ImplFor(static_cast<Crc32cImpl>(i));
    }
    for (int i = 0; i < kernels::kNumCpuIsas; ++i) {
      Crc32cImpl impl = Crc32cImpl::kPortable;
      switch (static_cast<kernels::CpuIsa>(i)) {
        case kernels::CpuIsa::kAvx512:
          if (supported[static_cast<int>(Crc32cImpl::kAvx512Fold)]) {
            impl = Crc32cImpl::kAvx512Fold;
            break;
          }
          [[fallthrough]];
        case kernels::CpuIsa::kAvx2:
          if (supported[static_cast<int>(Crc32cImpl::kSse42)]) impl = Crc32cImpl::kSse42;
          break;
        case kernels::CpuIsa::kGeneric:
          break;
      }
      by_isa[i] = impl;
    }
  }
};

const Dispatch& GetDispatch() {
  static const Dispatch dispatch;
  return dispatch;
}

// The active implementation follows kernels::SetActiveCpuIsa as well: one
// atomic load per call.
const Impl& Active() {
  const Dispatch& d = GetDispatch();
  return d.impls[static_cast<int>(d.by_isa[static_cast<int>(kernels::ActiveCpuIsa())])];
}

const Impl& Checked(Crc32cImpl impl) {
  const int i = static_cast<int>(impl);
  if (i < 0 || i >= kNumImpls || !GetDispatch().supported[i]) {
    std::fprintf(stderr, "fatal: CRC32C implementation %d is not supported by this CPU\n", i);
    std::abort();
  }
  return GetDispatch().impls[i];
}

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
  return Active().crc(crc, data, size);
}

uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size) {
  return Active().copy(crc, dst, src, size);
}

std::string_view Crc32cImplName(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::kPortable: return "portable";
    case Crc32cImpl::kSse42: return "sse4.2";
    case Crc32cImpl::kAvx512Fold: return "avx512+vpclmulqdq";
  }
  return "unknown";
}

std::vector<Crc32cImpl> SupportedCrc32cImpls() {
  std::vector<Crc32cImpl> out;
  for (int i = 0; i < kNumImpls; ++i) {
    if (GetDispatch().supported[i]) out.push_back(static_cast<Crc32cImpl>(i));
  }
  return out;
}

Crc32cImpl ActiveCrc32cImpl() {
  return GetDispatch().by_isa[static_cast<int>(kernels::ActiveCpuIsa())];
}

std::string_view Crc32cImplementation() { return Crc32cImplName(ActiveCrc32cImpl()); }

uint32_t Crc32cWith(Crc32cImpl impl, uint32_t crc, const void* data, size_t size) {
  return Checked(impl).crc(crc, data, size);
}

uint32_t CopyCrc32cWith(Crc32cImpl impl, uint32_t crc, void* dst, const void* src, size_t size) {
  return Checked(impl).copy(crc, dst, src, size);
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
