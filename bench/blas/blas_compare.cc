// The engine's packed GEMM/GEMV (every kernel variant this CPU supports)
// against OpenBLAS and oneDNN sgemm on the engine's GEMM shapes.
//
// All compute y[n, out] = x[n, in] * w[out, in]^T (row-major, NoTrans x
// Trans, like a linear layer). The engine's weights are packed once, as when
// a model loads (kernels/cpu/gemm_packed.h); BLAS packs on every call, which
// is the cost the engine avoids. Every repetition times all contenders back
// to back (rotating the order), so drifts of a shared machine hit all alike;
// cells are the median GFLOP/s of the repetitions with (min..max). Each
// variant's cell also gives its share of that variant's FMA peak measured in
// the same run on the same threads. For n == 1 it also times cblas_sgemv.
//
// Fairness between contenders in one process: each library's idle threads
// must not hold the cores while the next contender runs. OpenBLAS's workers
// spin about 2^28 cycles after a call and OpenMP's (oneDNN's, with the wait
// policy unset) spin too; on a machine with as many cores as threads, the
// contender timed next then shares its cores with them (the engine's pool
// measured at the speed of one thread). So the program runs itself again
// with OMP_WAIT_POLICY=passive and OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles)
// unless they are set (set them to time the libraries' defaults: e.g.
// OMP_WAIT_POLICY=active OPENBLAS_THREAD_TIMEOUT=28), and says so in its
// header. All buffers are 64-byte aligned, as the engine's are.
//
// Usage: blas_compare [--reps=N] [--ms=M] [--threads=T] [--variants=V] [--shapes=S]
//   N >= 7 repetitions of ~M ms each; T threads for every contender
//   (default 1: per-core figures); V a comma list of kernel variants (default
//   all this CPU supports); S a comma list of NxINxOUT shapes (default: the
//   engine's, below).
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/common/flags.h"
#include "bench/engine/machine.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/isa.h"
#include "oneapi/dnnl/dnnl.h"

