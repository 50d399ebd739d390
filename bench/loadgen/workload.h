// The load generator's workload: which requests to send and when. Arrival
// times and prompt/output lengths come from the simulator's trace generator
// (bench/sim/workload.h), so the load generator and `ced-sim` replay the very
// same trace for a seed; this layer adds prompt contents (random tokens or
// lines of a prompt file). Deterministic for a seed; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/workload.h"

namespace ced::loadgen {

// Random prompt tokens are drawn uniformly from [0, kPromptTokenRange): the
// byte range of the byte tokenizer, valid for every preset's vocabulary.
inline constexpr int kPromptTokenRange = 256;

struct WorkloadOptions {
  double input_mean = 128, input_cv = 0.5;   // prompt tokens (random prompts)
  double output_mean = 64, output_cv = 0.5;  // generated tokens (= max_tokens)
  double rate = 1;                           // Poisson arrivals, requests per second
  uint64_t seed = 1;
  // When non-empty, prompts are lines of this list (picked at random by the
  // seed) instead of random tokens; their lengths come from the tokenizer.
  std::vector<std::string> prompts;
};

struct PlannedRequest {
  int64_t index = 0;
  double arrival_s = 0;  // since the start of the run (Poisson mode)
  // Exactly one of the two is set.
  std::vector<int32_t> prompt_token_ids;
  std::string prompt_text;
  int64_t prompt_tokens = 0;  // sampled length; for text prompts, the text's byte count
  int64_t output_tokens = 1;  // max_tokens, reached exactly with ignore_eos
  uint64_t seed = 0;          // the request's sampling seed
};

// An unbounded, lazily extended trace: Get(i) is the same for a seed however
// many requests were asked for before (the trace is extended, never redrawn).
class Workload {
 public:
  static absl::StatusOr<Workload> Create(const WorkloadOptions& options);

  // The i-th request (i >= 0). Amortised O(1).
  PlannedRequest Get(int64_t index);

  const WorkloadOptions& options() const { return options_; }

 private:
  explicit Workload(WorkloadOptions options) : options_(std::move(options)) {}
  absl::Status Extend(int64_t min_size);

  WorkloadOptions options_;
  std::vector<sim::RequestSpec> specs_;
};

// How many of the first `n` requests of the trace have prompt + max_tokens
// above `context` positions (they would fail with INVALID_ARGUMENT).
int64_t CountAboveContext(const WorkloadOptions& options, int64_t n, int64_t context);

// `length` tokens in [0, kPromptTokenRange), a pure function of (seed, index).
std::vector<int32_t> RandomPromptTokens(uint64_t seed, int64_t index, int64_t length);

// Non-empty lines of a text file, in order; an error naming the file when it
// cannot be read or holds no prompt.
absl::StatusOr<std::vector<std::string>> ReadPromptFile(const std::string& path);

}  // namespace ced::loadgen
