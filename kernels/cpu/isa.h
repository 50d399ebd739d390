// Which instruction-set variant of the CPU kernels runs in this process.
//
// Every SIMD kernel is compiled once per variant (kernels/cpu/CMakeLists.txt)
// and the entry points in kernels/cpu/*.h call the variant chosen when the
// process first uses a kernel: the best one the CPU (and the OS, for the
// register state) supports, or the one named by the environment variable
// CED_CPU_ISA (`avx512`, `avx2`, `generic`; `auto` or unset = best). Naming a
// variant the CPU lacks is a start-up error (ValidateCpuIsaEnv), never an
// illegal instruction. CED_CPU_HIDE=avx512 (or avx2) makes the process treat
// the CPU as lacking that variant and those above it, to try the fallbacks
// and errors of another CPU. Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ced::kernels {

enum class CpuIsa : int {
  kGeneric = 0,  // x86-64 baseline (SSE2) or any other architecture: portable C++
  kAvx2 = 1,     // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx512 = 2,   // AVX-512 F/BW/VL/DQ (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4)
};
inline constexpr int kNumCpuIsas = 3;

// "generic", "avx2", "avx512".
std::string_view CpuIsaName(CpuIsa isa);
// Parses the names above; false for anything else.
bool ParseCpuIsa(std::string_view name, CpuIsa* out);

// Whether this CPU and OS can run `isa`'s kernels.
bool CpuSupports(CpuIsa isa);
// Every variant this CPU can run, lowest first (always includes kGeneric).
std::vector<CpuIsa> SupportedCpuIsas();
// The best variant this CPU can run.
CpuIsa BestCpuIsa();

// Checks CED_CPU_ISA: empty string when it is unset, `auto`, or names a
// variant this CPU supports; otherwise a message naming the variable, the
// value and what this CPU supports. Checks CED_CPU_PREFETCH and
// CED_CPU_WEIGHTS (kernels/cpu/gemm_packed.h) the same way.
// Binaries call it first thing in main().
std::string ValidateCpuIsaEnv();

// The variant the kernels run. The first call reads CED_CPU_ISA; an invalid
// value there prints ValidateCpuIsaEnv()'s message and exits with status 2
// (binaries that validated at start-up never get here with one).
CpuIsa ActiveCpuIsa();
// Switches the variant for the whole process (tests and benches that run
// every supported variant). Returns false, changing nothing, when the CPU
// lacks `isa`. Call only while no kernel runs: packed weights made under
// another variant must be made again (PackedMatrix checks).
bool SetActiveCpuIsa(CpuIsa isa);

// Where the GEMM and GEMV kernels prefetch the weights they stream: tuned per
// CPU vendor, not per instruction set. On AMD Zen a non-temporal prefetch
// (prefetchnta: into L1/L2 without polluting the other levels) timed best; on
// Intel it fills only L1, where the next weight slice evicted the one the
// register tiles were reading, and prefetching into L2 (prefetcht1) ran the
// prefill products 15-20% and the batch-1 decode step about 2.3x faster
// (bench/results/engine_intel.md). The environment variable CED_CPU_PREFETCH
// (`auto` or unset = by vendor, `nta`, `l2`) forces one, for benches.
enum class PrefetchHint : int {
  kNonTemporal = 0,  // prefetchnta (AMD, and any CPU of unknown vendor)
  kL2 = 1,           // prefetcht1 (Intel)
};
// "nta", "l2".
std::string_view PrefetchHintName(PrefetchHint hint);
// The hint the kernels use: CED_CPU_PREFETCH if set (an invalid value prints
// ValidateCpuIsaEnv()'s message and exits with status 2), else by vendor.
PrefetchHint ActivePrefetchHint();
// Switches the hint for the whole process (benches comparing the two).
void SetActivePrefetchHint(PrefetchHint hint);

// A one-line description: the active variant, what the CPU supports and why,
// the prefetch hint and the packed-weight storage (e.g. "avx2 (cpu: avx2 fma
// f16c; forced by CED_CPU_ISA=avx2; prefetch nta: not an Intel CPU; weights
// bf16 where lossless)").
std::string CpuIsaSummary();

}  // namespace ced::kernels
