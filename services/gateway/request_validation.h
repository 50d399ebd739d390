// Validation of ced.v1.GenerateRequest: every field, before any worker sees
// the request. Errors are INVALID_ARGUMENT and name the field, e.g.
// "max_tokens: must be >= 0 (0 = the default), got -3".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ced/internal/common.pb.h"
#include "ced/v1/gateway.pb.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace ced::gateway {

struct RequestLimits {
  int vocab_size = 0;           // token ids must be in [0, vocab_size)
  int max_position = 0;         // prompt + max_tokens must fit
  int max_stop_strings = 16;
  int max_stop_string_bytes = 256;
  int max_stop_token_ids = 64;
  int max_request_id_bytes = 128;
  int max_session_id_bytes = 256;
};

// A request that passed validation, in the form the workers take.
struct ValidatedRequest {
  std::string request_id;                 // as given; empty when the client left it empty
  std::string session_id;                 // routing hint; empty when none
  std::vector<int32_t> prompt_token_ids;  // tokenized prompt (BOS included when asked)
  int max_tokens = 0;                     // >= 1, resolved default
  SamplingParams sampling;                // top_p 0 already mapped to 1
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // as given (EOS is added by the caller)
  bool ignore_eos = false;
  ced::internal::ReplayOn replay_on = ced::internal::REPLAY_ON_UNSPECIFIED;
  ced::internal::ReplayMode replay_mode = ced::internal::REPLAY_MODE_UNSPECIFIED;
  // Not a field of the request: the caller's address ("host:port"), set by
  // the front end for the access log.
  std::string client;
};

// INVALID_ARGUMENT "field: what", with the field attached (FieldOf): the
// OpenAI API reports it as the error's `param`.
absl::Status InvalidField(const std::string& field, const std::string& what);
// `status` with `field` attached (any code, e.g. NOT_FOUND for a model).
absl::Status WithField(absl::Status status, const std::string& field);
// The field an InvalidField / WithField status names, or "".
std::string FieldOf(const absl::Status& status);

// OK when `id` is a token of a vocabulary of `vocab_size`; else InvalidField
// naming `field`.
absl::Status CheckTokenId(const std::string& field, int32_t id, int vocab_size);

// Checks every field of `request` against `limits` and tokenizes the prompt
// with `tokenizer` (which must cover limits.vocab_size). Thread-safe.
absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const ced::v1::GenerateRequest& request,
                                                         const Tokenizer& tokenizer,
                                                         const RequestLimits& limits);

}  // namespace ced::gateway
