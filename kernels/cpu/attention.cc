#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ced::kernels {
namespace {

constexpr int kGemmMinRows = 16;

// K/V of one kv head for one segment, gathered to contiguous f32.
struct HeadContext {
  std::vector<float> gk, gv;  // [T, D] global, positions 0 .. T-1
  std::vector<float> lk, lv;  // [local_count, D], positions local_begin ..
  int local_begin = 0;
  int local_count = 0;
};

void GatherHead(const AttentionParams& p, const AttentionSegment& s, int g, HeadContext* ctx) {
  const int D = p.head_dim;
  const size_t kv_dim = static_cast<size_t>(p.num_kv_heads) * D;
  const size_t row_bytes = KvRowBytes(p.format, kv_dim);
  const int T = s.q_begin + s.n;
  ctx->gk.resize(static_cast<size_t>(T) * D);
  ctx->gv.resize(static_cast<size_t>(T) * D);
  for (int t = 0; t < T; ++t) {
    const int b = t / p.block_size, off = t % p.block_size;
    DecodeRowSlice(p.format, s.global_k_host[b] + off * row_bytes, kv_dim,
                   static_cast<size_t>(g) * D, D, &ctx->gk[static_cast<size_t>(t) * D]);
    DecodeRowSlice(p.format, s.global_v_host[b] + off * row_bytes, kv_dim,
                   static_cast<size_t>(g) * D, D, &ctx->gv[static_cast<size_t>(t) * D]);
  }
  ctx->local_count = 0;
  if (p.window <= 0) return;
  ctx->local_begin = std::max(s.lo, s.q_begin - p.window + 1);
  ctx->local_count = std::max(0, T - ctx->local_begin);
  ctx->lk.resize(static_cast<size_t>(ctx->local_count) * D);
  ctx->lv.resize(static_cast<size_t>(ctx->local_count) * D);
  for (int i = 0; i < ctx->local_count; ++i) {
    const int pos = ctx->local_begin + i;
    float* dk = &ctx->lk[static_cast<size_t>(i) * D];
    float* dv = &ctx->lv[static_cast<size_t>(i) * D];
    if (pos >= s.q_begin) {
      const size_t r = static_cast<size_t>(pos - s.q_begin) * kv_dim + static_cast<size_t>(g) * D;
      std::memcpy(dk, s.chunk_local_k + r, D * sizeof(float));
      std::memcpy(dv, s.chunk_local_v + r, D * sizeof(float));
    } else {
      const size_t slot = static_cast<size_t>(pos % p.window);
      DecodeRowSlice(p.format, s.local_k_ring + slot * row_bytes, kv_dim,
                     static_cast<size_t>(g) * D, D, dk);
      DecodeRowSlice(p.format, s.local_v_ring + slot * row_bytes, kv_dim,
                     static_cast<size_t>(g) * D, D, dv);
    }
  }
}

inline float Dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Softmax over global scores [0, t] and local scores for positions
// [lb, t]; writes the weighted sum of values to out [D].
void FinishRow(const AttentionParams& p, const HeadContext& ctx, int t, float* gscores,
               float* lscores, int lb, float* out) {
  const int D = p.head_dim;
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j <= t; ++j) m = std::max(m, gscores[j]);
  const int l0 = lb - ctx.local_begin, l1 = t - ctx.local_begin;
  for (int j = l0; j <= l1 && p.window > 0; ++j) m = std::max(m, lscores[j]);
  float sum = 0.0f;
  for (int j = 0; j <= t; ++j) {
    gscores[j] = std::exp(gscores[j] - m);
    sum += gscores[j];
  }
  for (int j = l0; j <= l1 && p.window > 0; ++j) {
    lscores[j] = std::exp(lscores[j] - m);
    sum += lscores[j];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + D, 0.0f);
  for (int j = 0; j <= t; ++j) {
    const float w = gscores[j] * inv;
    const float* v = &ctx.gv[static_cast<size_t>(j) * D];
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] += w * v[d];
  }
  for (int j = l0; j <= l1 && p.window > 0; ++j) {
    const float w = lscores[j] * inv;
    const float* v = &ctx.lv[static_cast<size_t>(j) * D];
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] += w * v[d];
  }
}

