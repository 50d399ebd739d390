// The full forward (DESIGN.md §1.3 with lo = 0): every layer at every
// position, f32 K/V, no cache, no paging. It runs on the host with plain
// loops for attention whatever the backend, so it is the reference every
// fast path (and every device backend) is tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/runtime/engine.h"
#include "kernels/cpu/math.h"

namespace ced {
namespace {

using Rows = std::vector<float>;

// out[i, h] = softmax over {global keys j <= i} ∪ {local keys max(0,i-W+1) <= j <= i};
// gk == nullptr: a window-only layer (no global keys).
void ReferenceAttention(const ModelConfig& c, int n, const Rows& q, const Rows* gk, const Rows* gv,
                        const Rows& lk, const Rows& lv, Rows* out) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_dim, W = c.sliding_window;
  const int kv = G * D, group = H / G;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  out->assign(static_cast<size_t>(n) * H * D, 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const float* qi = &q[(static_cast<size_t>(i) * H + h) * D];
      std::vector<double> scores;
      std::vector<const float*> values;
      auto add = [&](const Rows& k, const Rows& v, int j) {
        const float* kj = &k[static_cast<size_t>(j) * kv + g * D];
        double dot = 0.0;
        for (int e = 0; e < D; ++e) dot += static_cast<double>(qi[e]) * kj[e];
        scores.push_back(dot * scale);
        values.push_back(&v[static_cast<size_t>(j) * kv + g * D]);
      };
      for (int j = 0; gk != nullptr && j <= i; ++j) add(*gk, *gv, j);
      if (W > 0) {
        for (int j = std::max(0, i - W + 1); j <= i; ++j) add(lk, lv, j);
      }
      const double m = *std::max_element(scores.begin(), scores.end());
      double sum = 0.0;
      for (double& s : scores) sum += (s = std::exp(s - m));
      float* o = &(*out)[(static_cast<size_t>(i) * H + h) * D];
      for (size_t j = 0; j < scores.size(); ++j) {
        const float w = static_cast<float>(scores[j] / sum);
        for (int e = 0; e < D; ++e) o[e] += w * values[j][e];
      }
    }
  }
}

// y[out] = w[out, in] · x[in], accumulated in double.
void MatVec(const Tensor& w, const float* x, double* y) {
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* wr = w.data + r * w.cols;
    double acc = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(wr[c]) * x[c];
    y[r] = acc;
  }
}

// out[d] = w_down · (silu(w_gate · b) * (w_up · b)), one token, in double.
void SwiGlu(const FfnWeights& f, const float* b, std::vector<double>* out) {
  const int64_t width = f.w_gate.rows, d = f.w_down.rows;
  std::vector<double> g(width), u(width);
  MatVec(f.w_gate, b, g.data());
  MatVec(f.w_up, b, u.data());
  std::vector<float> h(width);
  for (int64_t i = 0; i < width; ++i)
    h[i] = static_cast<float>(g[i] / (1.0 + std::exp(-g[i])) * u[i]);
  out->assign(d, 0.0);
  MatVec(f.w_down, h.data(), out->data());
}

// x[i] += the MoE FFN (§1.7) of b[i], token by token with plain loops: its
// own scoring, top-k and gates, nothing shared with engine/runtime/moe.cc.
void ReferenceMoe(const ModelConfig& c, const LayerWeights& lw, int n, const Rows& b, Rows* x) {
  const MoeConfig& m = *c.moe;
  const int d = c.hidden_size, ne = m.num_routed_experts, k = m.num_experts_per_tok;
  std::vector<double> z(ne), p(ne), y(d), acc(d);
  for (int i = 0; i < n; ++i) {
    const float* bi = &b[static_cast<size_t>(i) * d];
    MatVec(lw.router, bi, z.data());
    double zmax = z[0], sum = 0.0;
    for (int e = 1; e < ne; ++e) zmax = std::max(zmax, z[e]);
    for (int e = 0; e < ne; ++e) {
      p[e] =
          m.scoring == MoeScoring::kSoftmax ? std::exp(z[e] - zmax) : 1.0 / (1.0 + std::exp(-z[e]));
      sum += p[e];
    }
    if (m.scoring == MoeScoring::kSoftmax) {
      for (double& v : p) v /= sum;
    }
    // Selection: k times the largest remaining p, scanning up, so the first
    // (lowest) index wins a tie.
    std::vector<int> top;
    std::vector<bool> taken(ne, false);
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < ne; ++e) {
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      }
      taken[best] = true;
      top.push_back(best);
    }
    double gsum = 0.0;
    for (int e : top) gsum += p[e];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int e : top) {
      double g = p[e];
      if (m.norm_topk_prob) g /= gsum;
      g *= m.routed_scaling_factor;
      SwiGlu(lw.experts[e], bi, &y);
      for (int j = 0; j < d; ++j) acc[j] += g * y[j];
    }
    if (m.num_shared_experts > 0) {
      SwiGlu(lw.shared, bi, &y);
      for (int j = 0; j < d; ++j) acc[j] += y[j];
    }
    float* xi = &(*x)[static_cast<size_t>(i) * d];
    for (int j = 0; j < d; ++j) xi[j] = static_cast<float>(xi[j] + acc[j]);
  }
}

}  // namespace

