// Facts about the machine and two micro-benchmarks that bound the engine:
// sustained memory read bandwidth (STREAM-like sum over a buffer much larger
// than the last-level cache) and peak FMA throughput (independent FMA chains
// in registers). Both use every OpenMP thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/isa.h"

namespace ced::bench {

struct MachineInfo {
  std::string cpu_model;          // /proc/cpuinfo "model name"
  int logical_cores = 0;          // std::thread::hardware_concurrency
  int omp_threads = 0;            // omp_get_max_threads
  int64_t l3_bytes = 0;           // 0 when unknown
  bool has_avx512 = false;        // AVX-512F usable
  std::string blas_core;          // OpenBLAS kernel set in use (e.g. "Haswell")
  std::string compiler;           // compiler version string
  std::string omp_wait_policy;    // $OMP_WAIT_POLICY or ""
  std::string blas_coretype_env;  // $OPENBLAS_CORETYPE or "" (kernels auto-detected)
};
MachineInfo CollectMachineInfo();

// One probe measurement: its rate (B/s or FLOP/s) and the CPU share it got,
// process CPU time / (wall time x threads); rate / cpu_share estimates the
// rate on a machine nobody else is using.
struct ProbeSample {
  double rate = 0;
  double cpu_share = 0;
};

// Reads a buffer of `bytes` (allocated and first-touched by all threads).
// Not thread-safe; Measure() uses all OpenMP threads.
class ReadBandwidthProbe {
 public:
  static absl::StatusOr<std::unique_ptr<ReadBandwidthProbe>> Create(size_t bytes);
  ~ReadBandwidthProbe();
  // The fastest of the full passes (an AVX2 sum, and on AVX-512 CPUs 512-bit
  // sums with either software-prefetch hint); rate in bytes read per second.
  ProbeSample Measure();
  size_t bytes() const { return bytes_; }

 private:
  // A sum with 256-bit loads, or 512-bit loads with prefetchnta / prefetcht1.
  enum class Kind { kAvx2, kAvx512Nta, kAvx512L2 };
  ProbeSample Pass(Kind pass);
  ReadBandwidthProbe(float* data, size_t bytes) : data_(data), bytes_(bytes) {}
  float* data_;
  size_t bytes_;
};

enum class FmaIsa { kAvx2, kAvx512 };
const char* FmaIsaName(FmaIsa isa);

// Runs independent FMA chains on all threads for about `seconds`; rate in
// FLOP/s (an FMA counts 2 FLOPs), 0 when the ISA is not available.
ProbeSample MeasureFmaPeak(FmaIsa isa, double seconds);
// The best of `samples` such measurements, GFLOP/s: one sample taken while
// another process held a core read 126.6 GFLOP/s against 198-200 on an idle
// AVX2 machine, and every kernel then "ran" above the peak.
double BestFmaPeakGflops(FmaIsa isa, int samples = 5, double seconds = 0.1);
// The same for the FMAs of a CPU kernel variant (AVX-512 or AVX2); 0 for the
// portable variant, which has no FMA peak of its own.
double VariantFmaPeakGflops(kernels::CpuIsa isa);

// A --variants flag: "avx2,avx512" -> those variants, each one this CPU
// supports; empty -> every variant it supports. An error naming --variants
// for an unknown or unsupported variant, or an empty item.
absl::StatusOr<std::vector<kernels::CpuIsa>> ParseKernelVariants(const std::string& text);

}  // namespace ced::bench
