#include "kernels/cpu/gemm_packed.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/thread_pool.h"

namespace ced::kernels {
namespace {

constexpr int kRows = 8;     // x rows per register tile
constexpr int kDepth = 256;  // k values per pass: a panel slice of 32 KiB stays in L1

// y[MR, 32] (+)= x[MR, kc] * panel[kc, 32]; only `cols` columns are stored.
// Also prefetches pf_lines cache lines from pf (into L2), one every fourth k.
template <int MR>
void Tile(const float* x, size_t ldx, const float* panel, int kc, float* y, size_t ldy, int cols,
          bool add, const char* pf, int pf_lines) {
  V16 acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = V16{};
  for (int k = 0; k < kc; ++k) {
    if ((k & 3) == 0 && pf_lines > 0) {
      __builtin_prefetch(pf, 0, 2);
      pf += 64;
      --pf_lines;
    }
    const V16 w0 = LoadV16(panel + k * kPanel), w1 = LoadV16(panel + k * kPanel + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float xv = x[r * ldx + k];
      acc[r][0] += xv * w0;
      acc[r][1] += xv * w1;
    }
  }
  if (cols == kPanel) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      float* yr = y + r * ldy;
      if (add) {
        StoreV16(yr, LoadV16(yr) + acc[r][0]);
        StoreV16(yr + 16, LoadV16(yr + 16) + acc[r][1]);
      } else {
        StoreV16(yr, acc[r][0]);
        StoreV16(yr + 16, acc[r][1]);
      }
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {
    float tmp[kPanel];
    StoreV16(tmp, acc[r][0]);
    StoreV16(tmp + 16, acc[r][1]);
    float* yr = y + r * ldy;
    for (int j = 0; j < cols; ++j) yr[j] = add ? yr[j] + tmp[j] : tmp[j];
  }
}

void TileRows(int mr, const float* x, size_t ldx, const float* panel, int kc, float* y, size_t ldy,
              int cols, bool add, const char* pf, int pf_lines) {
  switch (mr) {
    case 8:
      return Tile<8>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 7:
      return Tile<7>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 6:
      return Tile<6>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 5:
      return Tile<5>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 4:
      return Tile<4>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 3:
      return Tile<3>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    case 2:
      return Tile<2>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
    default:
      return Tile<1>(x, ldx, panel, kc, y, ldy, cols, add, pf, pf_lines);
  }
}

// One panel (32 output columns) of one target over all n rows.
void Panel(const float* x, int n, int in, const PackedGemmTarget& t, int p) {
  const PackedMatrix& w = *t.w;
  const int c0 = p * kPanel;
  PanelGemm(x, in, n, in, w.panel(p), 0, std::min(kPanel, w.out() - c0), t.y + c0, w.out(),
            t.accumulate);
}

}  // namespace

void PanelGemm(const float* x, size_t ldx, int n, int in, const float* b, size_t panel_stride,
               int cols, float* y, size_t ldy, bool accumulate) {
  for (int c0 = 0, p = 0; c0 < cols; c0 += kPanel, ++p) {
    const int pc = std::min(kPanel, cols - c0);
    const float* panel = b + p * panel_stride;
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
      const float* slice = panel + static_cast<size_t>(k0) * kPanel;
      const char* next = reinterpret_cast<const char*>(slice + static_cast<size_t>(kc) * kPanel);
      const int lines = kDepth * kPanel * static_cast<int>(sizeof(float)) / 64;
      const int per_tile = (lines + tiles - 1) / tiles;
      for (int r0 = 0, t = 0; r0 < n; r0 += kRows, ++t) {
        const int pf0 = std::min(lines, t * per_tile), pf1 = std::min(lines, pf0 + per_tile);
        TileRows(std::min(kRows, n - r0), x + r0 * ldx + k0, ldx, slice, kc, y + r0 * ldy + c0, ldy,
                 pc, add, next + static_cast<size_t>(pf0) * 64, pf1 - pf0);
      }
    }
  }
}

