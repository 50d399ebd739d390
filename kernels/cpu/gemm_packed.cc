// Packed-panel GEMM and GEMV of one kernel variant (compiled once per variant).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
// Last: everything below is compiled for the variant.
#include "kernels/cpu/gemm_panel.h"

namespace ced::kernels::CED_VARIANT_NS {
namespace {

constexpr int kRows = CED_TILE_ROWS;  // x rows per register tile
constexpr int kVecs = kPanel / kLanes;  // registers per tile row
// k values per pass: a panel slice of 32 KiB (AVX-512) or 16 KiB stays in L1.
constexpr int kDepth = 256;
// A tile's share of the next slice from which its prefetches are spread.
constexpr int kSpreadLines = 32;

// __builtin_prefetch's locality argument for a PrefetchHint (kernels/cpu/isa.h).
constexpr int Locality(PrefetchHint hint) { return hint == PrefetchHint::kL2 ? 2 : 0; }

// Cache lines a Tile prefetches while it runs: `lines` lines from `p`, one
// every `every` k values from the first.
struct Ahead {
  const char* p;
  int lines;
  int every;
};

// y[MR, kPanel] (+)= x[MR, kc] * panel[kc, kPanel]; only `cols` columns are
// stored. Also prefetches its share of the next slice (`ahead`): with few
// row tiles (a decode batch) each tile has a large share of it to fetch. The
// hint is the CPU's (isa.h): non-temporal on
// AMD (on Zen 5 batch-16 products ran 10-20% faster than into L2, prefill
// shapes about 5%; on Zen 3 the two timed the same); into L2 on Intel, whose
// prefetchnta fills L1 only, where the next slice evicts the current one.
template <int MR, PrefetchHint kHint>
void Tile(const float* x, size_t ldx, const float* panel, int kc, float* y, size_t ldy, int cols,
          bool add, Ahead ahead) {
  VF acc[MR][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = VF{};
  }
  int wait = 0;
  for (int k = 0; k < kc; ++k) {
    if (ahead.lines > 0 && --wait <= 0) {
      wait = ahead.every;
      __builtin_prefetch(ahead.p, 0, Locality(kHint));
      ahead.p += 64;
      --ahead.lines;
    }
    VF w[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) w[v] = LoadVF(panel + k * kPanel + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float xv = x[r * ldx + k];  // scalar operand: one vbroadcastss
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] += xv * w[v];
    }
  }
  if (cols == kPanel) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      float* yr = y + r * ldy;
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) {
        StoreVF(yr + v * kLanes, add ? LoadVF(yr + v * kLanes) + acc[r][v] : acc[r][v]);
      }
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {
    float tmp[kPanel];
    for (int v = 0; v < kVecs; ++v) StoreVF(tmp + v * kLanes, acc[r][v]);
    float* yr = y + r * ldy;
    for (int j = 0; j < cols; ++j) yr[j] = add ? yr[j] + tmp[j] : tmp[j];
  }
}

template <int MR, PrefetchHint kHint>
void TileRowsAtMost(int mr, const float* x, size_t ldx, const float* panel, int kc, float* y,
                    size_t ldy, int cols, bool add, Ahead ahead) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      return TileRowsAtMost<MR - 1, kHint>(mr, x, ldx, panel, kc, y, ldy, cols, add, ahead);
    }
  }
  Tile<MR, kHint>(x, ldx, panel, kc, y, ldy, cols, add, ahead);
}

void CheckLayout(const PackedGemmTarget* targets, int count) {
  for (int i = 0; i < count; ++i) {
    if (targets[i].w->panel_width() != kPanel) {
      std::fprintf(stderr,
                   "ced kernels: a PackedMatrix of panel width %d reached the %s kernels (%d); "
                   "pack weights again after switching the kernel variant\n",
                   targets[i].w->panel_width(), CED_VARIANT_NAME, kPanel);
      std::abort();
    }
  }
}

// A vector of kLanes bf16 values (the upper halves of floats), widened.
inline VF LoadBf16(const uint16_t* p) {
  typedef uint16_t VH __attribute__((vector_size(2 * kLanes)));
  typedef uint32_t VU __attribute__((vector_size(4 * kLanes)));
  VH h;
  std::memcpy(&h, p, sizeof h);
  const VU u = __builtin_convertvector(h, VU) << 16;
  VF f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline VF LoadW(const float* p) { return LoadVF(p); }
inline VF LoadW(const uint16_t* p) { return LoadBf16(p); }

// A panel slice of kDepth x kPanel floats, widened from bf16, per thread (on
// the heap: a static thread-local array this large would enlarge every
// thread's static TLS, and threads made with small stacks would fail to start).
float* WideSlice() {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> slice(
      static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kDepth * kPanel)));
  if (slice == nullptr) throw std::bad_alloc();
  return slice.get();
}

