// libFuzzer harness for the gateway's public request path: raw bytes as they
// arrive from a client -> ParseRequest (ced.v1.GenerateRequest, UTF-8 checks)
// -> ValidateGenerateRequest against small limits and the byte tokenizer.
// Beyond "no crash, no sanitizer report", it checks that every accepted
// request satisfies the limits the workers rely on.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ced/v1/gateway.pb.h"
#include "engine/tokenizer/tokenizer.h"
#include "services/gateway/request_parsing.h"
#include "services/gateway/request_validation.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr int kVocabSize = 300;

const ced::Tokenizer& FuzzTokenizer() {
  static const ced::Tokenizer* tokenizer = [] {
    ced::ByteTokenizer::Options options;
    options.vocab_size = kVocabSize;
    auto created = ced::ByteTokenizer::Create(options);
    FUZZ_CHECK(created.ok());
    return created->release();
  }();
  return *tokenizer;
}

ced::gateway::RequestLimits FuzzLimits() {
  ced::gateway::RequestLimits limits;
  limits.vocab_size = kVocabSize;
  limits.max_position = 128;
  limits.max_stop_strings = 4;
  limits.max_stop_string_bytes = 16;
  limits.max_stop_token_ids = 4;
  limits.max_request_id_bytes = 32;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::Slice slice(std::string(reinterpret_cast<const char*>(data), size));
  grpc::ByteBuffer buffer(&slice, 1);
  ced::v1::GenerateRequest request;
  const absl::Status parsed = ced::gateway::ParseRequest(buffer, &request);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const ced::gateway::RequestLimits limits = FuzzLimits();
  auto validated = ced::gateway::ValidateGenerateRequest(request, FuzzTokenizer(), limits);
  if (!validated.ok()) {
    FUZZ_CHECK(validated.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(!validated.status().message().empty());
    return 0;
  }
  const ced::gateway::ValidatedRequest& v = *validated;
  const int prompt_tokens = static_cast<int>(v.prompt_token_ids.size());
  FUZZ_CHECK(prompt_tokens >= 1);
  FUZZ_CHECK(v.max_tokens >= 1);
  FUZZ_CHECK(prompt_tokens + v.max_tokens <= limits.max_position);
  for (int32_t id : v.prompt_token_ids) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  for (int32_t id : v.stop_token_ids) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  FUZZ_CHECK(static_cast<int>(v.stop.size()) <= limits.max_stop_strings);
  FUZZ_CHECK(static_cast<int>(v.request_id.size()) <= limits.max_request_id_bytes);
  FUZZ_CHECK(v.sampling.top_p > 0 && v.sampling.top_p <= 1);
  FUZZ_CHECK(v.sampling.temperature >= 0 && v.sampling.top_k >= 0);
  FUZZ_CHECK(v.sampling.presence_penalty >= -2 && v.sampling.presence_penalty <= 2);
  FUZZ_CHECK(v.sampling.frequency_penalty >= -2 && v.sampling.frequency_penalty <= 2);
  FUZZ_CHECK(std::isfinite(v.sampling.repetition_penalty) && v.sampling.repetition_penalty > 0);
  FUZZ_CHECK(static_cast<int>(v.sampling.logit_bias.size()) <= ced::kMaxLogitBias);
  for (const auto& [id, bias] : v.sampling.logit_bias) {
    FUZZ_CHECK(id >= 0 && id < limits.vocab_size && bias >= -100 && bias <= 100);
  }
  FUZZ_CHECK(v.sampling.top_logprobs >= 0 && v.sampling.top_logprobs <= ced::kMaxTopLogprobs);
  FUZZ_CHECK(v.sampling.top_logprobs == 0 || v.sampling.logprobs);
  // What the workers check again passes there too.
  FUZZ_CHECK(ced::ValidateSamplingParams(v.sampling).ok());
  return 0;
}
