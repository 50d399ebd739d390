#include "bench/engine/machine.h"

#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "kernels/cpu/thread_pool.h"

extern "C" char* openblas_get_corename(void);

namespace ced::bench {
namespace {

// The last-level cache this core sees (sysfs), else what sysconf reports
// (in a VM the latter may describe the whole host package).
int64_t L3Bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string text;
  if (in >> text && !text.empty()) {
    int64_t scale = 1;
    if (text.back() == 'K') scale = 1024;
    if (text.back() == 'M') scale = 1024 * 1024;
    if (scale != 1) text.pop_back();
    const int64_t v = std::atoll(text.c_str()) * scale;
    if (v > 0) return v;
  }
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? v : 0;
}

volatile float g_sink = 0;

__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t count) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < count; ++i) total += p[i];
  return total;
}

// The same sum with 512-bit loads, eight accumulators and software prefetch
// (the access pattern of the engine's batch-1 GEMV), with either of the
// kernels' prefetch hints (kernels/cpu/isa.h): the faster one differs by CPU
// vendor, and the probe must find the bound, so it runs both.
template <int kHint>
__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t count) {
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 128 <= count; i += 128) {
    for (int j = 0; j < 8; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 768 + 16 * j), static_cast<_mm_hint>(kHint));
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
  }
  __m512 s = a[0];
  for (int j = 1; j < 8; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < count; ++i) total += p[i];
  return total;
}

constexpr int kChainsAvx2 = 12;
constexpr int kChainsAvx512 = 16;

// acc = acc * a + b converges to b / (1 - a): no overflow, no denormals.
// Every chain starts from its own value: chains that compute the same thing
// get merged by the compiler (GCC folded twelve identical AVX2 chains into
// one, and the probe timed one FMA's latency instead of the throughput: 1.5x
// the real AVX2 peak on Zen 5).
__attribute__((target("avx2,fma"))) float FmaChainsAvx2(int64_t iters) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  __m256 c[kChainsAvx2];
  for (int k = 0; k < kChainsAvx2; ++k) c[k] = _mm256_set1_ps(1.0f + 0.01f * k);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChainsAvx2; ++k) c[k] = _mm256_fmadd_ps(c[k], a, b);
  }
  __m256 s = c[0];
  for (int k = 1; k < kChainsAvx2; ++k) s = _mm256_add_ps(s, c[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0];
}

__attribute__((target("avx512f"))) float FmaChainsAvx512(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  __m512 c[kChainsAvx512];
  for (int k = 0; k < kChainsAvx512; ++k) c[k] = _mm512_set1_ps(1.0f + 0.01f * k);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChainsAvx512; ++k) c[k] = _mm512_fmadd_ps(c[k], a, b);
  }
  __m512 s = c[0];
  for (int k = 1; k < kChainsAvx512; ++k) s = _mm512_add_ps(s, c[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0];
}

// Runs `iters` iterations on every thread of the pool; returns elapsed
// seconds, and in *threads how many threads ran (1 when the pool was backing
// off after a stall).
// The probes run on the engine's worker pool (kernels/cpu/thread_pool.h),
// the threads the engine's kernels use: OpenMP threads would keep spinning
// after a probe (OMP_WAIT_POLICY unset) and take the cores from the pool's
// workers in the decode steps that follow.
double RunFma(FmaIsa isa, int64_t iters, int* threads) {
  const double t0 = NowSeconds();
  kernels::ParallelRun([&](int id, int n) {
    if (id == 0) *threads = n;
    float r = isa == FmaIsa::kAvx2 ? FmaChainsAvx2(iters) : FmaChainsAvx512(iters);
    if (r == 12345.0f) g_sink = r;
  });
  return NowSeconds() - t0;
}

// [begin, end) of thread `id` of `threads` over `count` floats (whole cache
// lines of 128 floats; the first touch and every pass split alike).
std::pair<size_t, size_t> ThreadRange(size_t count, int id, int threads) {
  const size_t per = (count / threads + 127) / 128 * 128;
  const size_t begin = std::min(count, per * id);
  return {begin, std::min(count, begin + per)};
}

}  // namespace

MachineInfo CollectMachineInfo() {
  MachineInfo m;
  m.cpu_model = CpuModelName();
  m.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  m.omp_threads = omp_get_max_threads();
  m.l3_bytes = L3Bytes();
  m.has_avx512 = __builtin_cpu_supports("avx512f");
  const char* core = openblas_get_corename();
  m.blas_core = core != nullptr ? core : "unknown";
  m.compiler = __VERSION__;
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  m.omp_wait_policy = wait != nullptr ? wait : "";
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  m.blas_coretype_env = coretype != nullptr ? coretype : "";
  return m;
}

