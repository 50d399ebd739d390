// Tool calls in a chat model's output: the text a model writes when it calls
// a function, in its family's format, split into OpenAI's `tool_calls`.
//
//   hermes (Qwen2.5/Qwen3, Hermes):
//     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (repeated)
//   deepseek_v3 (DeepSeek-V3):
//     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
//     <｜tool▁call▁end｜>... <｜tool▁calls▁end｜>
//
// The text before the first call is the message's content. A call that does
// not parse (no closing marker, arguments that are not a JSON object, no
// name) leaves the whole text as content, as other servers do: the client
// sees what the model wrote. Pure functions and a per-response streamer; not
// thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/chat_template.h"

namespace ced::gateway::openai {

enum class ToolCallFormat { kNone, kHermes, kDeepSeekV3 };

// "none", "hermes", "deepseek_v3" (the names vLLM's --tool-call-parser uses).
absl::StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);

// The format a chat template writes an assistant's tool call in, seen by
// rendering one (kNone when it writes neither format or cannot render it).
ToolCallFormat DetectToolCallFormat(const ChatTemplate& chat_template,
                                    const ChatRenderOptions& options);

struct ToolCall {
  std::string id;  // "call_<prefix>_<i>"
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedOutput {
  std::string content;  // the text before the calls (all of it when none parsed)
  std::vector<ToolCall> calls;
};

// Splits a whole output. Ids are "call_" + id_prefix + "_" + index.
ParsedOutput ParseToolCalls(ToolCallFormat format, const std::string& text,
                            const std::string& id_prefix);

// One response's tool calls. Streaming: text deltas in, content deltas out;
// from the first call marker on (and while the text ends with what may be
// the start of one) the text is held, and Finish() parses what was held.
// Whole: Parse(). `parallel` false keeps the first call only (OpenAI's
// parallel_tool_calls).
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::string id_prefix, bool parallel = true)
      : format_(format), id_prefix_(std::move(id_prefix)), parallel_(parallel) {}
  // The content that may be sent now.
  std::string Feed(const std::string& text);
  // At the end: the content still held (text after a marker that did not
  // parse as calls, or a marker's prefix) and the calls.
  ParsedOutput Finish();
  // A whole output (nothing fed): ParseToolCalls with this stream's format,
  // ids and `parallel`.
  ParsedOutput Parse(const std::string& text) const;
  bool in_call() const { return in_call_; }

 private:
  const ToolCallFormat format_;
  const std::string id_prefix_;
  const bool parallel_;
  bool in_call_ = false;
  std::string held_;
};

}  // namespace ced::gateway::openai
