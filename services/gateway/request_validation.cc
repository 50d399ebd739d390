#include "services/gateway/request_validation.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace ced::gateway {
namespace {

constexpr char kFieldPayload[] = "type.ced.dev/gateway.field";

absl::Status Invalid(const std::string& field, const std::string& what) {
  return InvalidField(field, what);
}

// request_id, session_id: at most max_bytes printable ASCII bytes, no spaces.
absl::Status CheckId(const std::string& field, const std::string& id, int max_bytes) {
  if (static_cast<int>(id.size()) > max_bytes) {
    return Invalid(field, absl::StrCat("must be at most ", max_bytes, " bytes, got ", id.size()));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x21 || c > 0x7e) {
      return Invalid(field, absl::StrCat("byte ", i, " is not printable ASCII (no spaces)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WithField(absl::Status status, const std::string& field) {
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

absl::Status InvalidField(const std::string& field, const std::string& what) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, ": ", what)), field);
}

std::string FieldOf(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);
  return field.has_value() ? std::string(*field) : "";
}

absl::Status CheckTokenId(const std::string& field, int32_t id, int vocab_size) {
  if (id >= 0 && id < vocab_size) return absl::OkStatus();
  return Invalid(field, absl::StrCat("token id ", id, " is outside [0, ", vocab_size, ")"));
}

absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const ced::v1::GenerateRequest& request,
                                                         const Tokenizer& tokenizer,
                                                         const RequestLimits& limits) {
  ValidatedRequest out;
  RETURN_IF_ERROR(CheckId("request_id", request.request_id(), limits.max_request_id_bytes));
  out.request_id = request.request_id();
  // A routing hint only: never an error unless malformed.
  RETURN_IF_ERROR(CheckId("session_id", request.session_id(), limits.max_session_id_bytes));
  out.session_id = request.session_id();

  // Prompt: exactly one form.
  const bool has_text = !request.prompt().empty();
  const bool has_ids = request.prompt_token_ids_size() > 0;
  if (has_text && has_ids) {
    return Invalid("prompt", "set exactly one of prompt and prompt_token_ids, not both");
  }
  if (!has_text && !has_ids) {
    return Invalid("prompt", "empty: set prompt (text) or prompt_token_ids");
  }
  if (has_ids) {
    for (int i = 0; i < request.prompt_token_ids_size(); ++i) {
      RETURN_IF_ERROR(CheckTokenId(absl::StrCat("prompt_token_ids[", i, "]"),
                                   request.prompt_token_ids(i), limits.vocab_size));
    }
    out.prompt_token_ids.assign(request.prompt_token_ids().begin(),
                                request.prompt_token_ids().end());
  } else {
    for (int id : tokenizer.Encode(request.prompt(), request.add_bos())) {
      out.prompt_token_ids.push_back(id);
    }
  }
  const int prompt_tokens = static_cast<int>(out.prompt_token_ids.size());
  if (prompt_tokens >= limits.max_position) {
    return Invalid(has_ids ? "prompt_token_ids" : "prompt",
                   absl::StrCat(prompt_tokens, " tokens leave no room to generate within the ",
                                "model's context of ", limits.max_position, " positions"));
  }

  // Length.
  if (request.max_tokens() <= 0) {
    return Invalid("max_tokens", absl::StrCat("must be >= 1, got ", request.max_tokens()));
  }
  const int room = limits.max_position - prompt_tokens;
  if (request.max_tokens() > room) {
    return Invalid(
        "max_tokens",
        absl::StrCat("prompt (", prompt_tokens, " tokens) + max_tokens (", request.max_tokens(),
                     ") exceeds the model's context of ", limits.max_position, " positions"));
  } else {
    out.max_tokens = request.max_tokens();
  }

  // Sampling.
  if (!std::isfinite(request.temperature()) || request.temperature() < 0) {
    return Invalid("temperature", absl::StrCat("must be finite and >= 0 (0 = greedy), got ",
                                               request.temperature()));
  }
  const float top_p = request.top_p();
  if (!std::isfinite(top_p) || top_p < 0 || top_p > 1) {
    return Invalid("top_p", absl::StrCat("must be in (0, 1] (0 = off), got ", top_p));
  }
  if (request.top_k() < 0) {
    return Invalid("top_k", absl::StrCat("must be >= 0 (0 = off), got ", request.top_k()));
  }
  out.sampling.temperature = request.temperature();
  out.sampling.top_p = top_p == 0 ? 1.0f : top_p;
  out.sampling.top_k = request.top_k();
  out.sampling.seed = request.seed();
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", request.presence_penalty()},
        {"frequency_penalty", request.frequency_penalty()}}) {
    if (!(value >= -kMaxPenalty && value <= kMaxPenalty)) {
      return Invalid(name, absl::StrCat("must be in [-", kMaxPenalty, ", ", kMaxPenalty,
                                        "] (0 = off), got ", value));
    }
  }
  out.sampling.presence_penalty = request.presence_penalty();
  out.sampling.frequency_penalty = request.frequency_penalty();
  const float repetition = request.repetition_penalty();
  if (!std::isfinite(repetition) || repetition < 0) {
    return Invalid("repetition_penalty",
                   absl::StrCat("must be > 0 (0 or 1 = off), got ", repetition));
  }
  out.sampling.repetition_penalty = repetition == 0.0f ? 1.0f : repetition;
  if (request.logit_bias_size() > kMaxLogitBias) {
    return Invalid("logit_bias", absl::StrCat("at most ", kMaxLogitBias, " entries, got ",
                                              request.logit_bias_size()));
  }
  for (const auto& [token, bias] : request.logit_bias()) {
    const std::string field = absl::StrCat("logit_bias[", token, "]");
    RETURN_IF_ERROR(CheckTokenId(field, token, limits.vocab_size));
    if (!(bias >= -kMaxBias && bias <= kMaxBias)) {
      return Invalid(field,
                     absl::StrCat("must be in [-", kMaxBias, ", ", kMaxBias, "], got ", bias));
    }
    out.sampling.logit_bias.emplace_back(token, bias);
  }
  std::sort(out.sampling.logit_bias.begin(), out.sampling.logit_bias.end());
  if (request.top_logprobs() < 0 || request.top_logprobs() > kMaxTopLogprobs) {
    return Invalid("top_logprobs", absl::StrCat("must be in [0, ", kMaxTopLogprobs, "], got ",
                                                request.top_logprobs()));
  }
  if (request.top_logprobs() > 0 && !request.logprobs()) {
    return Invalid("top_logprobs", "needs logprobs set");
  }
  out.sampling.logprobs = request.logprobs();
  out.sampling.top_logprobs = request.top_logprobs();
  RETURN_IF_ERROR(ValidateSamplingParams(out.sampling));

  // Stop conditions.
  if (request.stop_size() > limits.max_stop_strings) {
    return Invalid("stop", absl::StrCat("at most ", limits.max_stop_strings, " stop strings, got ",
                                        request.stop_size()));
  }
  for (int i = 0; i < request.stop_size(); ++i) {
    const size_t bytes = request.stop(i).size();
    if (bytes < 1 || static_cast<int>(bytes) > limits.max_stop_string_bytes) {
      return Invalid(
          absl::StrCat("stop[", i, "]"),
          absl::StrCat("must be 1 to ", limits.max_stop_string_bytes, " bytes, got ", bytes));
    }
    out.stop.push_back(request.stop(i));
  }
  if (request.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Invalid("stop_token_ids", absl::StrCat("at most ", limits.max_stop_token_ids,
                                                  " ids, got ", request.stop_token_ids_size()));
  }
  for (int i = 0; i < request.stop_token_ids_size(); ++i) {
    RETURN_IF_ERROR(CheckTokenId(absl::StrCat("stop_token_ids[", i, "]"), request.stop_token_ids(i),
                                 limits.vocab_size));
    out.stop_token_ids.push_back(request.stop_token_ids(i));
  }
  out.ignore_eos = request.ignore_eos();

  // Placement overrides. The enum numbers equal those of ced.internal.
  if (!ced::v1::ReplayOn_IsValid(request.replay_on())) {
    return Invalid("replay_on", absl::StrCat("unknown value ", request.replay_on()));
  }
  if (!ced::v1::ReplayMode_IsValid(request.replay_mode())) {
    return Invalid("replay_mode", absl::StrCat("unknown value ", request.replay_mode()));
  }
  out.replay_on = static_cast<ced::internal::ReplayOn>(request.replay_on());
  out.replay_mode = static_cast<ced::internal::ReplayMode>(request.replay_mode());
  return out;
}

}  // namespace ced::gateway
