// ChatTemplate: the built-in template, input validation, and loading from a
// model directory (tokenizer_config.json, chat_template.jinja, --chat-template).
#include "engine/chat/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ced {
namespace {

ChatMessage Msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("ced_chat_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(ChatTemplateTest, DefaultTemplate) {
  std::unique_ptr<ChatTemplate> t = ChatTemplate::Default();
  ChatRenderOptions options;
  EXPECT_EQ(*t->Render({Msg("system", "S"), Msg("user", "Hi")}, options),
            "<|system|>\nS\n<|user|>\nHi\n<|assistant|>\n");
  options.add_generation_prompt = false;
  EXPECT_EQ(*t->Render({Msg("user", "Hi"), Msg("assistant", "Yo")}, options),
            "<|user|>\nHi\n<|assistant|>\nYo\n");
}

TEST(ChatTemplateTest, UnknownRoleIsNamed) {
  std::vector<std::unique_ptr<ChatTemplate>> templates;
  templates.push_back(ChatTemplate::Default());
  templates.push_back(*ChatTemplate::Parse("{{ messages | length }}", "test"));
  for (const auto& t : templates) {
    absl::StatusOr<std::string> r = t->Render({Msg("user", "a"), Msg("robot", "b")}, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("messages[1].role"), std::string::npos) << r.status();
  }
}

// OpenAI's "developer" messages (its client's README starts with one) reach
// every template as "system", the role the served families' templates know.
TEST(ChatTemplateTest, DeveloperRendersAsSystem) {
  ChatRenderOptions options;
  EXPECT_EQ(*ChatTemplate::Default()->Render({Msg("developer", "D"), Msg("user", "Hi")}, options),
            "<|system|>\nD\n<|user|>\nHi\n<|assistant|>\n");
  auto t = ChatTemplate::Parse(
      "{% if messages[0].role == 'system' %}[sys:{{ messages[0].content }}]{% endif %}"
      "{% for m in messages %}{{ m.role }};{% endfor %}",
      "inline");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Render({Msg("developer", "D"), Msg("user", "Hi")}, options),
            "[sys:D]system;user;");
}

TEST(ChatTemplateTest, InputsReachTheTemplate) {
  auto t = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content is none }}:"
      "{{ m.tool_calls[0].function.arguments if m.tool_calls else '' }}:{{ m.tool_call_id }};"
      "{% endfor %}{{ tools[0].name if tools else 'no tools' }}{{ eos_token }}{{ "
      "add_generation_prompt }}",
      "inline");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatMessage call = Msg("assistant", "");
  call.content_is_null = true;
  call.tool_calls.push_back(ChatToolCall{"c1", "function", "f", "{\"a\": 1}"});
  ChatMessage result = Msg("tool", "r");
  result.tool_call_id = "c1";
  ChatRenderOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  EXPECT_EQ(*(*t)->Render({Msg("user", "q"), call, result}, options),
            "<s>user:False::;assistant:True:{\"a\": 1}:;tool:False::c1;no tools</s>True");
  options.tools_json = {R"({"name": "lookup"})"};
  options.add_generation_prompt = false;
  EXPECT_EQ(*(*t)->Render({}, options), "<s>lookup</s>False");
  options.tools_json = {"{not json"};
  absl::StatusOr<std::string> r = (*t)->Render({}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tools[0]"), std::string::npos) << r.status();
}

TEST(ChatTemplateTest, ErrorsNameTheOrigin) {
  auto t = ChatTemplate::Parse("x\n{% include 'y' %}", "my_template.jinja");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("my_template.jinja"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status();
  t = ChatTemplate::Parse("{{ messages[0].content.x.y }}", "cfg");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> r = (*t)->Render({Msg("user", "a")}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cfg: chat template: line 1: "), std::string::npos)
      << r.status();
  // A template's own raise_exception message is returned as it is.
  t = ChatTemplate::Parse("{{ raise_exception('Only user and assistant roles') }}", "cfg");
  r = (*t)->Render({}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "Only user and assistant roles");
}

TEST(ChatTemplateTest, LoadFromTokenizerConfig) {
  TempDir dir;
  dir.Write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<bos>", "lstrip": false},
    "eos_token": "<eos>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"})");
  ChatRenderOptions options;
  auto t = LoadChatTemplate(dir.path(), "", &options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(options.bos_token, "<bos>");
  EXPECT_EQ(options.eos_token, "<eos>");
  EXPECT_EQ(*(*t)->Render({Msg("user", "a")}, options), "<bos>[a]<eos>");

  // --chat-template overrides; the token strings still come from the config.
  const std::string override_file =
      dir.Write("override.jinja", "O{{ messages | length }}{{ eos_token }}\n");
  options = ChatRenderOptions();
  t = LoadChatTemplate(dir.path(), override_file, &options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Render({Msg("user", "a")}, options), "O1<eos>");

  // chat_template.jinja beside the config wins over the config's field.
  dir.Write("chat_template.jinja", "J");
  t = LoadChatTemplate(dir.path(), "", &options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Render({}, options), "J");
}

TEST(ChatTemplateTest, LoadNamedTemplateListAndDefault) {
  TempDir dir;
  dir.Write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  ChatRenderOptions options;
  auto t = LoadChatTemplate(dir.path(), "", &options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Render({}, options), "D");
  EXPECT_EQ(options.bos_token, "");

  TempDir empty;
  t = LoadChatTemplate(empty.path(), "", &options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Render({Msg("user", "x")}, options), "<|user|>\nx\n<|assistant|>\n");
}

TEST(ChatTemplateTest, LoadErrorsNameTheFile) {
  TempDir dir;
  dir.Write("tokenizer_config.json", "{broken");
  ChatRenderOptions options;
  auto t = LoadChatTemplate(dir.path(), "", &options);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer_config.json"), std::string::npos) << t.status();

  dir.Write("tokenizer_config.json", R"({"chat_template": "{% for %}"})");
  t = LoadChatTemplate(dir.path(), "", &options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("tokenizer_config.json"), std::string::npos) << t.status();

  t = LoadChatTemplate(dir.path(), dir.path() + "/missing.jinja", &options);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("missing.jinja"), std::string::npos) << t.status();

  // An empty --chat-template file (or only whitespace) is refused, naming it.
  for (const char* text : {"", " \n\t\n"}) {
    const std::string empty_file = dir.Write("empty.jinja", text);
    t = LoadChatTemplate(dir.path(), empty_file, &options);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("empty.jinja: the chat template file is empty"),
              std::string::npos)
        << t.status();
  }
}

}  // namespace
}  // namespace ced
