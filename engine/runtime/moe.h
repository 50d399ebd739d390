// Mixture-of-experts routing (DESIGN.md §1.7), on the host.
//
// The router's logits of a step come back to the host (T x n_routed floats),
// are turned into expert choices and gates here, and the engine then groups
// the step's tokens by expert so that each expert's GEMMs run once per step
// (engine/runtime/moe.cc). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/config.h"

namespace ced {

struct MoeRouting {
  int rows = 0;
  int k = 0;
  // [rows * k]: token i's j-th choice, by descending probability (ties: the
  // lower expert index first), and its gate.
  std::vector<int32_t> experts;
  std::vector<float> gates;
};

// p = softmax(logits[i]) or sigmoid(logits[i]) (moe.scoring); the top k of p
// (ties: lower index); gates = p[top], divided by their sum when
// norm_topk_prob, times routed_scaling_factor. logits is [rows, n_routed].
MoeRouting RouteTokens(const MoeConfig& moe, const float* logits, int rows);

// The step's (token, choice) pairs grouped by expert: `order` lists token
// indices expert by expert (tokens ascending within an expert); expert e's
// rows are [offsets[e], offsets[e + 1]); slot[i * k + j] is the row of order
// holding token i's j-th choice.
struct ExpertGroups {
  std::vector<int32_t> order;    // [rows * k]
  std::vector<int32_t> offsets;  // [n_routed + 1]
  std::vector<int32_t> slot;     // [rows * k]
};
ExpertGroups GroupByExpert(const MoeRouting& routing, int num_experts);

}  // namespace ced