// y (+)= x * B over panels of kPanel columns of T (float, or bf16 as
// uint16_t: each slice widened once into an L1 buffer all row tiles read).
template <PrefetchHint kHint, typename T>
void PanelGemmHinted(const float* x, size_t ldx, int n, int in, const T* b, size_t panel_stride,
                     int cols, float* y, size_t ldy, bool accumulate) {
  for (int c0 = 0, p = 0; c0 < cols; c0 += kPanel, ++p) {
    const int pc = std::min(kPanel, cols - c0);
    const T* panel = b + p * panel_stride;
    if (in == 0 && !accumulate) {
      for (int r = 0; r < n; ++r) std::fill(y + r * ldy + c0, y + r * ldy + c0 + pc, 0.0f);
    }
    // While the row tiles run over one slice of the panel (from L1), the
    // memory right after it (the next slice, or the next panel's first) is
    // prefetched into L2, spread over the tiles: with few rows the first
    // tile of a slice would otherwise wait on memory.
    const int tiles = (n + kRows - 1) / kRows;
    for (int k0 = 0; k0 < in; k0 += kDepth) {
      const int kc = std::min(kDepth, in - k0);
      const bool add = k0 > 0 || accumulate;
      const T* src = panel + static_cast<size_t>(k0) * kPanel;
      const float* slice;
      if constexpr (std::is_same_v<T, float>) {
        slice = src;
      } else {
        float* wide = WideSlice();
        for (int i = 0; i < kc * kPanel; i += kLanes) StoreVF(wide + i, LoadBf16(src + i));
        slice = wide;
      }
      const char* next = reinterpret_cast<const char*>(src + static_cast<size_t>(kc) * kPanel);
      const int lines = kDepth * kPanel * static_cast<int>(sizeof(T)) / 64;
      const int per_tile = (lines + tiles - 1) / tiles;
      // A large share is spread over the tile's k values: issued as a burst
      // it overflows the core's queue of outstanding misses (AVX2 batch-16
      // products streaming their weights from memory ran 14-20% faster
      // spread). Small shares (prefill) stay a burst at the tile's start.
      const int every = per_tile >= kSpreadLines ? std::max(1, kc / per_tile) : 1;
      for (int r0 = 0, t = 0; r0 < n; r0 += kRows, ++t) {
        const int pf0 = std::min(lines, t * per_tile), pf1 = std::min(lines, pf0 + per_tile);
        TileRowsAtMost<kRows, kHint>(std::min(kRows, n - r0), x + r0 * ldx + k0, ldx, slice, kc,
                              y + r0 * ldy + c0, ldy, pc, add,
                              Ahead{next + static_cast<size_t>(pf0) * 64, pf1 - pf0, every});
      }
    }
  }
}

// Four k rows per iteration into separate accumulators (FMA latency), and
// prefetch 3 KiB ahead of the stream with the CPU's hint (on Intel, into L2:
// the batch-1 decode step of `small` ran ~2.3x faster than with
// prefetchnta). Panels of T: float, or bf16 as uint16_t (widened as loaded).
template <PrefetchHint kHint, typename T>
void PanelGemvHinted(const float* x, int in, const T* panel, int cols, float* y,
                     bool accumulate) {
  constexpr int kAheadBytes = 24 * 32 * 4;
  constexpr int kGroupLines = 4 * kPanel * static_cast<int>(sizeof(T)) / 64;  // per 4 rows
  static_assert(kGroupLines >= 1, "4 panel rows fill at least a cache line");
  VF a[4][kVecs] = {};
  int k = 0;
  for (; k + 4 <= in; k += 4) {
    const T* p = panel + static_cast<size_t>(k) * kPanel;
    const char* ahead = reinterpret_cast<const char*>(p) + kAheadBytes;
#pragma GCC unroll 8
    for (int l = 0; l < kGroupLines; ++l) __builtin_prefetch(ahead + l * 64, 0, Locality(kHint));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const float xv = x[k + j];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) a[j][v] += xv * LoadW(p + j * kPanel + v * kLanes);
    }
  }
  for (; k < in; ++k) {
    const T* p = panel + static_cast<size_t>(k) * kPanel;
    const float xv = x[k];
    for (int v = 0; v < kVecs; ++v) a[0][v] += xv * LoadW(p + v * kLanes);
  }
  float r[kPanel];
  for (int v = 0; v < kVecs; ++v) StoreVF(r + v * kLanes, (a[0][v] + a[1][v]) + (a[2][v] + a[3][v]));
  for (int j = 0; j < cols; ++j) y[j] = accumulate ? y[j] + r[j] : r[j];
}

// Calls fn with std::integral_constant<PrefetchHint, the CPU's hint>: the
// kernels are instantiated per hint, and the hint is read once per product.
template <typename Fn>
void WithPrefetchHint(const Fn& fn) {
  if (ActivePrefetchHint() == PrefetchHint::kL2) {
    fn(std::integral_constant<PrefetchHint, PrefetchHint::kL2>{});
  } else {
    fn(std::integral_constant<PrefetchHint, PrefetchHint::kNonTemporal>{});
  }
}

}  // namespace

void PanelGemm(const float* x, size_t ldx, int n, int in, const float* b, size_t panel_stride,
               int cols, float* y, size_t ldy, bool accumulate) {
  WithPrefetchHint([&](auto hint) {
    PanelGemmHinted<decltype(hint)::value>(x, ldx, n, in, b, panel_stride, cols, y, ldy,
                                           accumulate);
  });
}

