// Chat templates: OpenAI-style `messages` rendered to a prompt string.
//
// A ChatTemplate is a parsed Jinja template (the `chat_template` of a Hugging
// Face tokenizer_config.json, or a file given with --chat-template), rendered
// by our own engine for the subset of Jinja these templates use. Rendering is
// byte-for-byte what Python's Jinja2 produces for the same template and
// inputs (tests/chat checks this). A template using a construct outside the
// subset fails at Parse() with InvalidArgument naming the construct and its
// line. Immutable after Parse(); Render() is safe to call from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ced {

// A tool call made by an assistant message (OpenAI's `tool_calls[i]`).
struct ChatToolCall {
  std::string id;
  std::string type = "function";
  std::string name;       // function.name
  std::string arguments;  // function.arguments, a JSON text
};

struct ChatMessage {
  // "system", "developer" (rendered as "system"), "user", "assistant" or "tool"
  std::string role;
  std::string content;
  // True when the client sent `"content": null` (or none at all), typical of
  // assistant messages carrying tool_calls: the template then sees `none`
  // instead of a string (DeepSeek-V3's template renders tool calls only for
  // `content is none`; Qwen3's fails on none, as it does under Hugging Face).
  bool content_is_null = false;
  std::vector<ChatToolCall> tool_calls;  // assistant messages only
  std::string tool_call_id;              // tool messages only
  std::string name;                      // optional
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // Special-token strings the template refers to (tokenizer_config.json's
  // bos_token / eos_token); empty when the tokenizer has none.
  std::string bos_token;
  std::string eos_token;
  // Tool definitions (OpenAI's `tools`, each a JSON object text); empty: none.
  std::vector<std::string> tools_json;
};

class ChatTemplate {
 public:
  // Parses `source` (Jinja text). `origin` names it in errors (a path or
  // "tokenizer_config.json").
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source,
                                                             std::string_view origin);

  // The built-in template for models without one (synthetic models, byte
  // tokenizer): "<|role|>\ncontent\n" per message, then "<|assistant|>\n" when
  // a generation prompt is asked for.
  static std::unique_ptr<ChatTemplate> Default();

  virtual ~ChatTemplate() = default;

  // InvalidArgument naming the field (e.g. "messages[2].role") for input the
  // template cannot render, or the error a template raises itself
  // (raise_exception) as its message.
  // Template variables, as transformers' apply_chat_template passes them:
  // `messages` (role, content, and tool_calls [{id, type, function: {name,
  // arguments (the JSON text as sent)}}], tool_call_id, name when non-empty),
  // `tools` (parsed tools_json; none when empty; "tools[i]" errors),
  // `documents` (none), `add_generation_prompt`, and `bos_token`/`eos_token`
  // when non-empty. Other render errors: InvalidArgument "<origin>: chat
  // template: line N: ..."; ResourceExhausted past the output/step limits.
  virtual absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                             const ChatRenderOptions& options) const = 0;
};

// The chat template of the model in `model_dir`: `override_file` when given
// (a Jinja file), else tokenizer_config.json's `chat_template` when present
// (with its bos/eos token strings filled into `options_out`), else Default().
// Errors name the file.
// Also: `model_dir/chat_template.jinja` (newer Hugging Face checkpoints) is
// used before tokenizer_config.json's field; a list-valued `chat_template`
// uses the entry named "default"; bos/eos are filled from
// tokenizer_config.json whenever it exists (also with `override_file`);
// `options_out` may be null.
absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const std::string& model_dir,
                                                               const std::string& override_file,
                                                               ChatRenderOptions* options_out);

}  // namespace ced
