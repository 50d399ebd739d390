// Turns the tokens a request's workers send (possibly out of order, possibly
// twice: the first token can come from both the prefill and the decode
// worker) into the ordered stream the client gets: each step once, text
// deltas as complete UTF-8, and stop strings applied to the decoded text.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "ced/internal/common.pb.h"
#include "engine/tokenizer/tokenizer.h"

namespace ced::gateway {

// Finds stop strings in a growing text. Text that could still be the start of
// a stop string is held back until it is known not to be one. Not thread-safe.
class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns what may now be sent to the client. After a match
  // it returns the text before the match and matched() turns true; later
  // calls return "".
  std::string Feed(const std::string& text);
  // The text held back (no stop string matched); empty after a match.
  std::string Flush();

  bool matched() const { return matched_ >= 0; }
  const std::string& matched_string() const;

 private:
  std::vector<std::string> stops_;
  std::string held_;
  int matched_ = -1;  // index into stops_
};

// Not thread-safe (one per request).
class TokenAssembler {
 public:
  struct Output {
    std::vector<int32_t> token_ids;
    std::string text;
    // One per token when the steps came with them (empty otherwise).
    std::vector<ced::internal::StepLogprobs> logprobs;
  };

  // `tokenizer` is not owned and must outlive this. At most `max_tokens`
  // tokens are ever emitted.
  TokenAssembler(const Tokenizer* tokenizer, std::vector<std::string> stop_strings, int max_tokens);

  // Records the tokens of steps [start_step, start_step + ids.size()). Steps
  // already emitted or recorded are ignored (counted in mismatches() when the
  // id differs); negative steps are ignored. `logprobs`: empty, or one per
  // id (the first copy of a step that brings them keeps them).
  void Add(int start_step, absl::Span<const int32_t> ids) { Add(start_step, ids, nullptr); }
  void Add(int start_step, absl::Span<const int32_t> ids,
           const google::protobuf::RepeatedPtrField<ced::internal::StepLogprobs>* logprobs);

  // Emits the tokens now contiguous with what was emitted before, and their
  // text with stop strings applied. Once a stop string matched, the tokens
  // after the one that completed it are dropped and nothing more is emitted.
  Output TakeReady();

  // The rest of the text (an unfinished character as U+FFFD, text held back
  // for a possible stop string). Call once, at the end of the stream.
  std::string Finish();

  bool stopped() const { return stop_.matched(); }
  const std::string& matched_stop() const { return stop_.matched_string(); }
  int emitted() const { return next_step_; }
  // The tokens emitted so far, by step.
  const std::vector<int32_t>& emitted_ids() const { return emitted_ids_; }
  // The first step not emitted yet, while later steps wait for it.
  bool has_gap() const { return !pending_.empty(); }
  int mismatches() const { return mismatches_; }

 private:
  IncrementalDecoder decoder_;
  StopMatcher stop_;
  const int max_tokens_;
  int next_step_ = 0;
  struct Step {
    int32_t token = 0;
    bool has_logprobs = false;
    ced::internal::StepLogprobs logprobs;
  };
  std::map<int, Step> pending_;  // steps >= next_step_
  int mismatches_ = 0;
  std::vector<int32_t> emitted_ids_;  // by step, to detect mismatching duplicates
};

}  // namespace ced::gateway