absl::StatusOr<std::vector<float>> Engine::FullForward(absl::Span<const int32_t> tokens) {
  const ModelConfig& c = config_;
  const ModelWeights& w = *weights_;
  if (tokens.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (static_cast<int>(tokens.size()) > c.max_position) {
    return absl::InvalidArgumentError("sequence longer than max_position");
  }
  RETURN_IF_ERROR(CheckTokens(tokens));
  if (!w.lm_head.loaded() || !w.layers.back().wq.loaded()) {
    return absl::FailedPreconditionError("the full forward needs the full weight set");
  }
  const int n = static_cast<int>(tokens.size()), d = c.hidden_size, qd = c.QDim(), kv = c.KvDim(),
            F = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  Rows x(static_cast<size_t>(n) * d), a(x.size()), tmp(x.size()), h_e_norm;
  for (int i = 0; i < n; ++i) {
    std::memcpy(&x[static_cast<size_t>(i) * d], w.embed.data + static_cast<size_t>(tokens[i]) * d,
                d * sizeof(float));
  }
  std::vector<Rows> gk(c.num_layers), gv(c.num_layers);
  const bool any_dense = !c.moe.has_value() || c.moe->first_dense_layers > 0;
  Rows q(static_cast<size_t>(n) * qd), attn, lk, lv,
      gate(any_dense ? static_cast<size_t>(n) * F : 0), up(gate.size());
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    kernels::RmsNormCpu(x.data(), n, d, lw.attn_norm.data, eps, a.data());
    kernels::GemmCpu(a.data(), n, d, lw.wq.data, qd, q.data());
    kernels::RopeCpu(q.data(), n, c.num_heads, c.head_dim, pos.data(), c.rope_theta);
    if (c.sliding_window > 0) {
      lk.resize(static_cast<size_t>(n) * kv);
      lv.resize(lk.size());
      kernels::GemmCpu(a.data(), n, d, lw.local_k.data, kv, lk.data());
      kernels::GemmCpu(a.data(), n, d, lw.local_v.data, kv, lv.data());
      kernels::RopeCpu(lk.data(), n, c.num_kv_heads, c.head_dim, pos.data(), c.rope_theta);
    }
    if (c.IsGlobalSource(l)) {
      const Rows& src = c.IsEncoderLayer(l) ? a : h_e_norm;
      gk[l].resize(static_cast<size_t>(n) * kv);
      gv[l].resize(gk[l].size());
      kernels::GemmCpu(src.data(), n, d, lw.global_k.data, kv, gk[l].data());
      kernels::GemmCpu(src.data(), n, d, lw.global_v.data, kv, gv[l].data());
      kernels::RopeCpu(gk[l].data(), n, c.num_kv_heads, c.head_dim, pos.data(), c.rope_theta);
    }
    const int source = c.global_kv_source[l];
    ReferenceAttention(c, n, q, source >= 0 ? &gk[source] : nullptr,
                       source >= 0 ? &gv[source] : nullptr, lk, lv, &attn);
    kernels::GemmCpu(attn.data(), n, qd, lw.wo.data, d, tmp.data());
    kernels::AddCpu(x.data(), tmp.data(), x.size());
    kernels::RmsNormCpu(x.data(), n, d, lw.ffn_norm.data, eps, a.data());
    if (c.IsMoeLayer(l)) {
      ReferenceMoe(c, lw, n, a, &x);
    } else {
      kernels::GemmCpu(a.data(), n, d, lw.w_gate.data, F, gate.data());
      kernels::GemmCpu(a.data(), n, d, lw.w_up.data, F, up.data());
      kernels::SiluMulCpu(gate.data(), up.data(), gate.size());
      kernels::GemmCpu(gate.data(), n, F, lw.w_down.data, d, tmp.data());
      kernels::AddCpu(x.data(), tmp.data(), x.size());
    }
    if (l == c.num_encoder_layers - 1 && !c.IsDecoderOnly()) {
      h_e_norm.resize(x.size());
      kernels::RmsNormCpu(x.data(), n, d, w.encoder_norm.data, eps, h_e_norm.data());
    }
  }
  kernels::RmsNormCpu(x.data(), n, d, w.final_norm.data, eps, a.data());
  std::vector<float> logits(static_cast<size_t>(n) * c.vocab_size);
  kernels::GemmCpu(a.data(), n, d, w.lm_head.data, c.vocab_size, logits.data());
  return logits;
}

}  // namespace ced
