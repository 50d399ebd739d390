// The CPU GEMM, row-wise kernels and worker pool against plain loops. CTest
// runs this binary with two threads (tests/kernels_cpu/CMakeLists.txt) so the
// parallel splits are exercised.
#include "kernels/cpu/math.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels_cpu/isa_param.h"

namespace ced::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// y[n, out] = x[n, in] * w[out, in]^T in double.
std::vector<double> Reference(const std::vector<float>& x, int n, int in,
                              const std::vector<float>& w, int out) {
  std::vector<double> y(static_cast<size_t>(n) * out);
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += static_cast<double>(x[i * in + k]) * w[o * in + k];
      y[static_cast<size_t>(i) * out + o] = s;
    }
  }
  return y;
}

// Asserts y[t] = x * w[t]^T, plus before[t] where accumulates(t), against
// the double reference for every target; `where` names the case in failures.
void ExpectProducts(const std::vector<float>& x, int n, int in,
                    const std::vector<std::vector<float>>& w, const std::vector<int>& outs,
                    const std::vector<std::vector<float>>& before,
                    const std::vector<std::vector<float>>& y,
                    const std::function<bool(size_t)>& accumulates, const std::string& where) {
  for (size_t t = 0; t < outs.size(); ++t) {
    const std::vector<double> ref = Reference(x, n, in, w[t], outs[t]);
    for (size_t i = 0; i < ref.size(); ++i) {
      const double want = ref[i] + (accumulates(t) ? before[t][i] : 0.0);
      ASSERT_NEAR(y[t][i], want, 1e-4 * (1 + std::abs(want)))
          << where << " target " << t << " elem " << i;
    }
  }
}

std::string Case(int n, int in, PrefetchHint hint) {
  return "n " + std::to_string(n) + " in " + std::to_string(in) + " prefetch " +
         std::string(PrefetchHintName(hint));
}

