// Attention of one kernel variant (compiled once per variant).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/thread_pool.h"
// Last: everything below is compiled for the variant.
#include "kernels/cpu/gemm_panel.h"
#include "kernels/cpu/variant_kernels.h"

namespace ced::kernels::CED_VARIANT_NS {
namespace {

constexpr int kGemmMinRows = 16;

// Dot product with eight independent partial sums (GCC vector extension:
// SIMD on any x86 target, no reliance on the vectorizer).
inline float Dot(const float* a, const float* b, int n) {
  typedef float V8 __attribute__((vector_size(32)));
  V8 acc0 = {}, acc1 = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    V8 a0, a1, b0, b1;
    std::memcpy(&a0, a + i, sizeof(V8));
    std::memcpy(&b0, b + i, sizeof(V8));
    std::memcpy(&a1, a + i + 8, sizeof(V8));
    std::memcpy(&b1, b + i + 8, sizeof(V8));
    acc0 += a0 * b0;
    acc1 += a1 * b1;
  }
  acc0 += acc1;
  float sum =
      ((acc0[0] + acc0[4]) + (acc0[1] + acc0[5])) + ((acc0[2] + acc0[6]) + (acc0[3] + acc0[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline float MaxOf(const float* x, int n, float m) {
  int i = 0;
  if (n >= kLanes) {
    VF acc = LoadVF(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      const VF v = LoadVF(x + i);
      acc = acc > v ? acc : v;
    }
    for (int j = 0; j < kLanes; ++j) m = std::max(m, acc[j]);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = exp(x[i] - m); returns the sum, accumulated in double: the
// normalizer then hardly depends on the order of the terms, so the decode
// and prefill paths (different splits of the same keys) agree closely.
inline double ExpInPlace(float* x, int n, float m) {
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreVF(x + i, ExpVF(LoadVF(x + i) - m));
  if (i < n) StorePartialVF(x + i, ExpVF(LoadPartialVF(x + i, n - i) - m), n - i);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) sum += x[j];
  return sum;
}

inline void Scale(float* x, int n, float s) {
#pragma omp simd
  for (int i = 0; i < n; ++i) x[i] *= s;
}

// out[d] += w * v[d].
inline void Axpy(float* out, const float* v, int n, float w) {
#pragma omp simd
  for (int d = 0; d < n; ++d) out[d] += w * v[d];
}

// Lane selections of the stages of a kLanes x kLanes in-register transpose:
// stage i pairs rows r and r + h (h = kLanes / 2^(i+1)); kLo[i] takes the
// lanes of a whose bit log2(h) is clear and the matching lanes of b, kHi[i]
// the others.
#if CED_VEC_FLOATS == 16
constexpr VI kLo[] = {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                      {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                      {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                      {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
constexpr VI kHi[] = {{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                      {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                      {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                      {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
#elif CED_VEC_FLOATS == 8
constexpr VI kLo[] = {{0, 1, 2, 3, 8, 9, 10, 11}, {0, 1, 8, 9, 4, 5, 12, 13},
                      {0, 8, 2, 10, 4, 12, 6, 14}};
constexpr VI kHi[] = {{4, 5, 6, 7, 12, 13, 14, 15}, {2, 3, 10, 11, 6, 7, 14, 15},
                      {1, 9, 3, 11, 5, 13, 7, 15}};
#elif CED_VEC_FLOATS == 4
constexpr VI kLo[] = {{0, 1, 4, 5}, {0, 4, 2, 6}};
constexpr VI kHi[] = {{2, 3, 6, 7}, {1, 5, 3, 7}};
#endif

// m[r][c] <- m[c][r] for a kLanes x kLanes block.
inline void TransposeVF(VF* m) {
  int stage = 0;
#pragma GCC unroll 4
  for (int h = kLanes / 2; h >= 1; h /= 2, ++stage) {
#pragma GCC unroll 16
    for (int r = 0; r < kLanes; ++r) {
      if ((r / h) % 2 != 0) continue;
      const VF a = m[r], b = m[r + h];
      m[r] = __builtin_shuffle(a, b, kLo[stage]);
      m[r + h] = __builtin_shuffle(a, b, kHi[stage]);
    }
  }
}

// Horizontal sums of kLanes native vectors at once: lane r of the result is
// the sum of m[r]'s lanes (m is clobbered). The stages of the transpose,
// adding the halves instead of keeping both.
inline VF SumLanes(VF* m) {
  int stage = 0;
#pragma GCC unroll 4
  for (int half = kLanes / 2; half >= 1; half /= 2, ++stage) {
#pragma GCC unroll 8
    for (int r = 0; r < half; ++r) {
      m[r] = __builtin_shuffle(m[r], m[r + half], kLo[stage]) +
             __builtin_shuffle(m[r], m[r + half], kHi[stage]);
    }
  }
  return m[0];
}

// Cache lines to prefetch (into L2) while a loop over kLanes rows runs:
// row r's share, so that the prefetches are spread between the loop's loads
// and FMAs instead of issued in one burst (a burst stalls on the few
// outstanding-miss slots while nothing else runs).
struct PrefetchSpan {
  const uint8_t* at = nullptr;
  int lines = 0;
  __attribute__((always_inline)) void Row(int r) const {
    const int per = (lines + kLanes - 1) / kLanes;
    const int i1 = std::min(lines, (r + 1) * per);
    for (int i = r * per; i < i1; ++i) __builtin_prefetch(at + 64 * i, 0, 2);
  }
  // Whatever the loop did not reach (it ran fewer than kLanes rows).
  void Rest(int rows) const {
    const int per = (lines + kLanes - 1) / kLanes;
    for (int i = rows * per; i < lines; ++i) __builtin_prefetch(at + 64 * i, 0, 2);
  }
};

// Lane r of out[j]: q_j . k[r * stride, + D) for rows r < rows <= kLanes
// (other lanes 0), for NH query heads q_j = q + j * D that share the key
// rows (one kv head): each key vector is loaded once for all NH heads. One
// register per key row and head, one horizontal reduction per head.
// kD > 0: D is kD (loops unrolled at compile time).
template <int kD, int NH>
__attribute__((always_inline)) inline void ScoresVF(const float* q, const float* k,
                                                    size_t stride, int rows, int D, VF* out,
                                                    PrefetchSpan pf = {}) {
  if constexpr (kD > 0) D = kD;
  if (D % kLanes != 0) {
    pf.Rest(0);
    for (int j = 0; j < NH; ++j) {
      out[j] = VF{};
      for (int r = 0; r < rows; ++r) out[j][r] = Dot(q + j * D, k + r * stride, D);
    }
    return;
  }
  VF m[NH][kLanes];
#pragma GCC unroll 16
  for (int r = 0; r < kLanes; ++r) {
    VF acc[NH] = {};
    pf.Row(r);
    if (r < rows) {
      const float* kr = k + r * stride;
#pragma GCC unroll 8
      for (int c = 0; c < D; c += kLanes) {
        const VF kv = LoadVF(kr + c);
#pragma GCC unroll 2
        for (int j = 0; j < NH; ++j) acc[j] += LoadVF(q + j * D + c) * kv;
      }
    }
#pragma GCC unroll 2
    for (int j = 0; j < NH; ++j) m[j][r] = acc[j];
  }
#pragma GCC unroll 2
  for (int j = 0; j < NH; ++j) out[j] = SumLanes(m[j]);
}

// The largest lane: log2(kLanes) rotations and maxima (not a chain of
// kLanes scalar maxima).
inline float MaxLanes(VF v) {
  VI rot;
#pragma GCC unroll 4
  for (int h = kLanes / 2; h >= 1; h /= 2) {
    for (int i = 0; i < kLanes; ++i) rot[i] = (i + h) % kLanes;
    const VF r = __builtin_shuffle(v, rot);
    v = v > r ? v : r;
  }
  return v[0];
}

// Doubles, one per float lane: the softmax normalizer, summed lane by lane.
typedef double VD __attribute__((vector_size(8 * CED_VEC_FLOATS)));

// out[0, kValueChunk) += sum over r < rows of w[r] * v[r * stride, + kValueChunk):
// the outputs stay in registers across the rows, in two sets (even and odd
// rows) so that two FMA chains per register run at once.
// V < 4: out[0, V * kLanes) only (a head smaller than a chunk).
constexpr int kValueChunk = 4 * kLanes;
template <int V = 4>
inline void AccumulateRows(float* out, const float* v, size_t stride, const float* w, int rows,
                           PrefetchSpan pf = {}) {
  VF a[V], b[V] = {};
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) a[j] = LoadVF(out + j * kLanes);
  int r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float w0 = w[r], w1 = w[r + 1];
    const float* v0 = v + r * stride;
    const float* v1 = v0 + stride;
    pf.Row(r);
    pf.Row(r + 1);
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      a[j] += w0 * LoadVF(v0 + j * kLanes);
      b[j] += w1 * LoadVF(v1 + j * kLanes);
    }
  }
  if (r < rows) {
    const float w0 = w[r];
    const float* v0 = v + r * stride;
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) a[j] += w0 * LoadVF(v0 + j * kLanes);
  }
  pf.Rest(r);
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) StoreVF(out + j * kLanes, a[j] + b[j]);
}

// The same for two heads' outputs over the same value rows (one kv head):
// each value vector is loaded once for both; eight independent FMA chains.
template <int V = 4>
inline void AccumulateRows2(float* out0, float* out1, const float* v, size_t stride,
                            const float* w0, const float* w1, int rows, PrefetchSpan pf = {}) {
  VF a[V], b[V];
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) {
    a[j] = LoadVF(out0 + j * kLanes);
    b[j] = LoadVF(out1 + j * kLanes);
  }
  for (int r = 0; r < rows; ++r) {
    const float x0 = w0[r], x1 = w1[r];
    const float* vr = v + r * stride;
    pf.Row(r);
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      const VF vv = LoadVF(vr + j * kLanes);
      a[j] += x0 * vv;
      b[j] += x1 * vv;
    }
  }
  pf.Rest(rows);
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) {
    StoreVF(out0 + j * kLanes, a[j]);
    StoreVF(out1 + j * kLanes, b[j]);
  }
}

// out[0, D) += w * v[0, D); D % kLanes == 0.
inline void AxpyV(float* out, const float* v, int D, float w) {
  for (int c = 0; c < D; c += kLanes) StoreVF(out + c, LoadVF(out + c) + w * LoadVF(v + c));
}

size_t RowBytes(const AttentionParams& p) {
  return KvRowBytes(p.format, static_cast<size_t>(p.num_kv_heads) * p.head_dim);
}

// The local K or V row of position `pos` for kv head g: the segment's own f32
// rows when pos >= q_begin, else the ring (decoded into `scratch` unless f32).
const float* LocalRow(const AttentionParams& p, const AttentionSegment& s, bool value, int g,
                      int pos, float* scratch) {
  const size_t kv_dim = static_cast<size_t>(p.num_kv_heads) * p.head_dim;
  const size_t D = p.head_dim;
  if (pos >= s.q_begin) {
    const float* rows = value ? s.chunk_local_v : s.chunk_local_k;
    return rows + static_cast<size_t>(pos - s.q_begin) * kv_dim + g * D;
  }
  const uint8_t* row =
      (value ? s.local_v_ring : s.local_k_ring) + static_cast<size_t>(pos % p.window) * RowBytes(p);
  if (p.format == KvFormat::kF32) return reinterpret_cast<const float*>(row) + g * D;
  CED_VARIANT_NS::DecodeRowSlice(p.format, row, kv_dim, g * D, D, scratch);
  return scratch;
}

// Per-thread buffers, grown on demand and reused across calls.
struct Scratch {
  std::vector<float> scores, ktile, vtile, inv;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}
void Grow(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

// Rows [0, rows) of kv heads [g0, g0 + ng), the first at `first` and the
// others `row_bytes` apart, as f32 rows of `*stride` floats (head slices of D
// floats side by side): in place when the rows hold f32 values (`f32`), else
// decoded into `scratch` [rows, ng * D].
const float* HeadsTile(const AttentionParams& p, const uint8_t* first, size_t row_bytes, bool f32,
                       int g0, int ng, int rows, float* scratch, size_t* stride) {
  const size_t kv_dim = static_cast<size_t>(p.num_kv_heads) * p.head_dim;
  const size_t D = p.head_dim, width = static_cast<size_t>(ng) * D;
  if (f32) {
    *stride = row_bytes / sizeof(float);
    return reinterpret_cast<const float*>(first) + g0 * D;
  }
  for (int r = 0; r < rows; ++r) {
    CED_VARIANT_NS::DecodeRowSlice(p.format, first + r * row_bytes, kv_dim, g0 * D, width,
                                   scratch + r * width);
  }
  *stride = width;
  return scratch;
}

// The same for the rows of one global block.
const float* GlobalHeadsTile(const AttentionParams& p, const uint8_t* block, int g0, int ng,
                             int rows, float* scratch, size_t* stride) {
  return HeadsTile(p, block, RowBytes(p), p.format == KvFormat::kF32, g0, ng, rows, scratch,
                   stride);
}

// Consecutive keys of one query row whose K and V rows lie at a fixed
// spacing: a global block, a stretch of the local ring between wrap-arounds,
// or the segment's own f32 rows. The rows of a run are contiguous, K and V
// each.
struct KeyRun {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t row_bytes = 0;
  bool f32 = false;  // rows of f32 values (read in place)
  int rows = 0;
};

// The runs of keys of the query at position t, in the order of one softmax:
// global positions [0, gkeys) block by block, then local positions [lb, t].
void KeyRuns(const AttentionParams& p, const AttentionSegment& s, int t, int gkeys, int lb,
             std::vector<KeyRun>* runs) {
  runs->clear();
  const size_t row_bytes = RowBytes(p);
  const bool f32 = p.format == KvFormat::kF32;
  const int bs = p.block_size;
  for (int b = 0; b * bs < gkeys; ++b) {
    runs->push_back(
        {s.global_k_host[b], s.global_v_host[b], row_bytes, f32, std::min(bs, gkeys - b * bs)});
  }
  const size_t f32_row = static_cast<size_t>(p.num_kv_heads) * p.head_dim * sizeof(float);
  for (int pos = lb; pos <= t;) {
    KeyRun r;
    if (pos >= s.q_begin) {  // the segment's own rows, f32
      const size_t off = static_cast<size_t>(pos - s.q_begin) * f32_row;
      r.k = reinterpret_cast<const uint8_t*>(s.chunk_local_k) + off;
      r.v = reinterpret_cast<const uint8_t*>(s.chunk_local_v) + off;
      r.row_bytes = f32_row;
      r.f32 = true;
      r.rows = t + 1 - pos;
    } else {  // ring slots pos % W onwards, up to the wrap or the segment
      const int slot = pos % p.window;
      r.k = s.local_k_ring + static_cast<size_t>(slot) * row_bytes;
      r.v = s.local_v_ring + static_cast<size_t>(slot) * row_bytes;
      r.row_bytes = row_bytes;
      r.f32 = f32;
      r.rows = std::min(s.q_begin - pos, p.window - slot);
    }
    runs->push_back(r);
    pos += r.rows;
  }
}

// Keys [k0, k1) of a list of runs (in order), as runs: the ends cut.
void CutRuns(const std::vector<KeyRun>& runs, int k0, int k1, std::vector<KeyRun>* out) {
  out->clear();
  int first = 0;  // key index of the run's first row
  for (const KeyRun& r : runs) {
    const int a = std::max(k0, first), b = std::min(k1, first + r.rows);
    if (a < b) {
      KeyRun c = r;
      c.k += static_cast<size_t>(a - first) * r.row_bytes;
      c.v += static_cast<size_t>(a - first) * r.row_bytes;
      c.rows = b - a;
      out->push_back(c);
    }
    first += r.rows;
  }
}

// Software prefetch of one run's K rows, then its V rows, a few cache lines
// per call, while the run before it is computed: a sequence's blocks and its
// ring lie far apart, so hardware prefetchers lose the stream at every run.
// Into L2 (prefetcht1), not L1: a run is up to 32 KiB of K and V, as large
// as a 32 KiB L1 (Zen 4), so lines fetched into L1 a run ahead were evicted
// by the run being computed before they were read. Batch 16 x 600 keys, 12
// layers of `small` in shuffled blocks, 2 threads on Zen 4 (L1 32 KiB),
// alternating: AVX-512 10.7-11.3 ms (t1) against 16.2-17.2 (nta), 17.0-18.4
// (t0), 17.1-18.2 (none), 12.5-13.6 (t2); AVX2 14.3-14.7 against 26.2-28.4
// (nta); batch 1 0.76-0.94 against 1.49-1.54 ms. (On Zen 5, L1 48 KiB, nta
// had timed 8.4 ms against 9.3 with t0; t1 was not timed there.)
class RunPrefetcher {
 public:
  explicit RunPrefetcher(const KeyRun* run) {
    if (run == nullptr) return;
    k_ = run->k;
    v_ = run->v;
    bytes_ = static_cast<size_t>(run->rows) * run->row_bytes;
  }
  int lines() const { return static_cast<int>(2 * ((bytes_ + 63) / 64)); }
  // Up to `lines` of the next lines, all in one of the two streams (fewer at
  // the end of K's), to be prefetched by the caller.
  PrefetchSpan Take(int lines) {
    PrefetchSpan span;
    if (off_ >= 2 * bytes_ || lines <= 0) return span;
    const bool in_k = off_ < bytes_;
    span.at = in_k ? k_ + off_ : v_ + (off_ - bytes_);
    const size_t left = (in_k ? bytes_ : 2 * bytes_) - off_;
    span.lines = static_cast<int>(std::min<size_t>(lines, (left + 63) / 64));
    off_ += 64 * static_cast<size_t>(span.lines);
    return span;
  }
  // The next `lines` lines: K's, then V's (a straight loop over each, no
  // per-line choice of the stream).
  void Step(int lines) {
    while (lines > 0 && off_ < 2 * bytes_) {
      const bool in_k = off_ < bytes_;
      const uint8_t* at = in_k ? k_ + off_ : v_ + (off_ - bytes_);
      const size_t left = (in_k ? bytes_ : 2 * bytes_) - off_;
      const int n = static_cast<int>(std::min<size_t>(lines, (left + 63) / 64));
      for (int i = 0; i < n; ++i) __builtin_prefetch(at + 64 * i, 0, 2);
      off_ += 64 * static_cast<size_t>(n);
      lines -= n;
    }
  }

 private:
  const uint8_t* k_ = nullptr;
  const uint8_t* v_ = nullptr;
  size_t bytes_ = 0, off_ = 0;
};

// Online-softmax state of one query row over some of its keys, every head:
// the running maximum m[h], the normalizer l[h] (summed in double, lane by
// lane: it then hardly depends on how the keys were split) and acc[h][D], the
// weighted sum of values not yet divided by l[h].
struct RowState {
  float* m;
  double* l;  // [H][kLanes]
  float* acc;
};

// Online-softmax step of NH query heads h0 .. h0+NH-1 of one kv head over
// rows < rows (<= kLanes) of K and V (row r at k + r * stride, v + r *
// stride): their scores (each K vector loaded once for the NH heads), the
// rescale of acc when a head's maximum grows, then the weighted value rows
// (each V vector loaded once for two heads).
template <int kD, int NH>
__attribute__((always_inline)) inline void AttendChunk(const float* q, const float* k,
                                                       const float* v, size_t stride, int rows,
                                                       int D, int h0, float scale, RowState st,
                                                       RunPrefetcher* pf, int pf_lines) {
  if constexpr (kD > 0) D = kD;
  // The prefetches of this step: half while the scores are computed, half
  // while the values are, each spread over the rows of the loop (what does
  // not fit one stream's span goes out at once).
  const PrefetchSpan pf_scores = pf->Take(pf_lines / 2);
  pf->Step(pf_lines / 2 - pf_scores.lines);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  VI lane;
  for (int i = 0; i < kLanes; ++i) lane[i] = i;
  const auto valid = lane < rows;
  VF sv[NH];
  ScoresVF<kD, NH>(q + static_cast<size_t>(h0) * D, k, stride, rows, D, sv, pf_scores);
  float w[NH][kLanes];
#pragma GCC unroll 2
  for (int j = 0; j < NH; ++j) {
    const int h = h0 + j;
    VF s = sv[j] * scale;
    s = valid ? s : neg_inf;
    float* acc = st.acc + static_cast<size_t>(h) * D;
    const float m = std::max(st.m[h], MaxLanes(s));
    if (m > st.m[h]) {
      if (st.m[h] != neg_inf) {  // earlier keys were weighed against a smaller maximum
        const float f = ExpSimd(st.m[h] - m);
        Scale(acc, D, f);
        double* l = st.l + h * kLanes;
        for (int i = 0; i < kLanes; ++i) l[i] *= f;
      }
      st.m[h] = m;
    }
    VF e = ExpVF(s - m);
    e = valid ? e : VF{};
    VD l;
    std::memcpy(&l, st.l + h * kLanes, sizeof(l));
    l += __builtin_convertvector(e, VD);
    std::memcpy(st.l + h * kLanes, &l, sizeof(l));
    StoreVF(w[j], e);
  }
  const PrefetchSpan pf_values = pf->Take(pf_lines - pf_lines / 2);
  pf->Step(pf_lines - pf_lines / 2 - pf_values.lines);
  float* acc0 = st.acc + static_cast<size_t>(h0) * D;
  if constexpr (kD > 0 && kD % kLanes == 0 && kD < kValueChunk) {  // a head below one chunk
    constexpr int V = kD / kLanes;
    if constexpr (NH == 2) {
      AccumulateRows2<V>(acc0, acc0 + D, v, stride, w[0], w[1], rows, pf_values);
    } else {
      AccumulateRows<V>(acc0, v, stride, w[0], rows, pf_values);
    }
  } else if (D % kValueChunk == 0) {
#pragma GCC unroll 4
    for (int c0 = 0; c0 < D; c0 += kValueChunk) {
      const PrefetchSpan span = c0 == 0 ? pf_values : PrefetchSpan{};
      if constexpr (NH == 2) {
        AccumulateRows2(acc0 + c0, acc0 + D + c0, v + c0, stride, w[0], w[1], rows, span);
      } else {
        AccumulateRows(acc0 + c0, v + c0, stride, w[0], rows, span);
      }
    }
  } else {
    pf_values.Rest(0);
    for (int j = 0; j < NH; ++j) {
      for (int r = 0; r < rows; ++r) Axpy(acc0 + j * D, v + r * stride, D, w[j][r]);
    }
  }
}

// Small segments (decode steps, short tails): one query row `q` [H*D] over
// the keys of `runs`, one pass. Run by run, kLanes keys at a time, kv head by
// kv head: the scores of its query heads, two at a time, against the keys' K
// rows (a register per key), then their V rows weighted into acc, which is
// rescaled when the maximum grows. Full K/V rows are read (every kv head), so
// each run is one contiguous stream; the next run is prefetched meanwhile.
template <int kD>
void AttendRunsD(const AttentionParams& p, const float* q, const std::vector<KeyRun>& runs,
                 RowState st) {
  const int D = kD > 0 ? kD : p.head_dim, H = p.num_heads, G = p.num_kv_heads, group = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  int max_rows = 0;
  for (const KeyRun& r : runs) max_rows = std::max(max_rows, r.rows);
  Scratch& sc = ThreadScratch();
  Grow(&sc.ktile, static_cast<size_t>(max_rows) * G * D);
  Grow(&sc.vtile, static_cast<size_t>(max_rows) * G * D);
  if (!runs.empty()) {
    RunPrefetcher first(&runs[0]);
    first.Step(first.lines());
  }
  const int pairs = (group + 1) / 2;  // head steps per kv head
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const KeyRun& run = runs[ri];
    RunPrefetcher pf(ri + 1 < runs.size() ? &runs[ri + 1] : nullptr);
    const int steps = G * pairs * ((run.rows + kLanes - 1) / kLanes);
    const int per_step = (pf.lines() + steps - 1) / steps;
    size_t stride = 0;
    const float* k =
        HeadsTile(p, run.k, run.row_bytes, run.f32, 0, G, run.rows, sc.ktile.data(), &stride);
    const float* v =
        HeadsTile(p, run.v, run.row_bytes, run.f32, 0, G, run.rows, sc.vtile.data(), &stride);
    for (int r0 = 0; r0 < run.rows; r0 += kLanes) {
      const int rows = std::min(kLanes, run.rows - r0);
      for (int g = 0; g < G; ++g) {
        const size_t off = r0 * stride + static_cast<size_t>(g) * D;
        for (int h0 = g * group; h0 < (g + 1) * group; h0 += 2) {
          if (h0 + 1 < (g + 1) * group) {
            AttendChunk<kD, 2>(q, k + off, v + off, stride, rows, D, h0, scale, st, &pf, per_step);
          } else {
            AttendChunk<kD, 1>(q, k + off, v + off, stride, rows, D, h0, scale, st, &pf, per_step);
          }
        }
      }
    }
  }
}

void AttendRuns(const AttentionParams& p, const float* q, const std::vector<KeyRun>& runs,
                RowState st) {
  switch (p.head_dim) {  // the common head sizes, unrolled
    case 32:
      return AttendRunsD<32>(p, q, runs, st);
    case 64:
      return AttendRunsD<64>(p, q, runs, st);
    case 128:
      return AttendRunsD<128>(p, q, runs, st);
    default:
      return AttendRunsD<0>(p, q, runs, st);
  }
}

// K/V of one kv head for a long segment, gathered once per call into the
// panel layout of kernels/cpu/gemm_packed.h, so the score and value products
// run on the packed-panel kernel (no per-product packing):
//   kg: global keys 0 .. T-1, panels of kPanel keys, each [D][kPanel],
//       pre-multiplied by the softmax scale;
//   vg: global values, D / kPanel panels, each [Tpad][kPanel] (dims side by side);
//   kl / vl: the same for the local keys local_begin .. local_begin+local_count-1.
struct HeadContext {
  std::vector<float> kg, vg, kl, vl;
  int tpad = 0, lpad = 0;
  int local_begin = 0;
  int local_count = 0;
};

int RoundUp(int x) { return (x + kPanel - 1) / kPanel * kPanel; }

// Writes key row `k` (D floats) of a packed-K array and value row `k` of a
// packed-V array whose panels hold `rows` rows.
inline void PutKey(float* kp, int D, int k, const float* src, float scale) {
  float* dst = kp + static_cast<size_t>(k / kPanel) * D * kPanel + k % kPanel;
  for (int d = 0; d < D; ++d) dst[static_cast<size_t>(d) * kPanel] = src[d] * scale;
}
inline void PutValue(float* vp, int rows, int k, const float* src, int D) {
  for (int p = 0; p * kPanel < D; ++p) {
    const int w = std::min(kPanel, D - p * kPanel);
    std::memcpy(vp + (static_cast<size_t>(p) * rows + k) * kPanel, src + p * kPanel,
                w * sizeof(float));
  }
}

// Key rows k0 .. k0+rows-1 (row r at src + r * stride, D floats) into a
// packed-K array, times `scale`: kLanes keys at a time through an in-register
// transpose when they fill kLanes aligned columns of a panel.
void PutKeys(float* kp, int D, int k0, const float* src, size_t stride, int rows, float scale) {
  for (int r0 = 0; r0 < rows; r0 += kLanes) {
    const int k = k0 + r0, n = std::min(kLanes, rows - r0);
    const float* s = src + r0 * stride;
    if (n < kLanes || k % kLanes != 0 || D % kLanes != 0) {
      for (int r = 0; r < n; ++r) PutKey(kp, D, k + r, s + r * stride, scale);
      continue;
    }
    float* dst = kp + static_cast<size_t>(k / kPanel) * D * kPanel + k % kPanel;
    for (int d0 = 0; d0 < D; d0 += kLanes) {
      VF m[kLanes];
#pragma GCC unroll 16
      for (int r = 0; r < kLanes; ++r) m[r] = LoadVF(s + r * stride + d0) * scale;
      TransposeVF(m);
#pragma GCC unroll 16
      for (int j = 0; j < kLanes; ++j) StoreVF(dst + static_cast<size_t>(d0 + j) * kPanel, m[j]);
    }
  }
}

// Value rows k0 .. k0+rows-1 into a packed-V array whose panels hold `tpad` rows.
void PutValues(float* vp, int tpad, int k0, const float* src, size_t stride, int rows, int D) {
  if (D % kPanel != 0) {
    for (int r = 0; r < rows; ++r) PutValue(vp, tpad, k0 + r, src + r * stride, D);
    return;
  }
  for (int p = 0; p * kPanel < D; ++p) {
    float* dst = vp + (static_cast<size_t>(p) * tpad + k0) * kPanel;
    for (int r = 0; r < rows; ++r) {
      const float* s = src + r * stride + p * kPanel;
      for (int c = 0; c < kPanel; c += kLanes) StoreVF(dst + r * kPanel + c, LoadVF(s + c));
    }
  }
}

void GatherHead(const AttentionParams& p, const AttentionSegment& s, int g, float scale,
                HeadContext* ctx) {
  const int D = p.head_dim, bs = p.block_size;
  const int T = s.q_begin + s.n;
  const int dpanels = (D + kPanel - 1) / kPanel;
  ctx->local_count = 0;
  ctx->local_begin = 0;
  if (p.window > 0) {
    ctx->local_begin = std::max(s.lo, s.q_begin - p.window + 1);
    ctx->local_count = std::max(0, T - ctx->local_begin);
  }
  ctx->tpad = RoundUp(T);
  ctx->lpad = RoundUp(ctx->local_count);
  // Padding (keys past T or local_count, dims past D) is never stored or
  // read into a result, so the buffers are reused without clearing.
  ctx->kg.resize(static_cast<size_t>(ctx->tpad) * D);
  ctx->vg.resize(static_cast<size_t>(dpanels) * ctx->tpad * kPanel);
  ctx->kl.resize(static_cast<size_t>(ctx->lpad) * D);
  ctx->vl.resize(static_cast<size_t>(dpanels) * std::max(ctx->lpad, 1) * kPanel);
  std::vector<float> tile(static_cast<size_t>(bs) * D);
  for (int b = 0; p.global && b * bs < T; ++b) {
    const int rows = std::min(bs, T - b * bs);
    size_t stride = 0;
    const float* k = GlobalHeadsTile(p, s.global_k_host[b], g, 1, rows, tile.data(), &stride);
    PutKeys(ctx->kg.data(), D, b * bs, k, stride, rows, scale);
    const float* v = GlobalHeadsTile(p, s.global_v_host[b], g, 1, rows, tile.data(), &stride);
    PutValues(ctx->vg.data(), ctx->tpad, b * bs, v, stride, rows, D);
  }
  std::vector<float> row(D);
  for (int i = 0; i < ctx->local_count; ++i) {
    const float* k = LocalRow(p, s, false, g, ctx->local_begin + i, row.data());
    PutKey(ctx->kl.data(), D, i, k, scale);
    const float* v = LocalRow(p, s, true, g, ctx->local_begin + i, row.data());
    PutValue(ctx->vl.data(), ctx->lpad, i, v, D);
  }
}

// Long segments (prefill chunks, replay), per query head and per tile of
// kTileRows query rows, the keys in blocks of kKeyBlock (flash-attention
// style): per block, a packed-panel product for the scores of the tile's rows
// against the block's keys, an online softmax step (each row's running
// maximum and normalizer; the output rows rescaled when the maximum grows)
// and a packed-panel product adding the block's weighted values into the
// output; the local keys (the window) are the last block. Only a block's
// scores are kept (kTileRows x kKeyBlock floats, in L2 at any context: a
// tile's whole score rows outgrew it from a few thousand keys on, and the
// softmax and value passes then ran from L3); each row's valid keys are
// global [0, t] and local [max(lo, t-W+1), t], every other weight 0. The
// output is divided by the normalizer at the end. Heads run in parallel.
constexpr int kTileRows = 64;
constexpr int kKeyBlock = 512;
static_assert(kKeyBlock % kPanel == 0, "key blocks hold whole panels");

// Online-softmax step of one row over `n` scores (`valid` of them real, the
// rest weighted 0): the row becomes the weights e^(s - m), the running
// maximum `*m` and normalizer `*l` are updated, and the factor the row's
// earlier output must be multiplied by is returned (1 when the maximum did
// not grow, 0 when there was none).
inline float SoftmaxStep(float* row, int valid, int n, float* m, double* l) {
  if (valid <= 0) {
    std::fill(row, row + n, 0.0f);
    return 1.0f;
  }
  const float m_new = MaxOf(row, valid, *m);
  float f = 1.0f;
  if (*m == -std::numeric_limits<float>::infinity()) {
    f = 0.0f;
  } else if (m_new != *m) {
    f = ExpSimd(*m - m_new);
  }
  *l = *l * f + ExpInPlace(row, valid, m_new);
  *m = m_new;
  std::fill(row + valid, row + n, 0.0f);
  return f;
}

void LargeSegment(const AttentionParams& p, const AttentionSegment& s) {
  const int D = p.head_dim, H = p.num_heads, group = H / p.num_kv_heads, W = p.window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int n = s.n;
  // Gathered K/V per kv head, kept by the calling thread across calls (the
  // pool's threads read it during this call only).
  thread_local std::vector<HeadContext> t_ctxs;
  if (t_ctxs.size() < static_cast<size_t>(p.num_kv_heads)) t_ctxs.resize(p.num_kv_heads);
  std::vector<HeadContext>& ctxs = t_ctxs;
  ParallelFor(p.num_kv_heads, [&](int g) { GatherHead(p, s, g, scale, &ctxs[g]); });
  const size_t k_panel = static_cast<size_t>(D) * kPanel;  // floats per key panel
  const size_t ldo = static_cast<size_t>(H) * D;
  ParallelFor(H, [&](int h) {
    const HeadContext& ctx = ctxs[h / group];
    const float* qh = s.q + static_cast<size_t>(h) * D;
    float* oh = s.out + static_cast<size_t>(h) * D;
    Scratch& sc = ThreadScratch();
    // A global block's scores, or the local keys' (at most W - 1 + kTileRows
    // of them, from the start of a panel).
    const int max_cols = std::max(kKeyBlock, RoundUp(W + kTileRows + kPanel));
    Grow(&sc.scores, static_cast<size_t>(kTileRows) * max_cols);
    float* scores = sc.scores.data();
    const size_t v_panel = static_cast<size_t>(ctx.tpad) * kPanel;
    float m[kTileRows];
    double l[kTileRows];
    float f[kTileRows];
    for (int i0 = 0; i0 < n; i0 += kTileRows) {
      const int rows = std::min(kTileRows, n - i0);
      const int t0 = s.q_begin + i0, t1 = t0 + rows - 1;  // first and last position
      const float* q = qh + static_cast<size_t>(i0) * ldo;
      float* o = oh + static_cast<size_t>(i0) * ldo;
      std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
      std::fill(l, l + rows, 0.0);
      // Rescales the output rows by f[] (after a block whose maximum grew).
      auto rescale = [&] {
        for (int i = 0; i < rows; ++i) {
          if (f[i] != 1.0f) Scale(o + static_cast<size_t>(i) * ldo, D, f[i]);
        }
      };
      // Global keys [0, t1], block by block; row i sees [0, t0 + i].
      const int gcols = p.global ? t1 + 1 : 0;
      bool first = true;  // the first product writes the output, later ones add
      for (int k0 = 0; k0 < gcols; k0 += kKeyBlock) {
        const int kn = std::min(kKeyBlock, gcols - k0);
        PanelGemm(q, ldo, rows, D, ctx.kg.data() + static_cast<size_t>(k0 / kPanel) * k_panel,
                  k_panel, kn, scores, kKeyBlock, false);
        for (int i = 0; i < rows; ++i) {
          const int valid = std::min(kn, t0 + i + 1 - k0);
          f[i] = SoftmaxStep(scores + static_cast<size_t>(i) * kKeyBlock, valid, kn, &m[i], &l[i]);
        }
        if (!first) rescale();
        PanelGemm(scores, kKeyBlock, rows, kn, ctx.vg.data() + static_cast<size_t>(k0) * kPanel,
                  v_panel, D, o, ldo, !first);
        first = false;
      }
      // Local keys of the tile: positions [lpos, t1] = local rows [lr0, lr1);
      // the score columns start at the panel holding lr0.
      const int lpos = W > 0 ? std::max(s.lo, t0 - W + 1) : t1 + 1;
      const int lr0 = lpos - ctx.local_begin, lr1 = t1 + 1 - ctx.local_begin;
      if (W > 0 && lr1 > lr0) {
        const int lp0 = lr0 / kPanel;
        const int lcols = lr1 - lp0 * kPanel;  // computed local columns
        const int ld = RoundUp(lcols);
        PanelGemm(q, ldo, rows, D, ctx.kl.data() + lp0 * k_panel, k_panel, lcols, scores, ld,
                  false);
        for (int i = 0; i < rows; ++i) {
          const int t = t0 + i;
          // This row's local keys: columns [c0, c1).
          const int c0 = std::max(s.lo, t - W + 1) - ctx.local_begin - lp0 * kPanel;
          const int c1 = t + 1 - ctx.local_begin - lp0 * kPanel;
          float* row = scores + static_cast<size_t>(i) * ld;
          std::fill(row, row + c0, 0.0f);
          f[i] = SoftmaxStep(row + c0, c1 - c0, lcols - c0, &m[i], &l[i]);
        }
        if (!first) rescale();
        const size_t vl_panel = static_cast<size_t>(ctx.lpad) * kPanel;
        PanelGemm(scores, ld, rows, lcols,
                  ctx.vl.data() + static_cast<size_t>(lp0) * kPanel * kPanel, vl_panel, D, o, ldo,
                  !first);
        first = false;
      }
      for (int i = 0; i < rows; ++i) {
        float* oi = o + static_cast<size_t>(i) * ldo;
        if (first || l[i] == 0.0) {
          std::fill(oi, oi + D, 0.0f);  // no key at all (cannot happen for t >= lo)
        } else {
          Scale(oi, D, static_cast<float>(1.0 / l[i]));
        }
      }
    }
  });
}

}  // namespace

void Attention(const AttentionParams& p, const std::vector<AttentionSegment>& segments) {
  std::vector<int> small;
  for (int si = 0; si < static_cast<int>(segments.size()); ++si) {
    if (segments[si].n == 0) continue;
    if (segments[si].n >= kGemmMinRows) {
      LargeSegment(p, segments[si]);
    } else {
      small.push_back(si);
    }
  }
  if (small.empty()) return;
  // Tasks: each query row of the small segments, its keys split into parts
  // when there are fewer rows than threads (a decode batch of 1), each part
  // at least kMinPartKeys keys; every task keeps an online-softmax state,
  // and the parts of a row are merged at the end.
  constexpr int kMinPartKeys = 128;
  const int H = p.num_heads, D = p.head_dim, W = p.window;
  struct Row {
    int si, i, keys, gkeys, lb;
  };
  std::vector<Row> rows;
  size_t work = 0;
  for (int si : small) {
    const AttentionSegment& s = segments[si];
    for (int i = 0; i < s.n; ++i) {
      const int t = s.q_begin + i, gkeys = p.global ? t + 1 : 0;
      const int lb = W > 0 ? std::max(s.lo, t - W + 1) : t + 1;
      rows.push_back({si, i, gkeys + t + 1 - lb, gkeys, lb});
      work += rows.back().keys;
    }
  }
  const int threads = PoolThreads();
  const int nrows = static_cast<int>(rows.size());
  const int want = (threads + nrows - 1) / nrows;
  struct Task {
    int row, k0, k1;
  };
  std::vector<Task> tasks;
  std::vector<int> first_task(nrows + 1);
  for (int r = 0; r < nrows; ++r) {
    first_task[r] = static_cast<int>(tasks.size());
    const int parts = std::max(1, std::min(want, rows[r].keys / kMinPartKeys));
    for (int j = 0; j < parts; ++j) {
      tasks.push_back({r, static_cast<int>(static_cast<int64_t>(rows[r].keys) * j / parts),
                       static_cast<int>(static_cast<int64_t>(rows[r].keys) * (j + 1) / parts)});
    }
  }
  first_task[nrows] = static_cast<int>(tasks.size());
  const size_t ntasks = tasks.size();
  std::vector<float> m(ntasks * H, -std::numeric_limits<float>::infinity());
  std::vector<double> l(ntasks * H, 0.0);  // the normalizers, lanes summed
  std::vector<float> acc(ntasks * H * D, 0.0f);
  // Only fan out when there is enough work to pay for waking the team.
  const bool parallel = work * H * D > (1u << 16);
  ParallelFor(
      static_cast<int>(ntasks),
      [&](int k) {
        const Task& task = tasks[k];
        const Row& row = rows[task.row];
        const AttentionSegment& s = segments[row.si];
        thread_local std::vector<KeyRun> all, part;
        KeyRuns(p, s, s.q_begin + row.i, row.gkeys, row.lb, &all);
        const std::vector<KeyRun>* runs = &all;
        if (task.k0 > 0 || task.k1 < row.keys) {
          CutRuns(all, task.k0, task.k1, &part);
          runs = &part;
        }
        // The state lives in this thread's memory while it changes (the
        // tasks' slots share cache lines), then is copied to the task's slot.
        thread_local std::vector<float> tm, tacc;
        thread_local std::vector<double> tl;
        tm.assign(H, -std::numeric_limits<float>::infinity());
        tl.assign(static_cast<size_t>(H) * kLanes, 0.0);
        tacc.assign(static_cast<size_t>(H) * D, 0.0f);
        AttendRuns(p, s.q + static_cast<size_t>(row.i) * H * D, *runs,
                   {tm.data(), tl.data(), tacc.data()});
        std::copy(tm.begin(), tm.end(), m.begin() + k * H);
        for (int h = 0; h < H; ++h) {
          double sum = 0.0;
          for (int j = 0; j < kLanes; ++j) sum += tl[h * kLanes + j];
          l[k * H + h] = sum;
        }
        std::copy(tacc.begin(), tacc.end(), acc.begin() + static_cast<size_t>(k) * H * D);
      },
      parallel);
  // out = sum over parts of e^(m_j - M) acc_j / sum of e^(m_j - M) l_j.
  for (int r = 0; r < nrows; ++r) {
    const AttentionSegment& s = segments[rows[r].si];
    float* out = s.out + static_cast<size_t>(rows[r].i) * H * D;
    const int t0 = first_task[r], t1 = first_task[r + 1];
    for (int h = 0; h < H; ++h) {
      float M = -std::numeric_limits<float>::infinity();
      for (int k = t0; k < t1; ++k) M = std::max(M, m[k * H + h]);
      double norm = 0.0;
      float* o = out + h * D;
      std::fill(o, o + D, 0.0f);
      for (int k = t0; k < t1; ++k) {
        if (l[k * H + h] == 0.0) continue;  // a part without keys
        const float f = t1 - t0 == 1 ? 1.0f : ExpSimd(m[k * H + h] - M);
        norm += f * l[k * H + h];
        Axpy(o, acc.data() + (static_cast<size_t>(k) * H + h) * D, D, f);
      }
      Scale(o, D, static_cast<float>(1.0 / norm));
    }
  }
}

}  // namespace ced::kernels::CED_VARIANT_NS
