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

// out[i, h] = softmax over {global keys j <= i} ∪ {local keys max(0,i-W+1) <= j <= i}.
void ReferenceAttention(const ModelConfig& c, int n, const Rows& q, const Rows& gk,
                        const Rows& gv, const Rows& lk, const Rows& lv, Rows* out) {
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
      for (int j = 0; j <= i; ++j) add(gk, gv, j);
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
  const int n = static_cast<int>(tokens.size()), d = c.hidden_size, qd = c.QDim(),
            kv = c.KvDim(), F = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  Rows x(static_cast<size_t>(n) * d), a(x.size()), tmp(x.size()), h_e_norm;
  for (int i = 0; i < n; ++i) {
    std::memcpy(&x[static_cast<size_t>(i) * d], w.embed.data + static_cast<size_t>(tokens[i]) * d,
                d * sizeof(float));
  }
  std::vector<Rows> gk(c.num_layers), gv(c.num_layers);
  Rows q(static_cast<size_t>(n) * qd), attn, lk, lv, gate(static_cast<size_t>(n) * F),
      up(gate.size());
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
    ReferenceAttention(c, n, q, gk[source], gv[source], lk, lv, &attn);
    kernels::GemmCpu(attn.data(), n, qd, lw.wo.data, d, tmp.data());
    kernels::AddCpu(x.data(), tmp.data(), x.size());
    kernels::RmsNormCpu(x.data(), n, d, lw.ffn_norm.data, eps, a.data());
    kernels::GemmCpu(a.data(), n, d, lw.w_gate.data, F, gate.data());
    kernels::GemmCpu(a.data(), n, d, lw.w_up.data, F, up.data());
    kernels::SiluMulCpu(gate.data(), up.data(), gate.size());
    kernels::GemmCpu(gate.data(), n, F, lw.w_down.data, d, tmp.data());
    kernels::AddCpu(x.data(), tmp.data(), x.size());
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
