#include "services/gateway/openai/openai_protocol.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace ced::gateway::openai {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float:
      return "a number with a fraction";
    default:
      return "an integer";
  }
}

absl::Status WrongType(const std::string& field, const std::string& want, const Json& got) {
  return InvalidField(field, absl::StrCat("must be ", want, ", got ", TypeName(got)));
}

absl::StatusOr<std::string> GetString(const std::string& field, const Json& v) {
  if (!v.is_string()) return WrongType(field, "a string", v);
  return v.get<std::string>();
}

absl::StatusOr<bool> GetBool(const std::string& field, const Json& v) {
  if (!v.is_boolean()) return WrongType(field, "a boolean", v);
  return v.get<bool>();
}

absl::StatusOr<int64_t> GetInt(const std::string& field, const Json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return WrongType(field, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidField(field, absl::StrCat("must be at most ", hi));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return InvalidField(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", x));
  }
  return x;
}

absl::StatusOr<double> GetNumber(const std::string& field, const Json& v) {
  if (!v.is_number()) return WrongType(field, "a number", v);
  return v.get<double>();
}

absl::StatusOr<int32_t> GetTokenId(const std::string& field, const Json& v) {
  ASSIGN_OR_RETURN(int64_t id, GetInt(field, v, std::numeric_limits<int32_t>::min(),
                                      std::numeric_limits<int32_t>::max()));
  return static_cast<int32_t>(id);
}

// prompt: "text", [ids], ["text"], [[ids]].
absl::Status ParsePrompt(const Json& v, ced::v1::GenerateRequest* out) {
  if (v.is_string()) {
    out->set_prompt(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("prompt", "a string or an array", v);
  if (v.empty()) return InvalidField("prompt", "empty array: give a string or token ids");
  if (v[0].is_number()) {
    for (size_t i = 0; i < v.size(); ++i) {
      ASSIGN_OR_RETURN(int32_t id, GetTokenId(absl::StrCat("prompt[", i, "]"), v[i]));
      out->add_prompt_token_ids(id);
    }
    return absl::OkStatus();
  }
  if (v.size() > 1) {
    return InvalidField(
        "prompt", absl::StrCat("a batch of ", v.size(), " prompts; send one prompt per request"));
  }
  if (v[0].is_array()) {
    for (size_t i = 0; i < v[0].size(); ++i) {
      ASSIGN_OR_RETURN(int32_t id, GetTokenId(absl::StrCat("prompt[0][", i, "]"), v[0][i]));
      out->add_prompt_token_ids(id);
    }
    if (v[0].empty()) return InvalidField("prompt[0]", "empty token list");
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string text, GetString("prompt[0]", v[0]));
  out->set_prompt(std::move(text));
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& v, ced::v1::GenerateRequest* out) {
  if (v.is_string()) {
    out->add_stop(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("stop", "a string or an array of strings", v);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSIGN_OR_RETURN(std::string s, GetString(absl::StrCat("stop[", i, "]"), v[i]));
    out->add_stop(std::move(s));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParseContent(const std::string& field, const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, "a string, null or an array of text parts", v);
  std::string text;
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string part = absl::StrCat(field, "[", j, "]");
    if (!v[j].is_object()) return WrongType(part, "an object", v[j]);
    // The part's type first: an image or audio part is refused as such, not
    // for its image_url / input_audio field.
    const auto type = v[j].find("type");
    if (type == v[j].end() || *type != "text") {
      return InvalidField(part + ".type",
                          absl::StrCat("only \"text\" parts are supported",
                                       type == v[j].end() ? std::string(" (type is missing)")
                                                          : absl::StrCat(", got ", type->dump())));
    }
    for (const auto& [key, value] : v[j].items()) {
      if (key != "type" && key != "text") return InvalidField(part + "." + key, "unknown field");
    }
    if (!v[j].contains("text")) return InvalidField(part + ".text", "required");
    ASSIGN_OR_RETURN(std::string t, GetString(part + ".text", v[j]["text"]));
    text += t;
  }
  return text;
}

absl::StatusOr<ChatToolCall> ParseToolCall(const std::string& field, const Json& v) {
  if (!v.is_object()) return WrongType(field, "an object", v);
  ChatToolCall call;
  for (const auto& [key, value] : v.items()) {
    const std::string f = absl::StrCat(field, ".", key);
    if (value.is_null()) continue;
    if (key == "id") {
      ASSIGN_OR_RETURN(call.id, GetString(f, value));
    } else if (key == "type") {
      ASSIGN_OR_RETURN(call.type, GetString(f, value));
    } else if (key == "function") {
      if (!value.is_object()) return WrongType(f, "an object", value);
      for (const auto& [fk, fv] : value.items()) {
        if (fk == "name") {
          ASSIGN_OR_RETURN(call.name, GetString(f + ".name", fv));
        } else if (fk == "arguments") {
          ASSIGN_OR_RETURN(call.arguments, GetString(f + ".arguments", fv));
        } else {
          return InvalidField(absl::StrCat(f, ".", fk), "unknown field");
        }
      }
    } else {
      return InvalidField(f, "unknown field");
    }
  }
  return call;
}

absl::Status ParseMessages(const Json& v, std::vector<ChatMessage>* out) {
  if (!v.is_array()) return WrongType("messages", "an array", v);
  if (v.empty()) return InvalidField("messages", "empty: give at least one message");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!v[i].is_object()) return WrongType(field, "an object", v[i]);
    ChatMessage m;
    m.content_is_null = true;
    bool has_role = false;
    for (const auto& [key, value] : v[i].items()) {
      const std::string f = absl::StrCat(field, ".", key);
      if (key == "content") {
        if (value.is_null()) continue;
        ASSIGN_OR_RETURN(m.content, ParseContent(f, value));
        m.content_is_null = false;
        continue;
      }
      if (value.is_null()) continue;
      if (key == "role") {
        ASSIGN_OR_RETURN(m.role, GetString(f, value));
        has_role = true;
      } else if (key == "name") {
        ASSIGN_OR_RETURN(m.name, GetString(f, value));
      } else if (key == "tool_call_id") {
        ASSIGN_OR_RETURN(m.tool_call_id, GetString(f, value));
      } else if (key == "tool_calls") {
        if (!value.is_array()) return WrongType(f, "an array", value);
        for (size_t j = 0; j < value.size(); ++j) {
          ASSIGN_OR_RETURN(ChatToolCall call,
                           ParseToolCall(absl::StrCat(f, "[", j, "]"), value[j]));
          m.tool_calls.push_back(std::move(call));
        }
      } else {
        return InvalidField(f, "unknown field");
      }
    }
    if (!has_role) return InvalidField(field + ".role", "required");
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool" &&
        m.role != "developer") {
      return InvalidField(
          field + ".role",
          absl::StrCat("must be system, developer, user, assistant or tool, got \"", m.role, "\""));
    }
    // Only an assistant turn may leave its content out (its tool_calls say
    // what it did); a user, system, developer or tool message without text
    // is a client's mistake the template would render as an empty turn.
    if (m.content_is_null && m.role != "assistant") {
      return InvalidField(field + ".content",
                          absl::StrCat("required for a \"", m.role, "\" message"));
    }
    out->push_back(std::move(m));
  }
  return absl::OkStatus();
}

absl::Status ParseReplayOn(const Json& v, ced::v1::GenerateRequest* out) {
  ASSIGN_OR_RETURN(std::string s, GetString("replay_on", v));
  if (s == "prefill") {
    out->set_replay_on(ced::v1::REPLAY_ON_PREFILL);
  } else if (s == "decode") {
    out->set_replay_on(ced::v1::REPLAY_ON_DECODE);
  } else if (s == "auto") {
    out->set_replay_on(ced::v1::REPLAY_ON_AUTO);
  } else {
    return InvalidField("replay_on",
                        absl::StrCat("must be prefill, decode or auto, got \"", s, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseReplayMode(const Json& v, ced::v1::GenerateRequest* out) {
  ASSIGN_OR_RETURN(std::string s, GetString("replay_mode", v));
  if (s == "bounded") {
    out->set_replay_mode(ced::v1::REPLAY_MODE_BOUNDED);
  } else if (s == "exact") {
    out->set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
  } else {
    return InvalidField("replay_mode", absl::StrCat("must be bounded or exact, got \"", s, "\""));
  }
  return absl::OkStatus();
}

// Fields accepted only at the value that changes nothing.
absl::Status CheckNeutral(const std::string& key, const Json& v) {
  if (key == "echo") {
    if (!(v.is_boolean() && !v.get<bool>())) {
      return InvalidField(key, "is not supported (only false/null)");
    }
  } else if (key == "best_of") {
    ASSIGN_OR_RETURN(int64_t x, GetInt(key, v, 1, 1));
    (void)x;
  } else if (key == "tool_choice") {
    if (!(v.is_string() && (v == "none" || v == "auto"))) {
      return InvalidField(key, "only \"none\" and \"auto\" are supported");
    }
  } else if (key == "parallel_tool_calls") {
    ASSIGN_OR_RETURN(bool b, GetBool(key, v));
    (void)b;
  } else if (key == "response_format") {
    // Plain text is what every request gets; JSON modes would need
    // constrained decoding.
    if (!v.is_object()) return WrongType(key, "an object", v);
    const auto type = v.find("type");
    if (type == v.end() || !type->is_string() || *type != "text") {
      return InvalidField(key, "only {\"type\": \"text\"} is supported");
    }
    for (const auto& [sk, sv] : v.items()) {
      if (sk != "type") return InvalidField(absl::StrCat(key, ".", sk), "unknown field");
    }
  } else if (key == "store") {
    ASSIGN_OR_RETURN(bool b, GetBool(key, v));
    if (b) return InvalidField(key, "is not supported (only false): completions are not stored");
  } else if (key == "metadata") {
    // Kept by OpenAI with stored completions only; ignored here, as "user".
    if (!v.is_object()) return WrongType(key, "an object of strings", v);
    for (const auto& [mk, mv] : v.items()) {
      if (!mv.is_string()) return WrongType(absl::StrCat(key, ".", mk), "a string", mv);
    }
  } else if (key == "service_tier") {
    if (!(v.is_string() && (v == "auto" || v == "default"))) {
      return InvalidField(key, "only \"auto\" and \"default\" are supported");
    }
  } else if (key == "suffix") {
    ASSIGN_OR_RETURN(std::string suffix, GetString(key, v));
    if (!suffix.empty()) return InvalidField(key, "is not supported (only \"\")");
  } else {
    return InvalidField(key, "unknown field");
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseObject(std::string_view body) {
  Json doc;
  try {
    doc = Json::parse(body);
  } catch (const Json::parse_error& e) {
    return InvalidField("body", absl::StrCat("malformed JSON at byte ", e.byte));
  }
  if (!doc.is_object()) return WrongType("body", "a JSON object", doc);
  return doc;
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseRequest(Endpoint endpoint, std::string_view body) {
  ASSIGN_OR_RETURN(Json doc, ParseObject(body));
  const bool chat = endpoint == Endpoint::kChat;
  OpenAiRequest out;
  out.endpoint = endpoint;
  ced::v1::GenerateRequest& g = out.generate;
  // A text prompt gets the special tokens the tokenizer asks for (its BOS), as
  // add_special_tokens does in other OpenAI-compatible servers; "add_bos": false
  // turns that off. Chat prompts get theirs from the template.
  if (!chat) g.set_add_bos(true);
  bool has_model = false, has_prompt = false, has_messages = false;
  std::optional<int64_t> max_tokens, max_completion_tokens;
  for (const auto& [key, v] : doc.items()) {
    if (v.is_null()) continue;  // null = absent, for every field
    if (key == "model") {
      ASSIGN_OR_RETURN(out.model, GetString(key, v));
      has_model = true;
    } else if (key == "prompt" && !chat) {
      RETURN_IF_ERROR(ParsePrompt(v, &g));
      has_prompt = true;
    } else if (key == "messages" && chat) {
      RETURN_IF_ERROR(ParseMessages(v, &out.messages));
      has_messages = true;
    } else if (key == "tools" && chat) {
      if (!v.is_array()) return WrongType(key, "an array", v);
      for (const Json& tool : v) out.tools_json.push_back(tool.dump());
    } else if (key == "parallel_tool_calls" && chat) {
      ASSIGN_OR_RETURN(out.parallel_tool_calls, GetBool(key, v));
    } else if (key == "tool_choice" && chat) {
      RETURN_IF_ERROR(CheckNeutral(key, v));
      out.tool_choice_none = v == "none";
    } else if (key == "max_tokens") {
      ASSIGN_OR_RETURN(max_tokens, GetInt(key, v, 1, std::numeric_limits<int32_t>::max()));
    } else if (key == "max_completion_tokens" && chat) {
      ASSIGN_OR_RETURN(max_completion_tokens,
                       GetInt(key, v, 1, std::numeric_limits<int32_t>::max()));
    } else if (key == "temperature") {
      ASSIGN_OR_RETURN(double t, GetNumber(key, v));
      g.set_temperature(static_cast<float>(t));
    } else if (key == "top_p") {
      ASSIGN_OR_RETURN(double p, GetNumber(key, v));
      if (p <= 0) return InvalidField(key, absl::StrCat("must be in (0, 1], got ", p));
      g.set_top_p(static_cast<float>(p));
    } else if (key == "top_k") {
      ASSIGN_OR_RETURN(int64_t k, GetInt(key, v, -1, std::numeric_limits<int32_t>::max()));
      g.set_top_k(k < 0 ? 0 : static_cast<int32_t>(k));  // -1: off (vLLM's spelling)
    } else if (key == "seed") {
      out.has_seed = true;
      if (v.is_number_unsigned()) {  // up to 2^64 - 1 (ced.v1's seed is a uint64)
        g.set_seed(v.get<uint64_t>());
        continue;
      }
      ASSIGN_OR_RETURN(int64_t seed, GetInt(key, v, std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max()));
      g.set_seed(static_cast<uint64_t>(seed));
    } else if (key == "presence_penalty") {  // the range is checked with the gRPC request's
      ASSIGN_OR_RETURN(double x, GetNumber(key, v));
      g.set_presence_penalty(static_cast<float>(x));
    } else if (key == "frequency_penalty") {
      ASSIGN_OR_RETURN(double x, GetNumber(key, v));
      g.set_frequency_penalty(static_cast<float>(x));
    } else if (key == "repetition_penalty") {  // vLLM's extension
      ASSIGN_OR_RETURN(double x, GetNumber(key, v));
      g.set_repetition_penalty(static_cast<float>(x));
    } else if (key == "logit_bias") {  // {"token id": bias}; ids and ranges checked with gRPC's
      if (!v.is_object()) return WrongType(key, "an object of token id -> number", v);
      for (const auto& [id_text, bias] : v.items()) {
        int32_t id = 0;
        if (!absl::SimpleAtoi(id_text, &id)) {
          return InvalidField(key, absl::StrCat("key \"", id_text, "\" is not a token id"));
        }
        ASSIGN_OR_RETURN(double b, GetNumber(absl::StrCat(key, "[", id, "]"), bias));
        (*g.mutable_logit_bias())[id] = static_cast<float>(b);
      }
    } else if (key == "echo" && !chat) {
      ASSIGN_OR_RETURN(out.echo, GetBool(key, v));
    } else if (key == "logprobs" && chat) {  // chat: a boolean, with top_logprobs
      ASSIGN_OR_RETURN(bool b, GetBool(key, v));
      g.set_logprobs(b);
    } else if (key == "top_logprobs" && chat) {  // the range is checked with gRPC's
      ASSIGN_OR_RETURN(int64_t k, GetInt(key, v, std::numeric_limits<int32_t>::min(),
                                         std::numeric_limits<int32_t>::max()));
      g.set_top_logprobs(static_cast<int32_t>(k));
    } else if (key == "logprobs") {  // completions: how many of the most probable tokens
      if (v.is_boolean() && !v.get<bool>()) continue;  // false: off, as null
      ASSIGN_OR_RETURN(int64_t k, GetInt(key, v, 0, kMaxTopLogprobs));
      g.set_logprobs(true);
      g.set_top_logprobs(static_cast<int32_t>(k));
    } else if (key == "stop") {
      RETURN_IF_ERROR(ParseStop(v, &g));
    } else if (key == "stop_token_ids") {
      if (!v.is_array()) return WrongType(key, "an array of integers", v);
      for (size_t i = 0; i < v.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t id, GetTokenId(absl::StrCat(key, "[", i, "]"), v[i]));
        g.add_stop_token_ids(id);
      }
    } else if (key == "n") {
      ASSIGN_OR_RETURN(int64_t n, GetInt(key, v, std::numeric_limits<int64_t>::min(),
                                         std::numeric_limits<int64_t>::max()));
      if (n < 1 || n > kMaxChoices) {
        return InvalidField(key,
                            absl::StrCat("choices must be in [1, ", kMaxChoices, "], got ", n));
      }
      out.n = static_cast<int>(n);
    } else if (key == "stream") {
      ASSIGN_OR_RETURN(out.stream, GetBool(key, v));
    } else if (key == "stream_options") {
      if (!v.is_object()) return WrongType(key, "an object", v);
      for (const auto& [sk, sv] : v.items()) {
        if (sv.is_null()) continue;
        if (sk != "include_usage") return InvalidField("stream_options." + sk, "unknown field");
        ASSIGN_OR_RETURN(out.include_usage, GetBool("stream_options.include_usage", sv));
      }
    } else if (key == "user") {
      ASSIGN_OR_RETURN(std::string ignored, GetString(key, v));
      (void)ignored;
    } else if (key == "session_id") {  // a routing hint (ced.v1 GenerateRequest.session_id)
      ASSIGN_OR_RETURN(std::string session, GetString(key, v));
      g.set_session_id(std::move(session));
    } else if (key == "request_id") {
      ASSIGN_OR_RETURN(std::string id, GetString(key, v));
      g.set_request_id(std::move(id));
    } else if (key == "ignore_eos") {
      ASSIGN_OR_RETURN(bool b, GetBool(key, v));
      g.set_ignore_eos(b);
    } else if (key == "add_bos" && !chat) {
      ASSIGN_OR_RETURN(bool b, GetBool(key, v));
      g.set_add_bos(b);
    } else if (key == "replay_on") {
      RETURN_IF_ERROR(ParseReplayOn(v, &g));
    } else if (key == "replay_mode") {
      RETURN_IF_ERROR(ParseReplayMode(v, &g));
    } else {
      RETURN_IF_ERROR(CheckNeutral(key, v));
    }
  }
  if (!has_model) return InvalidField("model", "required");
  if (out.echo && g.logprobs()) {
    return InvalidField("echo", "is not supported with logprobs (it would need the prompt's)");
  }
  if (chat && !has_messages) return InvalidField("messages", "required");
  if (!chat && !has_prompt) return InvalidField("prompt", "required");
  if (out.include_usage && !out.stream) {
    return InvalidField("stream_options", "only allowed with \"stream\": true");
  }
  if (max_tokens.has_value() && max_completion_tokens.has_value() &&
      *max_tokens != *max_completion_tokens) {
    return InvalidField("max_completion_tokens", "differs from max_tokens; give one of them");
  }
  if (max_completion_tokens.has_value()) max_tokens = max_completion_tokens;
  if (max_tokens.has_value()) g.set_max_tokens(static_cast<int32_t>(*max_tokens));
  return out;
}

absl::StatusOr<TokenizeBody> ParseTokenizeRequest(std::string_view body) {
  ASSIGN_OR_RETURN(Json doc, ParseObject(body));
  TokenizeBody out;
  bool has_prompt = false;
  for (const auto& [key, v] : doc.items()) {
    if (v.is_null()) continue;
    if (key == "model") {
      ASSIGN_OR_RETURN(out.model, GetString(key, v));
    } else if (key == "prompt") {
      ASSIGN_OR_RETURN(out.prompt, GetString(key, v));
      has_prompt = true;
    } else if (key == "add_special_tokens") {
      ASSIGN_OR_RETURN(out.add_special_tokens, GetBool(key, v));
    } else if (key == "messages") {
      RETURN_IF_ERROR(ParseMessages(v, &out.messages));
      out.chat = true;
    } else if (key == "add_generation_prompt") {
      ASSIGN_OR_RETURN(out.add_generation_prompt, GetBool(key, v));
    } else if (key == "tools") {
      if (!v.is_array()) return WrongType(key, "an array", v);
      for (const Json& tool : v) out.tools_json.push_back(tool.dump());
    } else {
      return InvalidField(key, "unknown field");
    }
  }
  if (has_prompt == out.chat) {
    return InvalidField("prompt", "give exactly one of prompt and messages");
  }
  return out;
}

absl::StatusOr<DetokenizeBody> ParseDetokenizeRequest(std::string_view body) {
  ASSIGN_OR_RETURN(Json doc, ParseObject(body));
  DetokenizeBody out;
  bool has_tokens = false;
  for (const auto& [key, v] : doc.items()) {
    if (v.is_null()) continue;
    if (key == "model") {
      ASSIGN_OR_RETURN(out.model, GetString(key, v));
    } else if (key == "tokens") {
      if (!v.is_array()) return WrongType(key, "an array of token ids", v);
      for (size_t i = 0; i < v.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t id, GetTokenId(absl::StrCat(key, "[", i, "]"), v[i]));
        out.tokens.push_back(id);
      }
      has_tokens = true;
    } else {
      return InvalidField(key, "unknown field");
    }
  }
  if (!has_tokens) return InvalidField("tokens", "required");
  return out;
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

const char* ErrorType(absl::StatusCode code) {
  switch (HttpStatusOf(code)) {
    case 400:
    case 404:
    case 409:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
    case 504:
      return "service_unavailable";
    default:
      return "server_error";
  }
}

std::string ErrorCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return "model_not_found";
    case absl::StatusCode::kUnauthenticated:
      return "invalid_api_key";
    case absl::StatusCode::kResourceExhausted:
      return "rate_limit_exceeded";
    default:
      return absl::StatusCodeToString(status.code());
  }
}

Json NullOr(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

std::string Dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

OrderedJson Base(const ResponseHeader& h, bool chunk) {
  OrderedJson j;
  j["id"] = h.id;
  if (h.endpoint == Endpoint::kChat) {
    j["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  } else {
    j["object"] = "text_completion";
  }
  j["created"] = h.created;
  j["model"] = h.model;
  if (!h.system_fingerprint.empty()) j["system_fingerprint"] = h.system_fingerprint;
  return j;
}

OrderedJson UsageObject(const UsageCounts& u) {
  OrderedJson j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  if (u.cached_prompt_tokens > 0) {
    j["prompt_tokens_details"] = OrderedJson{{"cached_tokens", u.cached_prompt_tokens}};
  }
  return j;
}

}  // namespace

std::string ErrorJson(const std::string& message, const std::string& type, const std::string& param,
                      const std::string& code) {
  OrderedJson error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = NullOr(param);
  error["code"] = NullOr(code);
  OrderedJson j;
  j["error"] = std::move(error);
  return Dump(j);
}

std::string ErrorJson(const absl::Status& status) {
  return ErrorJson(std::string(status.message()), ErrorType(status.code()), FieldOf(status),
                   ErrorCode(status));
}

std::string FinishReasonName(ced::v1::FinishReason reason) {
  return reason == ced::v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

int TextLength(const std::string& bytes) {
  int n = 0;
  for (unsigned char c : ToValidUtf8(bytes)) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

OrderedJson TokenTextJson(const TokenText& t) {
  OrderedJson j;
  j["token"] = ToValidUtf8(t.bytes);
  j["logprob"] = t.logprob;
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : t.bytes) bytes.push_back(static_cast<int>(c));
  j["bytes"] = std::move(bytes);
  return j;
}

OrderedJson LogprobsJson(Endpoint endpoint, const Logprobs* logprobs) {
  if (logprobs == nullptr) return nullptr;
  if (endpoint == Endpoint::kChat) {
    OrderedJson content = OrderedJson::array();
    for (const LogprobEntry& e : logprobs->entries) {
      OrderedJson item = TokenTextJson(e.token);
      OrderedJson top = OrderedJson::array();
      for (const TokenText& t : e.top) top.push_back(TokenTextJson(t));
      item["top_logprobs"] = std::move(top);
      content.push_back(std::move(item));
    }
    OrderedJson j;
    j["content"] = std::move(content);
    j["refusal"] = nullptr;
    return j;
  }
  OrderedJson tokens = OrderedJson::array(), token_logprobs = OrderedJson::array(),
              top_logprobs = OrderedJson::array(), text_offset = OrderedJson::array();
  int offset = logprobs->text_offset;
  for (const LogprobEntry& e : logprobs->entries) {
    const std::string text = ToValidUtf8(e.token.bytes);
    tokens.push_back(text);
    token_logprobs.push_back(e.token.logprob);
    // OpenAI's: the most probable ones and the token itself (up to n + 1).
    OrderedJson top = OrderedJson::object();
    for (const TokenText& t : e.top) {
      const std::string key = ToValidUtf8(t.bytes);
      if (!top.contains(key)) top[key] = t.logprob;
    }
    if (!top.contains(text)) top[text] = e.token.logprob;
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += TextLength(e.token.bytes);
  }
  OrderedJson j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(text_offset);
  return j;
}

// OpenAI's tool_calls: [{"index"?, "id", "type": "function", "function":
// {"name", "arguments"}}].
OrderedJson ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    OrderedJson call;
    if (with_index) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = OrderedJson{{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(std::move(call));
  }
  return list;
}

}  // namespace

std::string CompletionJson(const ResponseHeader& header, const std::string& text,
                           const std::string& finish_reason, const UsageCounts& usage,
                           const Logprobs* logprobs) {
  ChoiceResult choice{text, finish_reason, std::nullopt};
  if (logprobs != nullptr) choice.logprobs = *logprobs;
  return CompletionJson(header, std::vector<ChoiceResult>{std::move(choice)}, usage);
}

std::string CompletionJson(const ResponseHeader& header, const std::vector<ChoiceResult>& choices,
                           const UsageCounts& usage) {
  OrderedJson j = Base(header, /*chunk=*/false);
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    OrderedJson choice;
    choice["index"] = i;
    if (header.endpoint == Endpoint::kChat) {
      OrderedJson message{{"role", "assistant"}, {"content", choices[i].text}};
      if (!choices[i].tool_calls.empty()) {
        if (choices[i].text.empty()) message["content"] = nullptr;
        message["tool_calls"] = ToolCallsJson(choices[i].tool_calls, /*with_index=*/false);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = choices[i].text;
    }
    choice["logprobs"] =
        LogprobsJson(header.endpoint, choices[i].logprobs ? &*choices[i].logprobs : nullptr);
    choice["finish_reason"] = choices[i].finish_reason;
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ChunkJson(const ResponseHeader& header, const std::string& text,
                      const std::string& finish_reason, bool role_only, bool with_usage_null,
                      int index, const Logprobs* logprobs) {
  OrderedJson j = Base(header, /*chunk=*/true);
  OrderedJson choice;
  choice["index"] = index;
  if (header.endpoint == Endpoint::kChat) {
    OrderedJson delta = OrderedJson::object();
    if (role_only) {
      delta["role"] = "assistant";
      delta["content"] = "";
    } else if (!text.empty()) {
      delta["content"] = text;
    }
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = LogprobsJson(header.endpoint, logprobs);
  choice["finish_reason"] = NullOr(finish_reason);
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return Dump(j);
}

std::string ToolCallsChunkJson(const ResponseHeader& header, const std::vector<ToolCall>& calls,
                               bool with_usage_null, int index, const Logprobs* logprobs) {
  OrderedJson j = Base(header, /*chunk=*/true);
  OrderedJson choice;
  choice["index"] = index;
  choice["delta"] = OrderedJson{{"tool_calls", ToolCallsJson(calls, /*with_index=*/true)}};
  choice["logprobs"] = LogprobsJson(header.endpoint, logprobs);
  choice["finish_reason"] = nullptr;
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return Dump(j);
}

std::string JsonString(const std::string& text) { return Dump(OrderedJson(text)); }

std::string UsageChunkJson(const ResponseHeader& header, const UsageCounts& usage) {
  OrderedJson j = Base(header, /*chunk=*/true);
  j["choices"] = OrderedJson::array();
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ModelsJson(const std::string& model, int64_t created, int max_model_len) {
  OrderedJson m;
  m["id"] = model;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "ced-serve";
  m["max_model_len"] = max_model_len;
  OrderedJson j;
  j["object"] = "list";
  j["data"] = OrderedJson::array({std::move(m)});
  return Dump(j);
}

}  // namespace ced::gateway::openai