// Local scores for query row `q` at position t into lscores (indexed from
// ctx.local_begin); returns the first local position used.
int LocalScores(const AttentionParams& p, const AttentionSegment& s, const HeadContext& ctx,
                const float* q, int t, float scale, float* lscores) {
  if (p.window <= 0) return t + 1;
  const int lb = std::max(s.lo, t - p.window + 1);
  for (int j = lb; j <= t; ++j) {
    const int idx = j - ctx.local_begin;
    lscores[idx] = Dot(q, &ctx.lk[static_cast<size_t>(idx) * p.head_dim], p.head_dim) * scale;
  }
  return lb;
}

// Small segments (decode): plain loops, one (segment, kv head) per task.
void SmallSegmentHead(const AttentionParams& p, const AttentionSegment& s, int g,
                      HeadContext* ctx) {
  GatherHead(p, s, g, ctx);
  const int D = p.head_dim, H = p.num_heads, group = H / p.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int T = s.q_begin + s.n;
  std::vector<float> gscores(T), lscores(std::max(1, ctx->local_count));
  for (int i = 0; i < s.n; ++i) {
    const int t = s.q_begin + i;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const float* q = s.q + (static_cast<size_t>(i) * H + h) * D;
      for (int j = 0; j <= t; ++j) gscores[j] = Dot(q, &ctx->gk[static_cast<size_t>(j) * D], D) * scale;
      const int lb = LocalScores(p, s, *ctx, q, t, scale, lscores.data());
      FinishRow(p, *ctx, t, gscores.data(), lscores.data(), lb,
                s.out + (static_cast<size_t>(i) * H + h) * D);
    }
  }
}

// Long segments (prefill chunks, replay): BLAS for Q·Kᵀ per query head, loops
// for the rest; heads run in parallel.
void LargeSegment(const AttentionParams& p, const AttentionSegment& s) {
  const int D = p.head_dim, H = p.num_heads, group = H / p.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int T = s.q_begin + s.n;
  std::vector<HeadContext> ctxs(p.num_kv_heads);
#pragma omp parallel for schedule(dynamic, 1)
  for (int g = 0; g < p.num_kv_heads; ++g) GatherHead(p, s, g, &ctxs[g]);
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(s.n) * T);
    std::vector<float> lscores;
#pragma omp for schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) {
      const HeadContext& ctx = ctxs[h / group];
      lscores.resize(std::max(1, ctx.local_count));
      const float* qh = s.q + static_cast<size_t>(h) * D;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.n, T, D, scale, qh, H * D,
                  ctx.gk.data(), D, 0.0f, scores.data(), T);
      for (int i = 0; i < s.n; ++i) {
        const int t = s.q_begin + i;
        const float* q = qh + static_cast<size_t>(i) * H * D;
        const int lb = LocalScores(p, s, ctx, q, t, scale, lscores.data());
        FinishRow(p, ctx, t, &scores[static_cast<size_t>(i) * T], lscores.data(), lb,
                  s.out + (static_cast<size_t>(i) * H + h) * D);
      }
    }
  }
}

}  // namespace

void AttentionCpu(const AttentionParams& p, const std::vector<AttentionSegment>& segments) {
  std::vector<std::pair<int, int>> small_tasks;
  for (int si = 0; si < static_cast<int>(segments.size()); ++si) {
    if (segments[si].n == 0) continue;
    if (segments[si].n >= kGemmMinRows) {
      LargeSegment(p, segments[si]);
    } else {
      for (int g = 0; g < p.num_kv_heads; ++g) small_tasks.emplace_back(si, g);
    }
  }
  // Only fan out when there is enough work to pay for waking the team.
  size_t work = 0;
  for (const auto& t : small_tasks) {
    work += static_cast<size_t>(segments[t.first].q_begin + segments[t.first].n) * p.head_dim;
  }
  const bool parallel = work * (p.num_heads / p.num_kv_heads) > (1u << 16);
#pragma omp parallel if (parallel)
  {
    HeadContext ctx;
#pragma omp for schedule(dynamic, 1)
    for (int k = 0; k < static_cast<int>(small_tasks.size()); ++k) {
      SmallSegmentHead(p, segments[small_tasks[k].first], small_tasks[k].second, &ctx);
    }
  }
}

}  // namespace ced::kernels
