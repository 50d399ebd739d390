// The OpenAI-compatible API on a real `ced cluster` (router, gateway,
// prefill and decode workers as processes on loopback), driven by the
// official `openai` npm client and by `curl -N`: the streamed text equals the
// non-streamed text equals the gRPC API's text for the same request and seed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "services/common/subprocess.h"
#include "tests/common/missing_tool.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/gateway_http/node_client.h"

namespace ced::testing {
namespace {

using ced::gateway::testing::HaveCommand;
using ced::gateway::testing::Quote;
using ced::gateway::testing::Shell;
using ced::gateway::testing::SourceDir;
using Json = nlohmann::json;

// The text of a gRPC Generate with the sampling the clients use.
std::string GrpcText(const std::string& gateway, const std::string& prompt,
                     float presence_penalty = 0.0f, float frequency_penalty = 0.0f,
                     uint64_t seed = 42, bool add_bos = true) {
  ced::v1::GenerateRequest req;
  req.set_presence_penalty(presence_penalty);
  req.set_frequency_penalty(frequency_penalty);
  req.set_prompt(prompt);
  // True: what /v1/completions does with a text prompt by default; a chat
  // prompt has what its template renders.
  req.set_add_bos(add_bos);
  req.set_max_tokens(12);
  req.set_temperature(0.8f);
  req.set_seed(seed);
  req.set_ignore_eos(true);
  const GenResult r = Generate(gateway, req);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.usage().completion_tokens(), 12);
  return r.text;
}

class OpenAiClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(MakeModelDir("tiny"));
    cluster_ = new LocalCluster(*model_dir_, {});
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete model_dir_;
  }
  std::string Http() {
    const auto& gateway = cluster_->addresses().at("gateway");
    auto it = gateway.find("http");
    return it == gateway.end() ? "" : it->second;
  }
  static std::string Model() { return std::filesystem::path(*model_dir_).filename().string(); }
  std::string Grpc() { return cluster_->gateway(); }

  static std::string* model_dir_;
  static LocalCluster* cluster_;
};
std::string* OpenAiClusterTest::model_dir_ = nullptr;
LocalCluster* OpenAiClusterTest::cluster_ = nullptr;