TEST(MathTest, PoolRunsEveryIndexOnce) {
  for (int n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    ParallelFor(n, [&](int i) { hits[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
  }
  std::atomic<int> calls{0}, seen_threads{0};
  ParallelRun([&](int t, int threads) {
    calls.fetch_add(1);
    seen_threads.store(threads);
    EXPECT_LT(t, threads);
  });
  EXPECT_EQ(calls.load(), seen_threads.load());
  EXPECT_LE(seen_threads.load(), PoolThreads());
}

TEST(MathTest, PoolServesConcurrentAndNestedCallers) {
  // Two threads use the pool at once (one of them runs serially) and a loop
  // nests another: every index still runs exactly once.
  std::vector<std::atomic<int>> a(500), b(500);
  std::thread other([&] {
    for (int r = 0; r < 50; ++r) ParallelFor(10, [&](int i) { a[r * 10 + i].fetch_add(1); });
  });
  for (int r = 0; r < 50; ++r) {
    ParallelFor(10, [&](int i) { ParallelFor(1, [&](int) { b[r * 10 + i].fetch_add(1); }); });
  }
  other.join();
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(a[i].load(), 1);
    ASSERT_EQ(b[i].load(), 1);
  }
}

class MathIsaTest : public IsaTest {};

// The packed GEMM and GEMV run with each prefetch hint (kernels/cpu/isa.h).
constexpr PrefetchHint kHints[] = {PrefetchHint::kNonTemporal, PrefetchHint::kL2};

// Sets the hint for a scope; restores the one the process had.
class HintGuard {
 public:
  explicit HintGuard(PrefetchHint hint) : old_(ActivePrefetchHint()) {
    SetActivePrefetchHint(hint);
  }
  ~HintGuard() { SetActivePrefetchHint(old_); }

 private:
  PrefetchHint old_;
};

TEST_P(MathIsaTest, GemmMultiMatchesReference) {
  // Batch 1 takes the GEMV path, larger batches BLAS; odd sizes hit the tails.
  for (int n : {1, 3, 64}) {
    for (int in : {64, 200, 512}) {
      const std::vector<int> outs = {96, 37, 256};
      const std::vector<float> x = Random(static_cast<size_t>(n) * in, 1 + n + in);
      std::vector<std::vector<float>> w, y;
      std::vector<GemmTarget> targets;
      for (size_t t = 0; t < outs.size(); ++t) {
        w.push_back(Random(static_cast<size_t>(outs[t]) * in, 100 + t));
        y.push_back(Random(static_cast<size_t>(n) * outs[t], 200 + t));  // prior contents
      }
      const std::vector<std::vector<float>> before = y;
      for (size_t t = 0; t < outs.size(); ++t) {
        // The middle target accumulates into y, the others overwrite it.
        targets.push_back({w[t].data(), outs[t], y[t].data(), t == 1});
      }
      GemmMultiCpu(x.data(), n, in, targets.data(), static_cast<int>(targets.size()));
      ASSERT_NO_FATAL_FAILURE(ExpectProducts(
          x, n, in, w, outs, before, y, [](size_t t) { return t == 1; },
          "n " + std::to_string(n) + " in " + std::to_string(in)));
    }
  }
}

TEST_P(MathIsaTest, PackedGemmMatchesReference) {
  // Row counts around every variant's row tile (8, 6, 3), columns around
  // the 16- and 32-column panels, depths below and above the 256-deep pass.
  for (int n : {2, 3, 5, 6, 7, 8, 13, 17, 64}) {
    for (int in : {64, 200, 600}) {
      const std::vector<int> outs = {32, 37, 300, 16, 9};
      const std::vector<float> x = Random(static_cast<size_t>(n) * in, 3 + n + in);
      std::vector<std::vector<float>> w, y;
      std::vector<std::unique_ptr<PackedMatrix>> packed;
      std::vector<PackedGemmTarget> targets;
      for (size_t t = 0; t < outs.size(); ++t) {
        w.push_back(Random(static_cast<size_t>(outs[t]) * in, 300 + t));
        y.push_back(Random(static_cast<size_t>(n) * outs[t], 400 + t));
        packed.push_back(std::make_unique<PackedMatrix>(w[t].data(), outs[t], in));
      }
      const std::vector<std::vector<float>> before = y;
      for (size_t t = 0; t < outs.size(); ++t) {
        targets.push_back({packed[t].get(), y[t].data(), t == 2});
      }
      // Every prefetch hint (isa.h): the same arithmetic, so the same bits.
      std::vector<std::vector<float>> first;
      for (PrefetchHint hint : kHints) {
        HintGuard guard(hint);
        y = before;
        for (size_t t = 0; t < outs.size(); ++t) targets[t].y = y[t].data();
        GemmPackedMultiCpu(x.data(), n, in, targets.data(), static_cast<int>(targets.size()));
        ASSERT_NO_FATAL_FAILURE(ExpectProducts(
            x, n, in, w, outs, before, y, [](size_t t) { return t == 2; }, Case(n, in, hint)));
        if (first.empty()) first = y;
        ASSERT_EQ(y, first) << "n " << n << " in " << in << " prefetch " << PrefetchHintName(hint);
      }
    }
  }
}

// Random values rounded (to nearest even) to bf16, as a bf16 checkpoint's
// weights are after loading; computed here without the kernels' codecs.
std::vector<float> RandomBf16(size_t n, uint32_t seed) {
  std::vector<float> v = Random(n, seed);
  for (float& x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &bits, sizeof bits);
  }
  return v;
}

TEST_P(MathIsaTest, Bf16WeightsArePackedAsBf16AndGiveTheSameBits) {
  // Weights that are all bf16 values are packed at half the bytes; the
  // products widen them back to the same floats, so they equal the f32
  // layout's bit for bit (GEMM at several batch sizes, and the GEMV), and
  // the double-precision reference. One value with low bits keeps f32.
  for (int in : {3, 64, 300, 600}) {
    const std::vector<int> outs = {32, 37, 300, 16, 9};
    std::vector<std::vector<float>> w;
    std::vector<std::unique_ptr<PackedMatrix>> bf16, f32;
    for (size_t t = 0; t < outs.size(); ++t) {
      w.push_back(RandomBf16(static_cast<size_t>(outs[t]) * in, 700 + t + in));
      bf16.push_back(std::make_unique<PackedMatrix>(w[t].data(), outs[t], in));
      f32.push_back(std::make_unique<PackedMatrix>(w[t].data(), outs[t], in,
                                                   PackedMatrix::Storage::kF32));
      ASSERT_TRUE(bf16[t]->bf16()) << "in " << in << " target " << t;
      ASSERT_FALSE(f32[t]->bf16());
      EXPECT_LT(bf16[t]->bytes(), f32[t]->bytes() / 2 + 64);
    }
    for (int n : {1, 2, 8, 13, 64}) {
      const std::vector<float> x = Random(static_cast<size_t>(n) * in, 5 + n + in);
      std::vector<std::vector<float>> y_bf16, y_f32;
      for (size_t t = 0; t < outs.size(); ++t) {
        y_bf16.push_back(Random(static_cast<size_t>(n) * outs[t], 800 + t));
      }
      y_f32 = y_bf16;
      const std::vector<std::vector<float>> before = y_bf16;
      for (PrefetchHint hint : kHints) {
        HintGuard guard(hint);
        for (auto* ys : {&y_bf16, &y_f32}) {
          *ys = before;
          const auto& packed = ys == &y_bf16 ? bf16 : f32;
          std::vector<PackedGemmTarget> targets;
          for (size_t t = 0; t < outs.size(); ++t) {
            targets.push_back({packed[t].get(), (*ys)[t].data(), t == 2});
          }
          if (n == 1) {
            GemvPackedMultiCpu(x.data(), in, targets.data(), static_cast<int>(targets.size()));
          } else {
            GemmPackedMultiCpu(x.data(), n, in, targets.data(), static_cast<int>(targets.size()));
          }
        }
        ASSERT_EQ(y_bf16, y_f32) << "n " << n << " in " << in << " prefetch "
                                 << PrefetchHintName(hint);
        ASSERT_NO_FATAL_FAILURE(ExpectProducts(
            x, n, in, w, outs, before, y_bf16, [](size_t t) { return t == 2; },
            Case(n, in, hint)));
      }
    }
  }
  std::vector<float> w = RandomBf16(64 * 40, 9);
  EXPECT_TRUE(PackedMatrix(w.data(), 40, 64).bf16());
  w[1234] = std::nextafter(w[1234], 2.0f);  // one value that is not a bf16
  EXPECT_FALSE(PackedMatrix(w.data(), 40, 64).bf16());
}

TEST_P(MathIsaTest, PackedGemvMatchesReference) {
  // Batch 1 on the packed panels: depths around the 4-row step (tails),
  // columns around the 32-column panel, enough bytes to split across the
  // pool and too few.
  for (int in : {1, 3, 64, 203, 1536}) {
    const std::vector<int> outs = {32, 37, 300, 5, 16, 17};
    const std::vector<float> x = Random(in, 11 + in);
    std::vector<std::vector<float>> w, y;
    std::vector<std::unique_ptr<PackedMatrix>> packed;
    std::vector<PackedGemmTarget> targets;
    for (size_t t = 0; t < outs.size(); ++t) {
      w.push_back(Random(static_cast<size_t>(outs[t]) * in, 500 + t));
      y.push_back(Random(outs[t], 600 + t));
      packed.push_back(std::make_unique<PackedMatrix>(w[t].data(), outs[t], in));
    }
    const std::vector<std::vector<float>> before = y;
    for (size_t t = 0; t < outs.size(); ++t) {
      targets.push_back({packed[t].get(), y[t].data(), t % 2 == 1});
    }
    std::vector<std::vector<float>> first;
    for (PrefetchHint hint : kHints) {
      HintGuard guard(hint);
      y = before;
      for (size_t t = 0; t < outs.size(); ++t) targets[t].y = y[t].data();
      GemvPackedMultiCpu(x.data(), in, targets.data(), static_cast<int>(targets.size()));
      ASSERT_NO_FATAL_FAILURE(ExpectProducts(
          x, 1, in, w, outs, before, y, [](size_t t) { return t % 2 == 1; }, Case(1, in, hint)));
      if (first.empty()) first = y;
      ASSERT_EQ(y, first) << "in " << in << " prefetch " << PrefetchHintName(hint);
    }
  }
}

TEST_P(MathIsaTest, PackedMatrixUsesTheVariantsPanelWidth) {
  const std::vector<float> w = Random(40 * 24, 12);
  const PackedMatrix p(w.data(), 40, 24);
  EXPECT_EQ(p.panel_width(), PackedPanelWidth());
  EXPECT_EQ(p.panel_width(), GetParam() == CpuIsa::kAvx512 ? 32 : 16);
  EXPECT_TRUE(p.MatchesActiveVariant());
  EXPECT_EQ(p.panels(), (40 + p.panel_width() - 1) / p.panel_width());
  // Panel layout: panel q, row k, column j holds w[q * width + j][k], zero past `out`.
  for (int q = 0; q < p.panels(); ++q) {
    for (int k = 0; k < 24; ++k) {
      for (int j = 0; j < p.panel_width(); ++j) {
        const int o = q * p.panel_width() + j;
        ASSERT_EQ(p.panel(q)[k * p.panel_width() + j], o < 40 ? w[o * 24 + k] : 0.0f);
      }
    }
  }
}

TEST_P(MathIsaTest, RopeTableMatchesDirectRope) {
  const int n = 40, heads = 3, head_dim = 64;
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = (i * 37) % 3000;
  std::vector<float> a = Random(static_cast<size_t>(n) * heads * head_dim, 5), b = a;
  RopeCpu(a.data(), n, heads, head_dim, pos.data(), 10000.0);
  RopeTable table;
  table.Reserve(500000.0, head_dim, 10);  // a different theta first: recomputed
  table.Reserve(10000.0, head_dim, 3000);
  RopeCpu(b.data(), n, heads, head_dim, pos.data(), table);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST_P(MathIsaTest, RmsNormAndSiluMul) {
  const int n = 70, d = 96;
  const std::vector<float> x = Random(static_cast<size_t>(n) * d, 7), w = Random(d, 8);
  std::vector<float> out(x.size());
  RmsNormCpu(x.data(), n, d, w.data(), 1e-5f, out.data());
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += static_cast<double>(x[i * d + j]) * x[i * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int j = 0; j < d; ++j) ASSERT_NEAR(out[i * d + j], x[i * d + j] * inv * w[j], 1e-5);
  }
  const size_t count = 300000;  // big enough to split
  std::vector<float> gate = Random(count, 9), up = Random(count, 10), g0 = gate;
  SiluMulCpu(gate.data(), up.data(), count);
  for (size_t i = 0; i < count; i += 997) {
    const double g = g0[i];
    ASSERT_NEAR(gate[i], g / (1 + std::exp(-g)) * up[i], 1e-5) << i;
  }
}

CED_INSTANTIATE_FOR_EVERY_ISA(MathIsaTest);

}  // namespace
}  // namespace ced::kernels