void PanelGemv(const float* x, int in, const float* panel, int cols, float* y, bool accumulate) {
  // Four k rows per iteration into separate accumulators (FMA latency), and
  // prefetch kAhead rows (two cache lines each) ahead of the stream.
  constexpr int kAhead = 24;
  V16 a[8] = {};
  int k = 0;
  for (; k + 4 <= in; k += 4) {
    const float* p = panel + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __builtin_prefetch(p + (kAhead + j) * kPanel, 0, 0);
      __builtin_prefetch(p + (kAhead + j) * kPanel + 16, 0, 0);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const float xv = x[k + j];
      a[2 * j] += xv * LoadV16(p + j * kPanel);
      a[2 * j + 1] += xv * LoadV16(p + j * kPanel + 16);
    }
  }
  for (; k < in; ++k) {
    const float* p = panel + static_cast<size_t>(k) * kPanel;
    a[0] += x[k] * LoadV16(p);
    a[1] += x[k] * LoadV16(p + 16);
  }
  float r[kPanel];
  StoreV16(r, (a[0] + a[2]) + (a[4] + a[6]));
  StoreV16(r + 16, (a[1] + a[3]) + (a[5] + a[7]));
  for (int j = 0; j < cols; ++j) y[j] = accumulate ? y[j] + r[j] : r[j];
}

void GemvPackedMultiCpu(const float* x, int in, const PackedGemmTarget* targets, int count) {
  std::vector<std::pair<int, int>> tasks;  // (target, panel)
  double bytes = 0;
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < targets[i].w->panels(); ++p) tasks.emplace_back(i, p);
    bytes += 4.0 * targets[i].w->panels() * kPanel * in;
  }
  ParallelFor(
      static_cast<int>(tasks.size()),
      [&](int k) {
        const PackedGemmTarget& t = targets[tasks[k].first];
        const int p = tasks[k].second, c0 = p * kPanel;
        PanelGemv(x, in, t.w->panel(p), std::min(kPanel, t.w->out() - c0), t.y + c0, t.accumulate);
      },
      bytes >= 4e5);
}

void PackedMatrix::Free::operator()(float* p) const { std::free(p); }

PackedMatrix::PackedMatrix(const float* w, int out, int in)
    : out_(out), in_(in), panels_((out + kPanel - 1) / kPanel) {
  const size_t count = static_cast<size_t>(panels_) * in * kPanel;
  const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
  float* data = static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
  if (data == nullptr) throw std::bad_alloc();
  data_.reset(data);
  ParallelFor(panels_, [&](int p) {
    // k outer: the panel is written front to back while the 32 source rows'
    // current lines stay in L1.
    float* dst = data + static_cast<size_t>(p) * in * kPanel;
    const int rows = std::min(kPanel, out - p * kPanel);
    const float* src = w + static_cast<size_t>(p) * kPanel * in;
    for (int k = 0; k < in; ++k) {
      float* d = dst + static_cast<size_t>(k) * kPanel;
      for (int j = 0; j < rows; ++j) d[j] = src[static_cast<size_t>(j) * in + k];
      for (int j = rows; j < kPanel; ++j) d[j] = 0.0f;
    }
  });
}

void GemmPackedMultiCpu(const float* x, int n, int in, const PackedGemmTarget* targets, int count) {
  if (n <= 0) return;
  std::vector<std::pair<int, int>> tasks;  // (target, panel)
  double flops = 0;
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < targets[i].w->panels(); ++p) tasks.emplace_back(i, p);
    flops += 2.0 * n * in * targets[i].w->out();
  }
  ParallelFor(
      static_cast<int>(tasks.size()),
      [&](int k) { Panel(x, n, in, targets[tasks[k].first], tasks[k].second); }, flops >= 2e5);
}

}  // namespace ced::kernels