TEST_F(OpenAiClusterTest, OfficialOpenAiClientGetsTheGrpcText) {
  const std::string modules = SourceDir() + "/tests/node/node_modules";
  if (!HaveCommand("node")) CED_SKIP_OR_FAIL_WHEN_MISSING("node");
  if (!std::ifstream(modules + "/openai/index.mjs")) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("the openai npm package (tests/node/node_modules)");
  }
  ASSERT_FALSE(Http().empty()) << "the cluster's gateway has no http= address";
  int status = -1;
  const std::string model = Model();
  const std::string out =
      Shell(absl::StrCat("node ", Quote(SourceDir() + "/tests/gateway_http/openai_client.mjs"), " ",
                         Quote(modules), " ", Quote("http://" + Http() + "/v1"), " ", Quote(model)),
            &status);
  ASSERT_EQ(status, 0) << out;
  const Json j = Json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;

  const std::string expected = GrpcText(Grpc(), "The quick brown fox");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(j["completion"]["text"], expected) << out;
  EXPECT_EQ(j["completion"]["object"], "text_completion");
  EXPECT_EQ(j["completion"]["finish_reason"], "length");
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["completion_stream"]["text"], expected) << out;
  EXPECT_EQ(j["completion_stream"]["usage"]["completion_tokens"], 12) << out;
  const Json& reasons = j["completion_stream"]["finish_reasons"];
  ASSERT_FALSE(reasons.empty());
  for (size_t i = 0; i + 1 < reasons.size(); ++i) EXPECT_TRUE(reasons[i].is_null()) << out;
  EXPECT_EQ(reasons.back(), "length");
  // The client's penalty fields reach the sampler as gRPC's do.
  const std::string penalized = GrpcText(Grpc(), "The quick brown fox", 0.5f, 1.2f);
  EXPECT_NE(penalized, expected) << "the penalties change nothing here: the check tests nothing";
  EXPECT_EQ(j["completion_penalties"]["text"], penalized) << out;

  // Chat: the model's (built-in) template renders the messages.
  std::vector<ChatMessage> messages(2);
  messages[0].role = "system";
  messages[0].content = "Be brief.";
  messages[1].role = "user";
  messages[1].content = "Say hi";
  ChatRenderOptions options;
  auto chat_template = LoadChatTemplate(*model_dir_, "", &options);
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  auto rendered = (*chat_template)->Render(messages, options);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  const std::string chat_expected = GrpcText(Grpc(), *rendered, 0, 0, 42, /*add_bos=*/false);
  EXPECT_EQ(j["chat"]["text"], chat_expected) << out;
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_EQ(j["chat"]["finish_reason"], "length");
  EXPECT_EQ(j["chat_stream"]["text"], chat_expected) << out;
  EXPECT_EQ(j["chat_stream"]["role"], "assistant");
  EXPECT_EQ(j["chat_stream"]["finish_reasons"].back(), "length");
  EXPECT_EQ(j["chat_developer"]["text"], chat_expected) << out;

  EXPECT_EQ(j["unknown_model"]["status"], 404) << out;
  EXPECT_EQ(j["unknown_model"]["code"], "model_not_found") << out;
  EXPECT_EQ(j["n_too_many"]["status"], 400) << out;
  EXPECT_EQ(j["n_too_many"]["param"], "n") << out;
  // n = 2: choice i samples with seed + i, as two requests with those seeds do.
  EXPECT_EQ(j["two_choices"]["indexes"], Json::array({0, 1})) << out;
  EXPECT_EQ(j["two_choices"]["texts"][0], expected) << out;
  EXPECT_EQ(j["two_choices"]["texts"][1], GrpcText(Grpc(), "The quick brown fox", 0, 0, 43)) << out;
  EXPECT_EQ(j["two_choices"]["usage"]["completion_tokens"], 24) << out;
  EXPECT_EQ(j["models"], Json::array({model})) << out;

  // Logprobs: the gRPC API's for the same prompt and sampling.
  auto grpc_logprobs = [this](const std::string& prompt, bool add_bos) {
    ced::v1::GenerateRequest req;
    req.set_prompt(prompt);
    req.set_add_bos(add_bos);
    req.set_max_tokens(12);
    req.set_temperature(0.8f);
    req.set_seed(42);
    req.set_ignore_eos(true);
    req.set_logprobs(true);
    req.set_top_logprobs(2);
    GenResult r = Generate(Grpc(), req);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.logprobs.size(), 12u);
    return r;
  };
  const GenResult chat_grpc = grpc_logprobs(*rendered, false);  // the template has the BOS
  EXPECT_EQ(j["chat_logprobs"]["text"], chat_expected) << out;
  const Json& content = j["chat_logprobs"]["content"];
  ASSERT_EQ(content.size(), chat_grpc.logprobs.size()) << out;
  EXPECT_EQ(j["chat_logprobs_stream"]["content"], content) << out;
  for (size_t i = 0; i < content.size(); ++i) {
    const ced::v1::StepLogprobs& want = chat_grpc.logprobs[i];
    EXPECT_NEAR(content[i]["logprob"].get<double>(), want.token().logprob(), 1e-6) << i;
    if (want.token().token_id() < 256) {
      EXPECT_EQ(content[i]["bytes"], Json::array({want.token().token_id()})) << i;
    }
    ASSERT_EQ(content[i]["top"].size(), 2u) << out;
    for (int k = 0; k < 2; ++k) {
      EXPECT_NEAR(content[i]["top"][k]["logprob"].get<double>(), want.top(k).logprob(), 1e-6);
    }
  }
  const GenResult completion_grpc = grpc_logprobs("The quick brown fox", true);
  const Json& lp = j["completion_logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 12u) << out;
  ASSERT_EQ(lp["tokens"].size(), 12u) << out;
  ASSERT_EQ(lp["top_logprobs"].size(), 12u) << out;
  EXPECT_EQ(lp["text_offset"][0], 0) << out;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(),
                completion_grpc.logprobs[i].token().logprob(), 1e-6)
        << i;
    // The two most probable and the token itself.
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u) << out;
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u) << out;
  }
}

