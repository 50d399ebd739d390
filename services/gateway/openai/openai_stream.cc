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

TokenText ResponseBuilder::Token(const ced::v1::TokenLogprob& t) const {
  return {tokenizer_->TokenBytes(t.token_id()), t.logprob()};
}

void ResponseBuilder::TakeLogprobs(const ced::v1::GenerateResponse& message, Logprobs* to) const {
  if (tokenizer_ == nullptr) return;
  for (const ced::v1::StepLogprobs& l : message.logprobs()) {
    LogprobEntry e;
    e.token = Token(l.token());
    for (const ced::v1::TokenLogprob& t : l.top()) e.top.push_back(Token(t));
    to->entries.push_back(std::move(e));
  }
}

ChoiceResult ResponseBuilder::result() const {
  ChoiceResult r{text_, finish_reason_, std::nullopt, {}};
  if (tokenizer_ != nullptr) r.logprobs = logprobs_;
  if (tools_.has_value()) {
    ParsedOutput parsed = tools_->Parse(text_);  // nothing was fed: not streamed
    if (!parsed.calls.empty()) {
      r.text = std::move(parsed.content);
      r.tool_calls = std::move(parsed.calls);
      r.finish_reason = "tool_calls";
    }
  }
  return r;
}

void ResponseBuilder::AppendEvents(const ced::v1::GenerateResponse& message, std::string* out) {
  if (finished_) return;
  if (!opened_ && header_.endpoint == Endpoint::kChat) {
    AppendEvent(ChunkJson(header_, "", "", /*role_only=*/true, include_usage_, index_), out);
  }
  opened_ = true;
  TakeLogprobs(message, &logprobs_);
  // An event with logprobs carries those of the tokens since the last one
  // (held while their text is: an unfinished character, a possible stop).
  auto send_logprobs = [this]() -> const Logprobs* {
    return tokenizer_ != nullptr ? &logprobs_ : nullptr;
  };
  auto sent_logprobs = [this] {
    for (const LogprobEntry& e : logprobs_.entries) {
      logprobs_.text_offset += TextLength(e.token.bytes);
    }
    logprobs_.entries.clear();
  };
  auto text_event = [&](const std::string& text) {
    if (text.empty()) return;
    if (tokenizer_ == nullptr) {
      AppendTextEvent(text, out);
    } else {
      AppendEvent(ChunkJson(header_, text, "", false, include_usage_, index_, send_logprobs()),
                  out);
      sent_logprobs();
    }
  };
  std::string text = tools_.has_value() ? tools_->Feed(message.text()) : message.text();
  text = std::exchange(echo_, "") + text;
  if (!IsFinal(message)) {
    text_event(text);
    return;
  }
  finished_ = true;
  finish_reason_ = FinishReasonName(message.finish_reason());
  usage_ = UsageOf(message);
  if (tools_.has_value()) {
    ParsedOutput parsed = tools_->Finish();
    text += parsed.content;
    if (!parsed.calls.empty()) {
      finish_reason_ = "tool_calls";
      text_event(text);
      text.clear();
      AppendEvent(ToolCallsChunkJson(header_, parsed.calls, include_usage_, index_), out);
    }
  }
  AppendEvent(
      ChunkJson(header_, text, finish_reason_, false, include_usage_, index_, send_logprobs()),
      out);
  sent_logprobs();
  if (include_usage_ && usage_chunk_) AppendEvent(UsageChunkJson(header_, usage_), out);
}

std::string ResponseBuilder::End(const grpc::Status& status) const {
  if (status.ok()) return "data: [DONE]\n\n";
  return "data: " + ErrorJson(FromGrpcStatus(status)) + "\n\n";
}

void ResponseBuilder::Add(const ced::v1::GenerateResponse& message) {
  if (finished_) return;
  text_ += std::exchange(echo_, "") + message.text();
  TakeLogprobs(message, &logprobs_);
  if (IsFinal(message)) {
    finished_ = true;
    finish_reason_ = FinishReasonName(message.finish_reason());
    usage_ = UsageOf(message);
  }
}

std::string ResponseBuilder::Body() const {
  return CompletionJson(header_, std::vector<ChoiceResult>{result()}, usage_);
}

}  // namespace ced::gateway::openai
