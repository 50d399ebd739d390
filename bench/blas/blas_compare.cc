// OpenBLAS vs oneDNN single-threaded sgemm on the engine's GEMM shapes.
//
// Both compute y[n, out] = x[n, in] * w[out, in]^T (row-major, NoTrans x
// Trans, exactly like kernels::GemmCpu). Every repetition times OpenBLAS and
// oneDNN back to back (alternating which goes first), so drifts of a shared
// machine hit both alike; the report gives the median GFLOP/s of each and the
// spread (min..max) of the repetitions. For n == 1 it also times cblas_sgemv,
// which GemmCpu uses for single rows.
//
// Usage: blas_compare [--reps=N] [--ms=M]   (N >= 7 repetitions, ~M ms each)
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

namespace {

struct Shape {
  int n, in, out;
};

// The `small` preset's projections: qkv/attention-out, local/global K or V,
// FFN up/gate and down, the LM head; prefill chunks (256), decode batches (1, 16).
constexpr Shape kShapes[] = {{256, 512, 512}, {256, 512, 256}, {256, 512, 1536},
                             {256, 1536, 512}, {1, 512, 1536},  {1, 1536, 512},
                             {1, 512, 260},    {16, 512, 1536}};

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

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

int ParseIntFlag(int argc, char** argv, const char* name, int fallback) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') {
      return std::atoi(argv[i] + len + 1);
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = std::max(7, ParseIntFlag(argc, argv, "--reps", 9));
  const double target_s = std::max(1, ParseIntFlag(argc, argv, "--ms", 20)) * 1e-3;
  // The engine splits output columns over its own OpenMP team and runs BLAS
  // single-threaded inside each thread: measure exactly that.
  openblas_set_num_threads(1);
  omp_set_num_threads(1);  // oneDNN here is built on the OpenMP runtime
  const dnnl_version_t* v = dnnl_version();
  std::printf("# OpenBLAS: %s\n# oneDNN: %d.%d.%d, 1 thread each, %d reps of ~%.0f ms\n",
              openblas_get_config(), v->major, v->minor, v->patch, reps, target_s * 1e3);
  std::printf("| n | in | out | OpenBLAS sgemm GFLOP/s (min..max) | oneDNN sgemm GFLOP/s (min..max) "
              "| oneDNN/OpenBLAS | OpenBLAS sgemv GFLOP/s | max rel diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  bool all_match = true;
  for (const Shape& s : kShapes) {
    std::vector<float> x(static_cast<size_t>(s.n) * s.in), w(static_cast<size_t>(s.out) * s.in);
    for (float& e : x) e = normal(rng);
    for (float& e : w) e = normal(rng);
    std::vector<float> y_blas(static_cast<size_t>(s.n) * s.out), y_dnnl(y_blas.size()),
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
    const double flops = 2.0 * s.n * s.in * s.out;
    // Warm up (JIT, page faults) and size the batches to ~target_s.
    const double per_call = std::min(TimeCalls(blas, 3), TimeCalls(dnnl, 3));
    const int iters = std::max(3, static_cast<int>(target_s / std::max(per_call, 1e-9)));
    std::vector<double> t_blas, t_dnnl, t_gemv;
    for (int r = 0; r < reps; ++r) {
      if (r % 2 == 0) {
        t_blas.push_back(TimeCalls(blas, iters));
        t_dnnl.push_back(TimeCalls(dnnl, iters));
      } else {
        t_dnnl.push_back(TimeCalls(dnnl, iters));
        t_blas.push_back(TimeCalls(blas, iters));
      }
      if (s.n == 1) t_gemv.push_back(TimeCalls(gemv, iters));
    }
    double diff = MaxRelDiff(y_blas, y_dnnl);
    if (s.n == 1) diff = std::max(diff, MaxRelDiff(y_blas, y_gemv));
    const bool match = dnnl_ok && diff <= 1e-4;
    all_match &= match;
    const Stats b = ToGflops(t_blas, flops), d = ToGflops(t_dnnl, flops);
    char gemv_cell[64] = "-";
    if (s.n == 1) {
      const Stats g = ToGflops(t_gemv, flops);
      std::snprintf(gemv_cell, sizeof(gemv_cell), "%.1f (%.1f..%.1f)", g.median, g.lo, g.hi);
    }
    std::printf("| %d | %d | %d | %.1f (%.1f..%.1f) | %.1f (%.1f..%.1f) | %.2f | %s | %.1e%s |\n",
                s.n, s.in, s.out, b.median, b.lo, b.hi, d.median, d.lo, d.hi, d.median / b.median,
                gemv_cell, diff, match ? "" : " MISMATCH");
    std::fflush(stdout);
  }
  return all_match ? 0 : 1;
}