// n > 1: choice 0 runs first, the others once it has its first token, so
// they find the prompt in the workers' prefix caches instead of computing it
// again each.
TEST_F(OpenAiClusterTest, SeveralChoicesComputeThePromptOnce) {
  if (!HaveCommand("curl")) CED_SKIP_OR_FAIL_WHEN_MISSING("curl");
  ASSERT_FALSE(Http().empty());
  auto hits = [this] {
    double total = 0;
    for (const char* worker : {"prefill-0", "decode-0"}) {
      total += ScrapeMetric(cluster_->addresses().at(worker).at("metrics"),
                            "ced_prefix_cache_hit_tokens_total")
                   .value_or(-1e9);
    }
    return total;
  };
  const double before = hits();
  ASSERT_GE(before, 0) << "no ced_prefix_cache_hit_tokens_total on a worker";
  std::string ids;
  for (int i = 0; i < 200; ++i) absl::StrAppend(&ids, i == 0 ? "" : ",", 3 + (i * 97 + 11) % 250);
  const std::string body =
      absl::StrCat(R"({"model": ")", Model(), R"(", "prompt": [)", ids,
                   R"(], "max_tokens": 4, "n": 4, "temperature": 0.8, "seed": 5,
                   "ignore_eos": true})");
  int status = -1;
  const std::string out =
      Shell(absl::StrCat("curl -sS --max-time 60 -X POST -H 'Content-Type: application/json' -d ",
                         Quote(body), " http://", Http(), "/v1/completions"),
            &status);
  ASSERT_EQ(status, 0) << out;
  const Json j = Json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["choices"].size(), 4u) << out;
  EXPECT_EQ(j["usage"]["prompt_tokens"], 200) << out;
  EXPECT_EQ(j["usage"]["completion_tokens"], 16) << out;
  // Choices 1-3 each found at least the prompt's whole blocks cached (a
  // block is at most 64 tokens here) on one of the workers.
  EXPECT_GE(hits() - before, 3 * (200 - 64)) << out;
}

TEST_F(OpenAiClusterTest, CurlStreamsServerSentEvents) {
  if (!HaveCommand("curl")) CED_SKIP_OR_FAIL_WHEN_MISSING("curl");
  ASSERT_FALSE(Http().empty());
  const std::string body =
      "{\"model\": \"" + Model() +
      R"(", "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0.8,
          "seed": 42, "ignore_eos": true, "stream": true,
          "stream_options": {"include_usage": true}})";
  int status = -1;
  const std::string out =
      Shell(absl::StrCat("curl -sSN --max-time 60 -X POST -H 'Content-Type: application/json' -d ",
                         Quote(body), " http://", Http(), "/v1/completions"),
            &status);
  ASSERT_EQ(status, 0) << out;
  ASSERT_TRUE(absl::EndsWith(out, "data: [DONE]\n\n")) << out;
  std::string text;
  int usage_chunks = 0;
  for (absl::string_view event : absl::StrSplit(out, "\n\n", absl::SkipEmpty())) {
    ASSERT_TRUE(absl::StartsWith(event, "data: ")) << out;
    if (event == "data: [DONE]") continue;
    const Json chunk = Json::parse(event.substr(6), nullptr, false);
    ASSERT_FALSE(chunk.is_discarded()) << event;
    if (chunk["choices"].empty()) {
      ++usage_chunks;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 12);
      continue;
    }
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(usage_chunks, 1) << out;
  EXPECT_EQ(text, GrpcText(Grpc(), "The quick brown fox"));

  // The same request not streamed: one JSON body with the same text.
  const std::string whole =
      Shell(absl::StrCat(
                "curl -sS --max-time 60 -X POST -H 'Content-Type: application/json' -d ",
                Quote(absl::StrCat(R"({"model": ")", Model(), R"(", "prompt": "The quick brown fox",
                                          "max_tokens": 12, "temperature": 0.8, "seed": 42,
                                          "ignore_eos": true})")),
                " http://", Http(), "/v1/completions"),
            &status);
  const Json j = Json::parse(whole, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << whole;
  EXPECT_EQ(j["choices"][0]["text"], text);
  // Errors keep OpenAI's shape through curl too.
  const std::string error = Shell(
      absl::StrCat("curl -sS -o - -w '\\n%{http_code}' -X POST -H 'Content-Type: application/json' "
                   "-d '{\"model\": \"",
                   Model(), "\", \"prompt\": \"x\", \"bogus\": 1}' http://", Http(),
                   "/v1/completions"),
      &status);
  EXPECT_TRUE(absl::EndsWith(error, "\n400")) << error;
  EXPECT_NE(error.find(R"("param":"bogus")"), std::string::npos) << error;
}

}  // namespace
}  // namespace ced::testing