namespace {

struct Shape {
  int n, in, out;
};

// 64-byte aligned storage (cache lines; the engine's activations are too),
// so no contender's rows straddle lines differently from another's.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <typename U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};
using Floats = std::vector<float, Aligned64<float>>;

// The `small` preset's projections: qkv/attention-out, local/global K or V,
// FFN up/gate and down, the LM head; prefill chunks (256), decode batches (1, 16).
constexpr Shape kShapes[] = {{256, 512, 512}, {256, 512, 256}, {256, 512, 1536},
                             {256, 1536, 512}, {1, 512, 1536},  {1, 1536, 512},
                             {1, 512, 260},    {16, 512, 1536}};

// "256x512x512,1x512x260" -> shapes; empty -> kShapes.
bool ParseShapes(const std::string& text, std::vector<Shape>* out) {
  out->clear();
  if (text.empty()) {
    out->assign(std::begin(kShapes), std::end(kShapes));
    return true;
  }
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    Shape s;
    char tail = 0;
    if (std::sscanf(text.substr(start, end - start).c_str(), "%dx%dx%d%c", &s.n, &s.in, &s.out,
                    &tail) != 3 ||
        s.n < 1 || s.in < 1 || s.out < 1) {
      return false;
    }
    out->push_back(s);
    start = end + 1;
  }
  return !out->empty();
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Seconds per call of `fn`, averaged over `iters` calls.
double TimeCalls(const std::function<void()>& fn, int iters) {
  const double t0 = Now();
  for (int i = 0; i < iters; ++i) fn();
  return (Now() - t0) / iters;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Stats {
  double median, lo, hi;  // GFLOP/s
};

Stats ToGflops(const std::vector<double>& seconds, double flops) {
  std::vector<double> g;
  for (double s : seconds) g.push_back(flops / s * 1e-9);
  return {Median(g), *std::min_element(g.begin(), g.end()), *std::max_element(g.begin(), g.end())};
}

double MaxRelDiff(const Floats& a, const Floats& b) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  namespace k = ced::kernels;
  // No contender's idle threads spin through the next one's timing (see the
  // top of this file): set before the libraries start their threads.
  if (std::getenv("CED_BLAS_COMPARE_ENV") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    // A CPU model newer than the linked OpenBLAS (Debian 12's 0.3.21 takes
    // an Emerald Rapids Xeon for a Prescott) gets its SSE3 kernels; the peer
    // a user would tune gets the kernels of the CPU's instruction set.
    const std::string core = openblas_get_corename();
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      const char* want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                         : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                           : nullptr;
      const bool weak = core == "Prescott" || core == "Core2" || core == "Penryn" ||
                        core == "Nehalem" || core == "Dunnington" || core == "Atom" ||
                        core == "Katmai" || core == "Banias" || core == "Northwood";
      if (want != nullptr && weak) {
        setenv("OPENBLAS_CORETYPE", want, 1);
        setenv("CED_BLAS_COMPARE_DETECTED", core.c_str(), 1);
      }
    }
    setenv("CED_BLAS_COMPARE_ENV", "1", 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr, "blas_compare: cannot run itself again (%s); idle library threads may spin\n",
                 std::strerror(errno));
  }
  if (const std::string err = k::ValidateCpuIsaEnv(); !err.empty()) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 2;
  }
  int reps = 9, ms = 20, threads = 1;
  std::string variants_flag, shapes_flag;
  ced::bench::FlagSet flags;
  flags.Int("reps", &reps, "repetitions (at least 7)");
  flags.Int("ms", &ms, "milliseconds per repetition (at least 1)");
  flags.Int("threads", &threads, "threads for every contender (1: per-core figures)");
  flags.String("variants", &variants_flag,
               "comma list of kernel variants to time (default: every one this CPU supports)");
  flags.String("shapes", &shapes_flag,
               "comma list of NxINxOUT products (default: the engine's shapes of `small`)");
  if (absl::Status st = flags.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "blas_compare: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help("blas_compare [--reps=N] [--ms=M] [--threads=T] [--variants=V] "
                                 "[--shapes=S]",
                                 "The engine's packed GEMM per kernel variant vs OpenBLAS and "
                                 "oneDNN sgemm on the engine's GEMM shapes.")
                          .c_str());
    return 0;
  }
  std::vector<Shape> shapes;
  if (!ParseShapes(shapes_flag, &shapes)) {
    std::fprintf(stderr, "blas_compare: --shapes=%s: expected NxINxOUT[,NxINxOUT...]\n",
                 shapes_flag.c_str());
    return 2;
  }
  const absl::StatusOr<std::vector<k::CpuIsa>> isas_or =
      ced::bench::ParseKernelVariants(variants_flag);
  if (!isas_or.ok()) {
    std::fprintf(stderr,
                 "blas_compare: --variants=%s: expected a comma list of variants this CPU "
                 "supports\n",
                 variants_flag.c_str());
    return 2;
  }
  const std::vector<k::CpuIsa>& isas = *isas_or;
  reps = std::max(7, reps);
  threads = std::max(1, threads);
  const double target_s = std::max(1, ms) * 1e-3;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);  // oneDNN here is built on the OpenMP runtime; so is the pool
  std::vector<double> peaks;
  for (k::CpuIsa isa : isas) peaks.push_back(ced::bench::VariantFmaPeakGflops(isa));
  const dnnl_version_t* v = dnnl_version();
  const ced::bench::MachineInfo m = ced::bench::CollectMachineInfo();
  std::printf("# CPU: %s\n# OpenBLAS: %s\n# oneDNN: %d.%d.%d\n# %d thread(s) each, %d reps of ~%.0f ms\n",
              m.cpu_model.c_str(), openblas_get_config(), v->major, v->minor, v->patch, threads,
              reps, target_s * 1e3);
  if (const char* detected = std::getenv("CED_BLAS_COMPARE_DETECTED"); detected != nullptr) {
    std::printf("# OpenBLAS auto-detection took this CPU for a %s (a model newer than the "
                "library); forced OPENBLAS_CORETYPE=%s, the kernels of its instruction set\n",
                detected, std::getenv("OPENBLAS_CORETYPE"));
  }
  std::printf("# Idle threads: OMP_WAIT_POLICY=%s OPENBLAS_THREAD_TIMEOUT=%s (no contender's idle "
              "threads spin while another runs)\n",
              std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "unset",
              std::getenv("OPENBLAS_THREAD_TIMEOUT") ? std::getenv("OPENBLAS_THREAD_TIMEOUT") : "unset");
  std::printf("# FMA peak on %d thread(s):", threads);
  for (size_t i = 0; i < isas.size(); ++i) {
    if (peaks[i] > 0) std::printf(" %s %.1f GFLOP/s", std::string(k::CpuIsaName(isas[i])).c_str(), peaks[i]);
  }
  std::printf("\n\n| n | in | out | OpenBLAS sgemm | oneDNN sgemm |");
  for (k::CpuIsa isa : isas) std::printf(" ced %s (%% of its peak) |", std::string(k::CpuIsaName(isa)).c_str());
  std::printf(" best ced / OpenBLAS | OpenBLAS sgemv | max rel diff |\n|---|---|---|---|---|");
  for (size_t i = 0; i < isas.size(); ++i) std::printf("---|");
  std::printf("---|---|---|\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  bool all_match = true;
  for (const Shape& s : shapes) {
    Floats x(static_cast<size_t>(s.n) * s.in), w(static_cast<size_t>(s.out) * s.in);
    for (float& e : x) e = normal(rng);
    for (float& e : w) e = normal(rng);
    Floats y_blas(static_cast<size_t>(s.n) * s.out), y_dnnl(y_blas.size()),
        y_gemv(y_blas.size());
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.n, s.out, s.in, 1.0f, x.data(), s.in,
                  w.data(), s.in, 0.0f, y_blas.data(), s.out);
    };
    bool dnnl_ok = true;
    auto dnnl = [&] {
      dnnl_ok &= dnnl_sgemm('N', 'T', s.n, s.out, s.in, 1.0f, x.data(), s.in, w.data(), s.in, 0.0f,
                            y_dnnl.data(), s.out) == dnnl_success;
    };
    auto gemv = [&] {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, s.out, s.in, 1.0f, w.data(), s.in, x.data(), 1,
                  0.0f, y_gemv.data(), 1);
    };
    // The engine, one packed copy per variant (made under that variant).
    std::vector<std::unique_ptr<k::PackedMatrix>> packed;
    std::vector<Floats> y_ced(isas.size(), Floats(y_blas.size()));
    for (k::CpuIsa isa : isas) {
      k::SetActiveCpuIsa(isa);
      packed.push_back(std::make_unique<k::PackedMatrix>(w.data(), s.out, s.in));
    }
    std::vector<std::function<void()>> ced;
    for (size_t i = 0; i < isas.size(); ++i) {
      ced.push_back([&, i] {
        const k::PackedGemmTarget t = {packed[i].get(), y_ced[i].data(), false};
        if (s.n == 1) {
          k::GemvPackedMultiCpu(x.data(), s.in, &t, 1);
        } else {
          k::GemmPackedMultiCpu(x.data(), s.n, s.in, &t, 1);
        }
      });
    }
    // Contenders: 0 OpenBLAS, 1 oneDNN, 2.. the variants.
    std::vector<std::function<void()>> all = {blas, dnnl};
    for (auto& f : ced) all.push_back(f);
    auto select = [&](size_t c) {
      if (c >= 2) k::SetActiveCpuIsa(isas[c - 2]);
    };
    const double flops = 2.0 * s.n * s.in * s.out;
    // Warm up (JIT, page faults) and size the batches to ~target_s.
    double per_call = 1e9;
    for (size_t c = 0; c < all.size(); ++c) {
      select(c);
      per_call = std::min(per_call, TimeCalls(all[c], 3));
    }
    const int iters = std::max(3, static_cast<int>(target_s / std::max(per_call, 1e-9)));
    std::vector<std::vector<double>> t(all.size());
    std::vector<double> t_gemv;
    for (int r = 0; r < reps; ++r) {
      for (size_t j = 0; j < all.size(); ++j) {
        const size_t c = (j + r) % all.size();
        select(c);
        t[c].push_back(TimeCalls(all[c], iters));
      }
      if (s.n == 1) t_gemv.push_back(TimeCalls(gemv, iters));
    }
    double diff = MaxRelDiff(y_blas, y_dnnl);
    if (s.n == 1) diff = std::max(diff, MaxRelDiff(y_blas, y_gemv));
    for (const auto& y : y_ced) diff = std::max(diff, MaxRelDiff(y_blas, y));
    const bool match = dnnl_ok && diff <= 1e-4;
    all_match &= match;
    const Stats b = ToGflops(t[0], flops), d = ToGflops(t[1], flops);
    std::printf("| %d | %d | %d | %.1f (%.1f..%.1f) | %.1f (%.1f..%.1f) |", s.n, s.in, s.out,
                b.median, b.lo, b.hi, d.median, d.lo, d.hi);
    double best = 0;
    for (size_t i = 0; i < isas.size(); ++i) {
      const Stats c = ToGflops(t[2 + i], flops);
      best = std::max(best, c.median);
      if (peaks[i] > 0) {
        std::printf(" %.1f (%.1f..%.1f) %.0f%% |", c.median, c.lo, c.hi, 100 * c.median / peaks[i]);
      } else {
        std::printf(" %.1f (%.1f..%.1f) |", c.median, c.lo, c.hi);
      }
    }
    char gemv_cell[64] = "-";
    if (s.n == 1) {
      const Stats g = ToGflops(t_gemv, flops);
      std::snprintf(gemv_cell, sizeof(gemv_cell), "%.1f (%.1f..%.1f)", g.median, g.lo, g.hi);
    }
    std::printf(" %.2f | %s | %.1e%s |\n", best / b.median, gemv_cell, diff,
                match ? "" : " MISMATCH");
    std::fflush(stdout);
  }
  k::SetActiveCpuIsa(k::BestCpuIsa());
  return all_match ? 0 : 1;
}
