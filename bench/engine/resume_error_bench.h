// Error of a resumed prefill (DESIGN.md §1.6: the first P prompt tokens'
// global K/V from the prefix cache, the encoder rebuilt from a = max(0,
// min(P, N - R_d) - R_e)) against a fresh prefill of the same prompt in the
// same replay mode, by prompt length N and cached prefix P.
//
// Per (preset, N, mode): a fresh prefill + K greedy steps gives the reference
// tokens and logits (and, being cached, the prefix a later prompt reuses);
// then per P a sequence made by CreateSequenceForPrompt(max_cached_tokens =
// P) is prefilled and teacher-forced on the reference tokens, so each step
// compares next-token distributions over the same context; the first step
// whose argmax differs is where free-running greedy decoding of the resumed
// request would first depart. Exact mode is the control: it must equal the
// fresh prefill up to float rounding. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weights.h"

namespace ced::bench {

struct ResumeErrorOptions {
  std::vector<int> lengths = {256, 1024, 4096};
  // P = floor(f x (N - 1) / block) x block for each f in (0, 1]; 1 is the
  // agent case (everything but the new tail cached). P = 0 and repeats are
  // skipped.
  std::vector<double> cached_fractions = {0.25, 0.5, 1.0};
  int steps = 64;  // K steps compared
};

struct ResumeErrorRow {
  std::string preset;
  std::string mode;  // "bounded" or "exact"
  int prompt_tokens = 0;       // N
  int cached_tokens = 0;       // P
  int encoder_start = 0;       // a: the encoder reran over [a, N)
  int replay_window = 0;       // R_d of the mode
  int steps = 0;
  // Resumed vs fresh prefill, teacher-forced on the fresh run's greedy tokens.
  double kl_first = 0;             // KL(fresh || resumed) at the first token, nats
  double kl_mean = 0, kl_max = 0;  // over the K steps
  double top1_agreement = 0;
  int first_divergence = -1;  // -1 = none within K
  double fresh_prefill_s = 0, resumed_prefill_s = 0;  // one run each (noisy)
};

// What a cached block costs at rest, per cache format: the engine's block
// bytes over its tokens after a prompt's blocks were cached, against the
// accounting's global K/V bytes per token (`ced model info`).
struct AtRestRow {
  std::string preset, format;
  int block_size = 0;
  int cached_blocks = 0;
  int64_t block_bytes = 0;
  double bytes_per_token = 0;             // block_bytes / block_size (measured)
  int64_t accounting_bytes_per_token = 0;  // GlobalKvBytesPerToken
  int64_t local_bytes_per_sequence = 0;    // the rings, never cached
};
absl::StatusOr<std::vector<AtRestRow>> RunAtRest(const std::string& preset,
                                                 std::shared_ptr<const ModelWeights> weights);

// Every length (those with N + K > max_position skipped), both modes, every P.
absl::StatusOr<std::vector<ResumeErrorRow>> RunResumeError(
    const ResumeErrorOptions& options, const std::string& preset,
    std::shared_ptr<const ModelWeights> weights);

}  // namespace ced::bench
