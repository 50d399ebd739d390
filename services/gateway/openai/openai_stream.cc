#include "services/gateway/openai/openai_stream.h"

#include <cctype>
#include <string>
#include <utility>

#include "services/common/grpc_util.h"
#include "services/gateway/request_validation.h"

namespace ced::gateway::openai {
namespace {

UsageCounts UsageOf(const ced::v1::GenerateResponse& final) {
  UsageCounts u;
  u.prompt_tokens = final.usage().prompt_tokens();
  u.completion_tokens = final.usage().completion_tokens();
  u.cached_prompt_tokens = final.usage().cached_prompt_tokens();
  return u;
}

bool IsFinal(const ced::v1::GenerateResponse& m) {
  return m.finish_reason() != ced::v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  absl::Status s = services::FromGrpc(status);
  if (s.code() != absl::StatusCode::kInvalidArgument) return s;
  // "field: what", as every field error is worded: the field becomes the
  // error's param, as for the errors found before the call started.
  const std::string& message = status.error_message();
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0) return s;
  for (size_t i = 0; i < colon; ++i) {
    const char c = message[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' &&
        c != ']') {
      return s;
    }
  }
  return WithField(std::move(s), message.substr(0, colon));
}

void ResponseBuilder::AppendEvent(const std::string& json, std::string* out) const {
  out->append("data: ");
  out->append(json);
  out->append("\n\n");
}

void ResponseBuilder::AppendTextEvent(const std::string& text, std::string* out) {
  if (text_before_.empty()) {
    // One chunk rendered with a placeholder text that needs no escaping; its
    // string value is the last one with this key (choices come after id and
    // model, and a quote inside those is escaped, so they cannot match).
    const std::string json = ChunkJson(header_, "x", "", false, include_usage_, index_);
    const std::string key =
        header_.endpoint == Endpoint::kChat ? R"("content":"x")" : R"("text":"x")";
    const size_t at = json.rfind(key);
    if (at == std::string::npos) {  // never: ChunkJson writes the key
      AppendEvent(ChunkJson(header_, text, "", false, include_usage_, index_), out);
      return;
    }
    const size_t value = at + key.size() - 3;  // the opening quote of "x"
    text_before_ = json.substr(0, value);
    text_after_ = json.substr(value + 3);
  }
  out->append("data: ");
  out->append(text_before_);
  out->append(JsonString(text));
  out->append(text_after_);
  out->append("\n\n");
}

void ResponseBuilder::AppendEvents(const ced::v1::GenerateResponse& message, std::string* out) {
  if (finished_) return;
  if (!opened_ && header_.endpoint == Endpoint::kChat) {
    AppendEvent(ChunkJson(header_, "", "", /*role_only=*/true, include_usage_, index_), out);
  }
  opened_ = true;
  if (!IsFinal(message)) {
    if (!message.text().empty()) {
      AppendTextEvent(message.text(), out);
    }
    return;
  }
  finished_ = true;
  finish_reason_ = FinishReasonName(message.finish_reason());
  usage_ = UsageOf(message);
  AppendEvent(ChunkJson(header_, message.text(), finish_reason_, false, include_usage_, index_),
              out);
  if (include_usage_ && usage_chunk_) AppendEvent(UsageChunkJson(header_, usage_), out);
}

std::string ResponseBuilder::End(const grpc::Status& status) const {
  if (status.ok()) return "data: [DONE]\n\n";
  return "data: " + ErrorJson(FromGrpcStatus(status)) + "\n\n";
}

void ResponseBuilder::Add(const ced::v1::GenerateResponse& message) {
  if (finished_) return;
  text_ += message.text();
  if (IsFinal(message)) {
    finished_ = true;
    finish_reason_ = FinishReasonName(message.finish_reason());
    usage_ = UsageOf(message);
  }
}

std::string ResponseBuilder::Body() const {
  return CompletionJson(header_, text_, finish_reason_, usage_);
}

}  // namespace ced::gateway::openai
