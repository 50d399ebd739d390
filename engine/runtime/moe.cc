// The MoE FFN of one layer over a batch (DESIGN.md §1.7): router GEMM on the
// backend, routing on the host, one gather of the normalised rows grouped by
// expert, each touched expert's SwiGLU as one product over its rows, the
// shared experts over every row, and a weighted combine into the residual.
#include "engine/runtime/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/runtime/engine.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

MoeRouting RouteTokens(const MoeConfig& moe, const float* logits, int rows) {
  const int n = moe.num_routed_experts, k = moe.num_experts_per_tok;
  MoeRouting r;
  r.rows = rows;
  r.k = k;
  r.experts.resize(static_cast<size_t>(rows) * k);
  r.gates.resize(r.experts.size());
  std::vector<float> p(n);
  std::vector<int32_t> idx(n);
  for (int i = 0; i < rows; ++i) {
    const float* z = logits + static_cast<size_t>(i) * n;
    if (moe.scoring == MoeScoring::kSoftmax) {
      const float m = *std::max_element(z, z + n);
      double sum = 0.0;
      for (int e = 0; e < n; ++e) sum += std::exp(static_cast<double>(z[e]) - m);
      for (int e = 0; e < n; ++e) {
        p[e] = static_cast<float>(std::exp(static_cast<double>(z[e]) - m) / sum);
      }
    } else {
      for (int e = 0; e < n; ++e) {
        p[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[e]))));
      }
    }
    std::iota(idx.begin(), idx.end(), 0);
    // Descending p, ties to the lower index: a strict weak order, so the
    // result does not depend on the sort's stability.
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += p[idx[j]];
    for (int j = 0; j < k; ++j) {
      double g = p[idx[j]];
      if (moe.norm_topk_prob && sum > 0) g /= sum;
      r.experts[static_cast<size_t>(i) * k + j] = idx[j];
      r.gates[static_cast<size_t>(i) * k + j] = static_cast<float>(g * moe.routed_scaling_factor);
    }
  }
  return r;
}

ExpertGroups GroupByExpert(const MoeRouting& r, int num_experts) {
  ExpertGroups g;
  const size_t pairs = r.experts.size();
  g.offsets.assign(num_experts + 1, 0);
  for (int32_t e : r.experts) ++g.offsets[e + 1];
  for (int e = 0; e < num_experts; ++e) g.offsets[e + 1] += g.offsets[e];
  g.order.resize(pairs);
  g.slot.resize(pairs);
  std::vector<int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  for (size_t q = 0; q < pairs; ++q) {  // token-major: tokens ascend within an expert
    const int32_t row = next[r.experts[q]]++;
    g.order[row] = static_cast<int32_t>(q / r.k);
    g.slot[q] = row;
  }
  return g;
}

void Engine::MoeFfn(int layer, const float* b, int rows, float* x) {
  const ModelConfig& c = config_;
  const MoeConfig& m = *c.moe;
  Backend* be = backend_.get();
  const auto& lw = dw_->layers[layer];
  const int d = c.hidden_size, n = m.num_routed_experts, k = m.num_experts_per_tok,
            fe = m.moe_intermediate_size;
  const size_t T = static_cast<size_t>(rows);

  // Shared experts: one SwiGLU over every row, added to the residual.
  if (m.num_shared_experts > 0) {
    const int fs = m.SharedWidth();
    DeviceBuffer sg(be, T * fs), su(be, T * fs);
    const GemmTarget gate_up[2] = {{lw.shared.w_gate, fs, sg.get(), false},
                                   {lw.shared.w_up, fs, su.get(), false}};
    be->GemmMulti(b, rows, d, gate_up, 2);
    be->SiluMul(sg.get(), su.get(), T * fs);
    const GemmTarget down = {lw.shared.w_down, d, x, true};
    be->GemmMulti(sg.get(), rows, fs, &down, 1);
  }

  // Route on the host.
  std::vector<float> logits(T * n);
  {
    DeviceBuffer z(be, T * n);
    be->Gemm(b, rows, d, lw.router, n, z.get());
    be->CopyToHost(logits.data(), z.get(), logits.size() * sizeof(float));
  }
  const MoeRouting routing = RouteTokens(m, logits.data(), rows);
  const ExpertGroups groups = GroupByExpert(routing, n);

  // Rows grouped by expert; each touched expert's products run once.
  const size_t pairs = T * k;
  DeviceBuffer bg(be, pairs * d), gate(be, pairs * fe), up(be, pairs * fe), y(be, pairs * d);
  be->GatherRows(b, d, groups.order.data(), static_cast<int>(pairs), bg.get());
  for (int e = 0; e < n; ++e) {
    const int r0 = groups.offsets[e], count = groups.offsets[e + 1] - r0;
    if (count == 0) continue;
    const auto& ew = lw.experts[e];
    const GemmTarget gate_up[2] = {
        {ew.w_gate, fe, gate.get() + static_cast<size_t>(r0) * fe, false},
        {ew.w_up, fe, up.get() + static_cast<size_t>(r0) * fe, false}};
    be->GemmMulti(bg.get() + static_cast<size_t>(r0) * d, count, d, gate_up, 2);
  }
  be->SiluMul(gate.get(), up.get(), pairs * fe);
  for (int e = 0; e < n; ++e) {
    const int r0 = groups.offsets[e], count = groups.offsets[e + 1] - r0;
    if (count == 0) continue;
    const GemmTarget down = {lw.experts[e].w_down, d, y.get() + static_cast<size_t>(r0) * d, false};
    be->GemmMulti(gate.get() + static_cast<size_t>(r0) * fe, count, fe, &down, 1);
  }
  be->MoeCombine(x, rows, d, k, y.get(), groups.slot.data(), routing.gates.data());
}

}  // namespace ced