void PanelGemv(const float* x, int in, const float* panel, int cols, float* y, bool accumulate) {
  WithPrefetchHint([&](auto hint) {
    PanelGemvHinted<decltype(hint)::value>(x, in, panel, cols, y, accumulate);
  });
}

namespace {

// One panel (kPanel output columns) of one target over all n rows, f32 or
// bf16 storage.
template <PrefetchHint kHint>
void Panel(const float* x, int n, int in, const PackedGemmTarget& t, int p) {
  const PackedMatrix& w = *t.w;
  const int c0 = p * kPanel, cols = std::min(kPanel, w.out() - c0);
  if (w.bf16()) {
    PanelGemmHinted<kHint>(x, in, n, in, w.panel_bf16(p), 0, cols, t.y + c0, w.out(),
                           t.accumulate);
  } else {
    PanelGemmHinted<kHint>(x, in, n, in, w.panel(p), 0, cols, t.y + c0, w.out(), t.accumulate);
  }
}

// One panel of one target at batch 1.
template <PrefetchHint kHint>
void PanelVector(const float* x, int in, const PackedGemmTarget& t, int p) {
  const PackedMatrix& w = *t.w;
  const int c0 = p * kPanel, cols = std::min(kPanel, w.out() - c0);
  if (w.bf16()) {
    PanelGemvHinted<kHint>(x, in, w.panel_bf16(p), cols, t.y + c0, t.accumulate);
  } else {
    PanelGemvHinted<kHint>(x, in, w.panel(p), cols, t.y + c0, t.accumulate);
  }
}

// Runs one(k) for every k in [0, n) on the pool in static shares of
// consecutive tasks: each thread reads one contiguous stream (a target's
// panels lie back to back). Handing out panels one at a time interleaves the
// threads over the same memory, which the hardware prefetchers follow worse
// (about 20% slower over a decode step's weights). A thread done with its
// share takes the tasks left at the end of the others' (a worker that started
// late, or a slower core). `parallel` false: all on the calling thread.
template <typename Fn>
void RunInShares(int n, const Fn& one, bool parallel) {
  if (!parallel) {
    for (int k = 0; k < n; ++k) one(k);
    return;
  }
  struct Share {
    std::atomic<uint64_t> range;  // first << 32 | end of the tasks not taken
    char pad[64 - sizeof(std::atomic<uint64_t>)];
  };
  const int team = std::min(PoolThreads(), std::max(1, omp_get_max_threads()));
  std::vector<Share> shares(team);
  for (int t = 0; t < team; ++t) {
    shares[t].range.store(static_cast<uint64_t>(n * t / team) << 32 |
                          static_cast<uint64_t>(n * (t + 1) / team));
  }
  // The first (front) or the last (!front) task not taken of a share; -1 if none.
  auto take = [](Share& sh, bool front) -> int {
    uint64_t w = sh.range.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t lo = w >> 32, hi = w & 0xffffffffu;
      if (lo >= hi) return -1;
      const uint64_t next = front ? (lo + 1) << 32 | hi : lo << 32 | (hi - 1);
      if (sh.range.compare_exchange_weak(w, next, std::memory_order_relaxed)) {
        return static_cast<int>(front ? lo : hi - 1);
      }
    }
  };
  ParallelRun(
      [&](int t, int threads) {
        if (threads != team) {  // the pool was busy: this thread does it all
          for (int k = 0; k < n; ++k) one(k);
          return;
        }
        for (int k; (k = take(shares[t], true)) >= 0;) one(k);
        for (int u = 1; u < team; ++u) {
          for (int k; (k = take(shares[(t + u) % team], false)) >= 0;) one(k);
        }
      },
      team);
}

}  // namespace

void GemvPacked(const float* x, int in, const PackedGemmTarget* targets, int count) {
  CheckLayout(targets, count);
  std::vector<std::pair<int, int>> tasks;  // (target, panel)
  double bytes = 0;
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < targets[i].w->panels(); ++p) tasks.emplace_back(i, p);
    bytes += static_cast<double>(targets[i].w->bytes());
  }
  WithPrefetchHint([&](auto hint) {
    auto one = [&](int k) {
      PanelVector<decltype(hint)::value>(x, in, targets[tasks[k].first], tasks[k].second);
    };
    RunInShares(static_cast<int>(tasks.size()), one, bytes >= 4e5);
  });
}

void GemmPacked(const float* x, int n, int in, const PackedGemmTarget* targets, int count) {
  if (n <= 0) return;
  CheckLayout(targets, count);
  std::vector<std::pair<int, int>> tasks;  // (target, panel)
  double flops = 0;
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < targets[i].w->panels(); ++p) tasks.emplace_back(i, p);
    flops += 2.0 * n * in * targets[i].w->out();
  }
  WithPrefetchHint([&](auto hint) {
    auto one = [&](int k) {
      Panel<decltype(hint)::value>(x, n, in, targets[tasks[k].first], tasks[k].second);
    };
    RunInShares(static_cast<int>(tasks.size()), one, flops >= 2e5);
  });
}

}  // namespace ced::kernels::CED_VARIANT_NS
