// Token sampling and stop conditions (DESIGN.md §1.4).
//
// Sampling is a pure function of (logits, params, step): its randomness comes
// from a counter-based hash of (seed, step), never from a global generator,
// so a step samples the same token on whichever worker runs it (replay on the
// prefill or the decode instance, a retried request). Every function here is
// thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ced {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // nucleus mass, in (0, 1]; 1 = off
  uint64_t seed = 0;
  // Added to every step index: a request continued on another worker after k
  // tokens (migration) sets k, so its step j draws as step k + j of the
  // original request.
  uint64_t step_offset = 0;
  // How the logits are adjusted before the choice (SamplingHistory::Apply,
  // in this order). OpenAI's logit_bias: added to these tokens' logits, each
  // in [-100, 100], ids unique.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The repetition penalty of Hugging Face's and vLLM's generation, over the
  // prompt's and the generated tokens: > 0, 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI's penalties on the tokens generated so far (not the prompt), each
  // in [-2, 2], 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Report each sampled token's log-probability (SampleStep) and those of
  // the top_logprobs (0 .. kMaxTopLogprobs) most probable tokens of its step.
  bool logprobs = false;
  int top_logprobs = 0;

  bool has_penalties() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f; }
  bool adjusts_logits() const {
    return has_penalties() || repetition_penalty != 1.0f || !logit_bias.empty();
  }
};

// At most this many logit_bias entries per request.
inline constexpr int kMaxLogitBias = 1024;
// The bounds of presence_penalty / frequency_penalty ([-kMaxPenalty,
// kMaxPenalty]) and of a logit_bias value ([-kMaxBias, kMaxBias]).
inline constexpr float kMaxPenalty = 2.0f;
inline constexpr float kMaxBias = 100.0f;
// At most this many alternatives per step (OpenAI's and vLLM's bound).
inline constexpr int kMaxTopLogprobs = 20;
// The log-probability reported for a token of probability 0 (-inf is not a
// JSON number; vLLM reports the same floor).
inline constexpr float kMinLogprob = -9999.0f;

// InvalidArgument naming the field: temperature negative or not finite,
// top_k negative, top_p outside (0, 1], a presence or frequency penalty
// outside [-2, 2] or not finite, a repetition penalty not finite and > 0, a
// logit bias on a negative or repeated id, outside [-100, 100], or more than
// kMaxLogitBias of them, top_logprobs outside [0, kMaxTopLogprobs] or set
// without logprobs. (Ids past the vocabulary are the caller's to refuse.)
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Samples one token id from `logits[0 .. vocab_size)` for generation step
// `step` (0 for the first generated token). Greedy (temperature 0, or
// top_k == 1) returns the argmax, ties to the lowest id. Otherwise: divide
// by temperature, softmax, keep the top_k most probable (ties to lower ids),
// then the smallest most-probable prefix with mass >= top_p, and pick one with
// a single uniform draw from hash(seed, step_offset + step). NaN logits are never chosen
// (unless every logit is NaN or -inf: then id 0). `params` must be valid.
int SampleToken(const float* logits, int vocab_size, const SamplingParams& params, uint64_t step);

// What one request's logit adjustments need to know of its tokens: how
// often each was generated (presence and frequency penalties) and which ones
// the prompt or the output hold (repetition penalty); only what its
// SamplingParams use is kept.
class SamplingHistory {
 public:
  SamplingHistory() = default;
  // A request with this prompt. A request continued elsewhere after k tokens
  // (step_offset k) has them at the end of its prompt: they count as
  // generated.
  SamplingHistory(absl::Span<const int32_t> prompt, const SamplingParams& params);

  // A token generated (ignored when nothing needs it).
  void Add(int32_t token);
  int count(int32_t token) const;  // times generated (when counted)

  // Adjusts logits[0 .. vocab_size) in place before the choice, in this
  // order: logit[t] += logit_bias[t]; for every token t of the prompt or
  // the output, logit[t] = logit[t] > 0 ? logit[t] / repetition_penalty :
  // logit[t] * repetition_penalty; for every token t generated c > 0 times,
  // logit[t] -= c * frequency_penalty + presence_penalty (OpenAI's
  // definition). Greedy requests too. Ids outside the vocabulary are ignored.
  void Apply(float* logits, int vocab_size, const SamplingParams& params) const;

 private:
  bool count_ = false;  // presence / frequency penalties
  bool seen_ = false;   // repetition penalty
  absl::flat_hash_map<int32_t, int> counts_;
  absl::flat_hash_set<int32_t> tokens_;  // the prompt's and the output's
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// A sampled token's log-probability and the most probable tokens of its step.
struct StepLogprobs {
  TokenLogprob token;
  std::vector<TokenLogprob> top;  // most probable first, ties to the lower id
};

// The log-softmax of logits[0 .. vocab_size) at `token` and at the `top_n`
// most probable tokens (fewer when the vocabulary is smaller), computed in
// double. NaN logits have probability 0; a logprob below kMinLogprob (or
// -inf) is reported as kMinLogprob.
StepLogprobs ComputeLogprobs(const float* logits, int vocab_size, int32_t token, int top_n);

// One generation step: applies `history`'s logit adjustments to `logits` in
// place, samples the token of `step` (SampleToken) and, when
// params.logprobs, fills *logprobs (if not null) with the log-probabilities
// of the logits as they were given: the model's distribution, before the
// adjustments, temperature, top_k and top_p (as vLLM reports by default).
int SampleStep(float* logits, int vocab_size, const SamplingParams& params,
               const SamplingHistory& history, uint64_t step, StepLogprobs* logprobs);

// The uniform draw in [0, 1) used for (seed, step); exposed for tests.
double SamplingUniform(uint64_t seed, uint64_t step);

struct StopConditions {
  int max_tokens = 0;               // generated tokens allowed; >= 1
  std::vector<int> stop_token_ids;  // any of these ends the sequence
  int eos_token_id = -1;            // < 0: none
};

enum class FinishReason { kNone, kLength, kStop };

// Whether generation ends with `token`, the `num_generated`-th generated token
// (counting it). A stop or EOS token wins over the length limit; the stop
// token itself is part of the output.
FinishReason CheckStop(const StopConditions& stop, int token, int num_generated);

// "none", "length", "stop".
const char* FinishReasonName(FinishReason reason);

}  // namespace ced
