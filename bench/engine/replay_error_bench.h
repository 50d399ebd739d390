// Error of bounded replay against the full forward, by prompt length.
//
// Per (preset, length): a greedy run with exact replay gives the reference
// token stream; the full forward over prompt + those tokens gives reference
// logits at every step. A bounded-replay run is then teacher-forced on the
// same tokens, so every step compares distributions over the same context;
// the first step whose argmax differs is where free-running greedy decoding
// with bounded replay would first diverge. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weights.h"

namespace ced::bench {

struct ReplayErrorOptions {
  std::vector<int> lengths = {64, 128, 256, 512, 1024, 2048};
  int steps = 64;  // K greedy steps compared
};

struct ReplayErrorRow {
  std::string preset;
  int prompt_tokens = 0;
  int replay_window = 0;     // bounded R
  int exact_window = 0;      // (L-E)(W-1)+1
  bool approximate = false;  // bounded replay starts after position 0
  int steps = 0;
  // Bounded replay vs full forward (nats).
  double kl_first = 0;             // KL(full || bounded) at the first token
  double kl_mean = 0, kl_max = 0;  // over the K steps
  double top1_agreement = 0;       // fraction of the K steps with equal argmax
  int first_divergence = -1;       // first step with a different argmax; -1 = none
  // Exact replay vs full forward (sanity: float rounding only).
  double exact_kl_max = 0;
  int exact_first_divergence = -1;
  double full_forward_s = 0;  // time of the reference forward
};

// KL(p || q) in nats of the softmaxes of two logit vectors of length n
// (computed in double; clamped at 0).
double LogitKl(const float* p_logits, const float* q_logits, int n);

// Runs every length on `weights` (lengths above max_position are skipped).
absl::StatusOr<std::vector<ReplayErrorRow>> RunReplayError(
    const ReplayErrorOptions& options, const std::string& preset,
    std::shared_ptr<const ModelWeights> weights);

}  // namespace ced::bench
