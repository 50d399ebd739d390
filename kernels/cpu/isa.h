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
// value and what this CPU supports. Binaries call it first thing in main().
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

// A one-line description: the active variant, what the CPU supports and why
// (e.g. "avx2 (cpu: avx2 fma f16c; forced by CED_CPU_ISA=avx2)").
std::string CpuIsaSummary();

}  // namespace ced::kernels
