#include "services/gateway/openai/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace ced::gateway::openai {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kHermesBegin = "<tool_call>";
constexpr std::string_view kHermesEnd = "</tool_call>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// The markers that open a format's calls.
std::vector<std::string_view> Openers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return {kHermesBegin};
    case ToolCallFormat::kDeepSeekV3:
      return {kDsCallsBegin, kDsCallBegin};
    case ToolCallFormat::kNone:
      break;
  }
  return {};
}

// Where the first opener starts, or npos.
size_t FindOpener(ToolCallFormat format, std::string_view text) {
  size_t best = std::string_view::npos;
  for (std::string_view m : Openers(format)) best = std::min(best, text.find(m));
  return best;
}

// The arguments as a JSON object's text, or false.
bool ArgumentsText(const Json& args, std::string* out) {
  if (args.is_object()) {
    *out = args.dump(-1, ' ', false, Json::error_handler_t::replace);
    return true;
  }
  if (args.is_string()) {  // already JSON text (some models write it so)
    Json inner = Json::parse(args.get<std::string>(), nullptr, false);
    if (inner.is_discarded() || !inner.is_object()) return false;
    *out = inner.dump(-1, ' ', false, Json::error_handler_t::replace);
    return true;
  }
  return false;
}

bool ParseHermes(std::string_view calls, std::vector<ToolCall>* out) {
  size_t at = 0;
  while (true) {
    const size_t begin = calls.find(kHermesBegin, at);
    if (begin == std::string_view::npos) break;
    const size_t body = begin + kHermesBegin.size();
    const size_t end = calls.find(kHermesEnd, body);
    if (end == std::string_view::npos) return false;  // cut off
    const Json j = Json::parse(calls.substr(body, end - body), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
    ToolCall call;
    call.name = name->get<std::string>();
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (args == j.end()) {
      call.arguments = "{}";
    } else if (!ArgumentsText(*args, &call.arguments)) {
      return false;
    }
    out->push_back(std::move(call));
    at = end + kHermesEnd.size();
  }
  return !out->empty();
}

bool ParseDeepSeekV3(std::string_view calls, std::vector<ToolCall>* out) {
  size_t at = 0;
  while (true) {
    const size_t begin = calls.find(kDsCallBegin, at);
    if (begin == std::string_view::npos) break;
    const size_t body = begin + kDsCallBegin.size();
    const size_t end = calls.find(kDsCallEnd, body);
    if (end == std::string_view::npos) return false;
    // TYPE<sep>NAME\n```json\nARGS\n``` (absl's string_view: its strip helpers take it)
    const absl::string_view call_text(calls.data() + body, end - body);
    const size_t sep = call_text.find(absl::string_view(kDsSep.data(), kDsSep.size()));
    if (sep == absl::string_view::npos) return false;
    const absl::string_view rest = call_text.substr(sep + kDsSep.size());
    const size_t newline = rest.find('\n');
    ToolCall call;
    call.name = std::string(absl::StripAsciiWhitespace(rest.substr(0, newline)));
    if (call.name.empty()) return false;
    absl::string_view args =
        newline == absl::string_view::npos ? absl::string_view() : rest.substr(newline + 1);
    args = absl::StripAsciiWhitespace(args);
    if (absl::ConsumePrefix(&args, "```json") || absl::ConsumePrefix(&args, "```")) {
      if (!absl::ConsumeSuffix(&args, "```")) return false;
    }
    args = absl::StripAsciiWhitespace(args);
    if (args.empty()) {
      call.arguments = "{}";
    } else {
      const Json j = Json::parse(std::string(args), nullptr, false);
      if (j.is_discarded() || !ArgumentsText(j, &call.arguments)) return false;
    }
    out->push_back(std::move(call));
    at = end + kDsCallEnd.size();
  }
  return !out->empty();
}

}  // namespace

absl::StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "deepseek_v3") return ToolCallFormat::kDeepSeekV3;
  return absl::InvalidArgumentError(absl::StrCat(
      "tool call format must be none, hermes or deepseek_v3, got \"", std::string(name), "\""));
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kDeepSeekV3:
      return "deepseek_v3";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

ToolCallFormat DetectToolCallFormat(const ChatTemplate& chat_template,
                                    const ChatRenderOptions& options) {
  std::vector<ChatMessage> probe(3);
  probe[0].role = "user";
  probe[0].content = "What is the weather?";
  probe[1].role = "assistant";
  probe[1].content_is_null = true;  // as clients send a call-only turn
  ChatToolCall call;
  call.id = "call_0";
  call.name = "get_weather";
  call.arguments = R"({"city": "Paris"})";
  probe[1].tool_calls.push_back(call);
  probe[2].role = "tool";
  probe[2].tool_call_id = "call_0";
  probe[2].content = "sunny";
  ChatRenderOptions o = options;
  o.add_generation_prompt = true;
  for (bool null_content : {true, false}) {
    probe[1].content_is_null = null_content;
    absl::StatusOr<std::string> text = chat_template.Render(probe, o);
    if (!text.ok()) continue;
    if (text->find(kHermesBegin) != std::string::npos) return ToolCallFormat::kHermes;
    if (text->find(kDsCallBegin) != std::string::npos) return ToolCallFormat::kDeepSeekV3;
  }
  return ToolCallFormat::kNone;
}

ParsedOutput ParseToolCalls(ToolCallFormat format, const std::string& text,
                            const std::string& id_prefix) {
  ParsedOutput out;
  const size_t at = FindOpener(format, text);
  std::vector<ToolCall> calls;
  const std::string_view rest = at == std::string::npos ? "" : std::string_view(text).substr(at);
  const bool ok = at != std::string::npos &&
                  (format == ToolCallFormat::kHermes ? ParseHermes(rest, &calls)
                                                     : ParseDeepSeekV3(rest, &calls));
  if (!ok) {
    out.content = text;
    return out;
  }
  out.content = text.substr(0, at);
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i].id = absl::StrCat("call_", id_prefix, "_", i);
  }
  out.calls = std::move(calls);
  return out;
}

std::string ToolCallStream::Feed(const std::string& text) {
  held_ += text;
  if (in_call_ || format_ == ToolCallFormat::kNone) {
    return in_call_ ? "" : std::exchange(held_, "");
  }
  const size_t at = FindOpener(format_, held_);
  if (at != std::string::npos) {
    in_call_ = true;
    std::string out = held_.substr(0, at);
    held_.erase(0, at);
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of an opener.
  size_t keep = 0;
  for (std::string_view m : Openers(format_)) {
    for (size_t len = std::min(m.size() - 1, held_.size()); len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == m.substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ParsedOutput ToolCallStream::Parse(const std::string& text) const {
  ParsedOutput out = ParseToolCalls(format_, text, id_prefix_);
  if (!parallel_ && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

ParsedOutput ToolCallStream::Finish() {
  ParsedOutput out;
  if (!in_call_) {
    out.content = std::exchange(held_, "");
    return out;
  }
  out = Parse(held_);
  held_.clear();
  return out;
}

}  // namespace ced::gateway::openai