absl::StatusOr<std::unique_ptr<ReadBandwidthProbe>> ReadBandwidthProbe::Create(size_t bytes) {
  bytes = (bytes + 4095) / 4096 * 4096;
  float* data = static_cast<float*>(std::aligned_alloc(4096, bytes));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("bandwidth probe: cannot allocate ", bytes, " bytes"));
  }
  const size_t count = bytes / sizeof(float);
  kernels::ParallelRun([&](int id, int threads) {
    const auto [begin, end] = ThreadRange(count, id, threads);
    for (size_t i = begin; i < end; ++i) data[i] = static_cast<float>(i & 1023) * 1e-3f;
  });
  return std::unique_ptr<ReadBandwidthProbe>(new ReadBandwidthProbe(data, bytes));
}

ReadBandwidthProbe::~ReadBandwidthProbe() { std::free(data_); }

ProbeSample ReadBandwidthProbe::Pass(Kind pass) {
  const size_t count = bytes_ / sizeof(float);
  std::vector<float> totals(kernels::PoolThreads(), 0.0f);
  const double c0 = ProcessCpuSeconds();
  const double t0 = NowSeconds();
  int ran = 1;
  kernels::ParallelRun([&](int id, int threads) {
    if (id == 0) ran = threads;
    // Same split as the first touch (a pool that ran alone reads it all).
    const auto [begin, end] = ThreadRange(count, id, threads);
    switch (pass) {
      case Kind::kAvx2: totals[id] = SumAvx2(data_ + begin, end - begin); break;
      case Kind::kAvx512Nta: totals[id] = SumAvx512<_MM_HINT_NTA>(data_ + begin, end - begin); break;
      case Kind::kAvx512L2: totals[id] = SumAvx512<_MM_HINT_T1>(data_ + begin, end - begin); break;
    }
  });
  const double dt = NowSeconds() - t0;
  const double cpu = ProcessCpuSeconds() - c0;
  float sum = 0.0f;
  for (float t : totals) sum += t;
  g_sink = sum;
  return {static_cast<double>(bytes_) / dt, cpu / (dt * ran)};
}

ProbeSample ReadBandwidthProbe::Measure() {
  ProbeSample best = Pass(Kind::kAvx2);
  if (__builtin_cpu_supports("avx512f")) {
    for (Kind pass : {Kind::kAvx512Nta, Kind::kAvx512L2}) {
      const ProbeSample s = Pass(pass);
      if (s.rate > best.rate) best = s;
    }
  }
  return best;
}

const char* FmaIsaName(FmaIsa isa) { return isa == FmaIsa::kAvx2 ? "AVX2" : "AVX-512"; }

ProbeSample MeasureFmaPeak(FmaIsa isa, double seconds) {
  if (isa == FmaIsa::kAvx512 && !__builtin_cpu_supports("avx512f")) return {};
  if (isa == FmaIsa::kAvx2 && !__builtin_cpu_supports("fma")) return {};
  const int chains = isa == FmaIsa::kAvx2 ? kChainsAvx2 : kChainsAvx512;
  const int lanes = isa == FmaIsa::kAvx2 ? 8 : 16;
  int64_t iters = 1 << 16;
  int threads = 1;
  double dt = RunFma(isa, iters, &threads);
  while (dt < seconds / 8) {  // calibrate
    iters *= 2;
    dt = RunFma(isa, iters, &threads);
  }
  iters = static_cast<int64_t>(iters * seconds / dt);
  const double c0 = ProcessCpuSeconds();
  dt = RunFma(isa, iters, &threads);
  const double cpu = ProcessCpuSeconds() - c0;
  const double flops = 2.0 * chains * lanes * static_cast<double>(iters) * threads;
  return {flops / dt, cpu / (dt * threads)};
}

double BestFmaPeakGflops(FmaIsa isa, int samples, double seconds) {
  double best = 0;
  for (int i = 0; i < samples; ++i) best = std::max(best, MeasureFmaPeak(isa, seconds).rate * 1e-9);
  return best;
}

double VariantFmaPeakGflops(kernels::CpuIsa isa) {
  switch (isa) {
    case kernels::CpuIsa::kAvx512:
      return BestFmaPeakGflops(FmaIsa::kAvx512);
    case kernels::CpuIsa::kAvx2:
      return BestFmaPeakGflops(FmaIsa::kAvx2);
    default:
      return 0;
  }
}

absl::StatusOr<std::vector<kernels::CpuIsa>> ParseKernelVariants(const std::string& text) {
  if (text.empty()) return kernels::SupportedCpuIsas();
  std::vector<kernels::CpuIsa> picked;
  for (absl::string_view name : absl::StrSplit(text, ',')) {
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--variants: empty item in '", text, "'"));
    }
    kernels::CpuIsa isa;
    if (!kernels::ParseCpuIsa(std::string_view(name.data(), name.size()), &isa)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--variants: unknown kernel variant '", name, "' (avx512, avx2, generic)"));
    }
    if (!kernels::CpuSupports(isa)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--variants: this CPU does not support '", name, "'"));
    }
    picked.push_back(isa);
  }
  return picked;
}

}  // namespace ced::bench
