// The x86 variants behind Crc32c / CopyCrc32c (checksum.h). Internal to
// checksum.cc, which calls one only on a CPU that has its instructions: each is
// compiled with GCC function-level target attributes, so this code builds at the
// baseline ISA and must never run where its instructions are missing.
// Arguments and results as Crc32c / CopyCrc32c; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)

namespace ced::kv_transport::x86 {

// SSE4.2 crc32 instruction, three interleaved streams (Nehalem, every AVX2 CPU).
uint32_t Sse42Crc32c(uint32_t crc, const void* data, size_t size);
uint32_t Sse42CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size);

// AVX-512 F/DQ + VPCLMULQDQ (and the above): folds 64-byte blocks, 256 bytes
// per round (Ice Lake, Sapphire Rapids, Zen 4+).
uint32_t FoldCrc32c(uint32_t crc, const void* data, size_t size);
uint32_t FoldCopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size);

}  // namespace ced::kv_transport::x86

#endif
