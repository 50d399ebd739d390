#include "engine/chat/chat_template.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_template.h"
#include "engine/common/status.h"
#include "nlohmann/json.hpp"

namespace ced {
namespace {

using Json = nlohmann::ordered_json;

using jinja::Value;
using jinja::ValueDict;
using jinja::ValueList;

absl::Status CheckRoles(absl::Span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role: unknown role \"", r,
                       "\" (expected system, developer, user, assistant or tool)"));
    }
  }
  return absl::OkStatus();
}

// OpenAI's "developer" role is its newer name for "system" (its client's
// examples use it); the templates of the families served know only
// "system", so that is what they see.
const std::string& TemplateRole(const std::string& role) {
  static const std::string kSystem = "system";
  return role == "developer" ? kSystem : role;
}

Value FromJson(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::Int(static_cast<int64_t>(u));
      return Value::Float(static_cast<double>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.get<double>());
    case Json::value_t::string:
      return Value::String(j.get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      for (const Json& x : j) items.push_back(FromJson(x));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      ValueDict d;
      for (const auto& [k, v] : j.items()) d.Set(k, FromJson(v));
      return Value::Dict(std::move(d));
    }
    default:
      return Value::None();
  }
}

// The messages as Hugging Face passes an OpenAI request's to the template:
// role, content (none when null), then tool_calls, tool_call_id and name
// only when present; a tool call's arguments stay the JSON text it came as.
Value MessagesValue(absl::Span<const ChatMessage> messages) {
  ValueList list;
  for (const ChatMessage& m : messages) {
    ValueDict d;
    d.Set("role", Value::String(TemplateRole(m.role)));
    d.Set("content", m.content_is_null ? Value::None() : Value::String(m.content));
    if (!m.tool_calls.empty()) {
      ValueList calls;
      for (const ChatToolCall& c : m.tool_calls) {
        ValueDict fn;
        fn.Set("name", Value::String(c.name));
        fn.Set("arguments", Value::String(c.arguments));
        ValueDict call;
        call.Set("id", Value::String(c.id));
        call.Set("type", Value::String(c.type));
        call.Set("function", Value::Dict(std::move(fn)));
        calls.push_back(Value::Dict(std::move(call)));
      }
      d.Set("tool_calls", Value::List(std::move(calls)));
    }
    if (!m.tool_call_id.empty()) d.Set("tool_call_id", Value::String(m.tool_call_id));
    if (!m.name.empty()) d.Set("name", Value::String(m.name));
    list.push_back(Value::Dict(std::move(d)));
  }
  return Value::List(std::move(list));
}

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(std::unique_ptr<jinja::Template> t, std::string origin)
      : template_(std::move(t)), origin_(std::move(origin)) {}

  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    ValueDict context;
    context.Set("messages", MessagesValue(messages));
    if (options.tools_json.empty()) {
      context.Set("tools", Value::None());
    } else {
      ValueList tools;
      for (size_t i = 0; i < options.tools_json.size(); ++i) {
        Json j = Json::parse(options.tools_json[i], nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) {
          return absl::InvalidArgumentError(absl::StrCat("tools[", i, "]: not valid JSON"));
        }
        tools.push_back(FromJson(j));
      }
      context.Set("tools", Value::List(std::move(tools)));
    }
    context.Set("documents", Value::None());
    context.Set("add_generation_prompt", Value::Bool(options.add_generation_prompt));
    if (!options.bos_token.empty()) context.Set("bos_token", Value::String(options.bos_token));
    if (!options.eos_token.empty()) context.Set("eos_token", Value::String(options.eos_token));
    absl::StatusOr<std::string> text = template_->Render(context);
    if (!text.ok() && !jinja::IsRaisedError(text.status())) {
      return absl::Status(text.status().code(),
                          absl::StrCat(origin_, ": chat template: ", text.status().message()));
    }
    return text;
  }

 private:
  std::unique_ptr<jinja::Template> template_;
  std::string origin_;
};

// The built-in template, written out by hand (no Jinja needed).
class DefaultChatTemplate final : public ChatTemplate {
 public:
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const override {
    RETURN_IF_ERROR(CheckRoles(messages));
    std::string out;
    for (const ChatMessage& m : messages)
      absl::StrAppend(&out, "<|", TemplateRole(m.role), "|>\n", m.content, "\n");
    if (options.add_generation_prompt) out += "<|assistant|>\n";
    return out;
  }
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ss.str();
}

// tokenizer_config.json spells special tokens as a string or as an
// AddedToken object {"content": ...}; null or absent: none.
absl::StatusOr<std::string> TokenString(const Json& config, const char* key,
                                        const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, " must be a string or an object with a string \"content\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source,
                                                                  std::string_view origin) {
  absl::StatusOr<std::unique_ptr<jinja::Template>> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(std::string(origin),
                                                        ": chat template: ", t.status().message()));
  }
  return std::make_unique<JinjaChatTemplate>(*std::move(t), std::string(origin));
}

std::unique_ptr<ChatTemplate> ChatTemplate::Default() {
  return std::make_unique<DefaultChatTemplate>();
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const std::string& model_dir,
                                                               const std::string& override_file,
                                                               ChatRenderOptions* options_out) {
  std::string config_template;
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (!model_dir.empty()) {
    std::ifstream probe(config_path);
    if (probe) {
      ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
      Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (config.is_discarded() || !config.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
      }
      ASSIGN_OR_RETURN(std::string bos, TokenString(config, "bos_token", config_path));
      ASSIGN_OR_RETURN(std::string eos, TokenString(config, "eos_token", config_path));
      if (options_out != nullptr) {
        options_out->bos_token = std::move(bos);
        options_out->eos_token = std::move(eos);
      }
      auto it = config.find("chat_template");
      if (it != config.end() && it->is_string()) {
        config_template = it->get<std::string>();
      } else if (it != config.end() && it->is_array()) {
        // Several named templates: Hugging Face uses the one named "default".
        for (const Json& entry : *it) {
          if (entry.is_object() && entry.value("name", "") == "default" &&
              entry.contains("template") && entry["template"].is_string()) {
            config_template = entry["template"].get<std::string>();
          }
        }
        if (config_template.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              config_path, ": chat_template is a list without a template named \"default\""));
        }
      } else if (it != config.end() && !it->is_null()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_path, ": chat_template must be a string or a list"));
      }
    }
  }
  if (!override_file.empty()) {
    ASSIGN_OR_RETURN(std::string source, ReadFile(override_file));
    // An empty template is valid Jinja, but it renders every conversation to
    // an empty prompt: a wrong file, not a template.
    if (source.find_first_not_of(" \t\r\n") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(override_file, ": the chat template file is empty"));
    }
    return ChatTemplate::Parse(source, override_file);
  }
  if (!model_dir.empty()) {
    // Newer Hugging Face checkpoints keep the template in its own file.
    const std::string jinja_path = model_dir + "/chat_template.jinja";
    std::ifstream probe(jinja_path);
    if (probe) {
      ASSIGN_OR_RETURN(std::string source, ReadFile(jinja_path));
      return ChatTemplate::Parse(source, jinja_path);
    }
  }
  if (!config_template.empty()) return ChatTemplate::Parse(config_template, config_path);
  return ChatTemplate::Default();
}

}  // namespace ced
