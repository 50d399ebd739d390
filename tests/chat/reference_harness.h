// Shared by the tests that compare our chat-template rendering with Python's
// Jinja2 (tests/chat/render_reference.py, run by /usr/bin/python3 with the
// environment Hugging Face transformers uses).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/missing_tool.h"

namespace ced::testing {

inline std::string SourceDir() {
  const char* env = std::getenv("CED_SOURCE_DIR");
  return env != nullptr ? env : CED_SOURCE_DIR_DEFAULT;
}

inline bool PythonJinjaAvailable() {
  return std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RenderCase {
  std::string label;  // for failure messages
  std::string template_source;
  std::vector<ChatMessage> messages;
  ChatRenderOptions options;
};

struct ReferenceResult {
  bool ok = false;
  std::string text;     // ok
  std::string message;  // !ok
  bool raised = false;  // !ok: raise_exception()
  std::string error;    // !ok: Python exception type
};

inline nlohmann::json MessageJson(const ChatMessage& m) {
  nlohmann::json j = {
      {"role", m.role}, {"content", m.content}, {"content_is_null", m.content_is_null}};
  nlohmann::json calls = nlohmann::json::array();
  for (const ChatToolCall& c : m.tool_calls) {
    calls.push_back({{"id", c.id}, {"type", c.type}, {"name", c.name}, {"arguments", c.arguments}});
  }
  j["tool_calls"] = calls;
  j["tool_call_id"] = m.tool_call_id;
  j["name"] = m.name;
  return j;
}

// Renders every case with render_reference.py in one Python process.
inline std::vector<ReferenceResult> RenderWithPython(const std::vector<RenderCase>& cases) {
  nlohmann::json in = {{"cases", nlohmann::json::array()}};
  for (const RenderCase& c : cases) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : c.messages) messages.push_back(MessageJson(m));
    in["cases"].push_back({{"template", c.template_source},
                           {"messages", messages},
                           {"add_generation_prompt", c.options.add_generation_prompt},
                           {"bos_token", c.options.bos_token},
                           {"eos_token", c.options.eos_token},
                           {"tools_json", c.options.tools_json}});
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ced_chat_ref_" + std::to_string(::getpid()) + "_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  const std::string in_path = (dir / "cases.json").string();
  const std::string out_path = (dir / "out.json").string();
  std::ofstream(in_path) << in.dump();
  const std::string cmd = "/usr/bin/python3 " + SourceDir() + "/tests/chat/render_reference.py " +
                          in_path + " " + out_path;
  std::vector<ReferenceResult> results;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "render_reference.py failed: " << cmd;
    return results;
  }
  const nlohmann::json out = nlohmann::json::parse(ReadText(out_path));
  for (const auto& r : out) {
    ReferenceResult rr;
    rr.ok = r.at("ok").get<bool>();
    if (rr.ok) {
      rr.text = r.at("text").get<std::string>();
    } else {
      rr.message = r.at("message").get<std::string>();
      rr.error = r.at("error").get<std::string>();
      rr.raised = r.at("raised").get<bool>();
    }
    results.push_back(std::move(rr));
  }
  std::filesystem::remove_all(dir);
  return results;
}

// "" when equal, else where they first differ with context.
inline std::string FirstDifference(const std::string& ours, const std::string& ref) {
  if (ours == ref) return "";
  size_t i = 0;
  while (i < ours.size() && i < ref.size() && ours[i] == ref[i]) ++i;
  auto context = [i](const std::string& s) {
    const size_t b = i >= 40 ? i - 40 : 0;
    return nlohmann::json(s.substr(b, 80))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::ostringstream os;
  os << "first difference at byte " << i << " (ours " << ours.size() << " bytes, Jinja2 "
     << ref.size() << " bytes)\n  ours:   ..." << context(ours) << "\n  Jinja2: ..."
     << context(ref);
  return os.str();
}

// Renders every case with our engine and compares with Jinja2's output.
inline void ExpectSameAsJinja2(const std::vector<RenderCase>& cases) {
  const std::vector<ReferenceResult> ref = RenderWithPython(cases);
  ASSERT_EQ(ref.size(), cases.size());
  int rendered = 0, failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const RenderCase& c = cases[i];
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::unique_ptr<ChatTemplate>> t =
        ChatTemplate::Parse(c.template_source, c.label);
    absl::StatusOr<std::string> ours =
        t.ok() ? (*t)->Render(c.messages, c.options) : absl::StatusOr<std::string>(t.status());
    if (ref[i].ok) {
      ASSERT_TRUE(ours.ok()) << "Jinja2 renders it, we fail: " << ours.status();
      const std::string diff = FirstDifference(*ours, ref[i].text);
      EXPECT_TRUE(diff.empty()) << diff;
      ++rendered;
    } else {
      EXPECT_FALSE(ours.ok()) << "Jinja2 fails (" << ref[i].error << ": " << ref[i].message
                              << "), we render: " << nlohmann::json(*ours).dump();
      if (ref[i].raised && !ours.ok()) {
        EXPECT_EQ(ours.status().message(), ref[i].message);
      }
      ++failed;
    }
  }
  std::printf("%zu cases: %d rendered identically, %d fail in both\n", cases.size(), rendered,
              failed);
  EXPECT_GT(rendered, 0);
}

}  // namespace ced::testing
