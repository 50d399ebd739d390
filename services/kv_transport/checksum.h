// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the KV wire header and
// payload integrity checks. Thread-safe pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ced::kv_transport {

// Extends a running CRC32C `crc` (start with 0) over `size` bytes at `data`.
// Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b). `data` may be null when size == 0.
// Runs the implementation ActiveCrc32cImpl() names.
uint32_t Crc32c(uint32_t crc, const void* data, size_t size);

// Same result, always the software table-driven (slicing-by-8) implementation.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t size);

// Copies `size` bytes from `src` to `dst` (which must not overlap) and returns
// Crc32c(crc, src, size), in one pass over memory (the receiver's landing copy
// doubles as its check).
uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size);

// The implementations behind Crc32c and CopyCrc32c; all give the same results.
enum class Crc32cImpl : int {
  kPortable = 0,    // slicing-by-8 tables: any CPU
  kSse42 = 1,       // SSE4.2 crc32 instruction, three interleaved streams
  kAvx512Fold = 2,  // VPCLMULQDQ folding of 64-byte blocks (AVX-512 F/DQ), then kSse42
};

// "portable", "sse4.2", "avx512+vpclmulqdq".
std::string_view Crc32cImplName(Crc32cImpl impl);
// Every implementation this CPU can run, lowest first (always kPortable).
std::vector<Crc32cImpl> SupportedCrc32cImpls();
// The implementation Crc32c runs now, chosen at run time to follow the CPU
// kernels' variant (kernels::ActiveCpuIsa(), so CED_CPU_ISA lowers it too):
// avx512 with VPCLMULQDQ -> kAvx512Fold; avx512 or avx2 with SSE4.2 ->
// kSse42; otherwise (generic) kPortable.
Crc32cImpl ActiveCrc32cImpl();
// Crc32cImplName(ActiveCrc32cImpl()).
std::string_view Crc32cImplementation();

// Crc32c / CopyCrc32c through a named implementation (tests and benches that
// compare them). `impl` must be in SupportedCrc32cImpls(): anything else is a
// programmer error and aborts (it would be an illegal instruction).
uint32_t Crc32cWith(Crc32cImpl impl, uint32_t crc, const void* data, size_t size);
uint32_t CopyCrc32cWith(Crc32cImpl impl, uint32_t crc, void* dst, const void* src, size_t size);

// CRC32C of A ++ B from crc_a = Crc32c(0, A), crc_b = Crc32c(0, B) and |B|,
// without touching the data: checksums of pieces that arrive (or are computed)
// apart are folded into the checksum of the whole.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Crc32cCombine for a fixed |B|, precomputed: 32 word operations per fold.
class Crc32cFolder {
 public:
  explicit Crc32cFolder(uint64_t len_b);
  uint32_t Fold(uint32_t crc_a, uint32_t crc_b) const;

 private:
  std::array<uint32_t, 32> shift_{};  // the linear map "append len_b zero bytes"
};

}  // namespace ced::kv_transport
