// The gateway's OpenAI HTTP API in process, against a real router and the
// fake worker services: response and SSE shapes, stop strings across chunks,
// error shapes and statuses, and a client that hangs up cancelling its work.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "services/common/grpc_util.h"
#include "services/gateway/gateway_server.h"
#include "services/router/router_server.h"
#include "tests/common/missing_tool.h"
#include "tests/gateway/fake_workers.h"
#include "tests/gateway/gateway_test_util.h"
#include "tests/gateway_http/node_client.h"

namespace ced::gateway {
namespace {

using ced::internal::FINISH_REASON_LENGTH;
using ced::internal::FINISH_REASON_STOP;
using Json = nlohmann::json;
using testing::Chunk;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;

struct Reply {
  int status = 0;
  httplib::Headers headers;
  std::string body;
  Json json;  // body parsed (discarded when not JSON)
};

// The events of an SSE body: every event is "data: <payload>\n\n".
struct Events {
  std::vector<Json> chunks;
  bool done = false;        // ended with data: [DONE]
  bool well_formed = true;  // every event framed as above, nothing after [DONE]
  std::string text;         // concatenated choices[0].text / delta.content
};

Events ParseEvents(const std::string& body) {
  Events e;
  if (!absl::EndsWith(body, "\n\n")) e.well_formed = false;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (e.done || !absl::StartsWith(event, "data: ")) {
      e.well_formed = false;
      continue;
    }
    const std::string payload(event.substr(6));
    if (payload == "[DONE]") {
      e.done = true;
      continue;
    }
    Json j = Json::parse(payload, nullptr, false);
    if (j.is_discarded()) {
      e.well_formed = false;
      continue;
    }
    if (j.contains("choices") && !j["choices"].empty()) {
      const Json& c = j["choices"][0];
      if (c.contains("text")) e.text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) {
        e.text += c["delta"]["content"].get<std::string>();
      }
    }
    e.chunks.push_back(std::move(j));
  }
  return e;
}

bool WaitForMetric(GatewayServer* gateway, const std::string& line) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    if (gateway->MetricsText().find(line) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

class OpenAiHttpTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start(std::function<void(GatewayServerOptions*)> tweak = nullptr, bool workers = true) {
    router::RouterServerOptions ro;
    ro.heartbeat_timeout = absl::Seconds(600);
    auto router = router::RouterServer::Start(ro);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = std::move(*router);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&decode_);
    builder.RegisterService(&prefill_);
    workers_ = builder.BuildAndStart();
    ASSERT_NE(workers_, nullptr);
    const std::string address = absl::StrCat("127.0.0.1:", port);
    if (workers) {
      auto stub = ced::internal::Router::NewStub(services::MakeChannel(router_->grpc_address()));
      ASSERT_TRUE(RegisterWorker(stub.get(), PrefillInfo(address)).ok());
      ASSERT_TRUE(RegisterWorker(stub.get(), DecodeInfo(address)).ok());
    }
    GatewayServerOptions go = TestGatewayOptions(router_->grpc_address());
    go.http_address = "127.0.0.1:0";
    if (tweak) tweak(&go);
    auto gateway = GatewayServer::Start(go);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = std::move(*gateway);
    ASSERT_FALSE(gateway_->http_address().empty());
  }

  void TearDown() override {
    if (gateway_ != nullptr) gateway_->Shutdown();
    if (workers_ != nullptr) workers_->Shutdown(std::chrono::system_clock::now());
  }

  void ScriptHello() {
    decode_.SetScript({grpc::Status::OK,
                       {Chunk(0, "He"), Chunk(2, "llo", FINISH_REASON_LENGTH)},
                       /*hold_open=*/false});
    prefill_.SetScript({'H', true, true, false, grpc::Status::OK});
  }

  std::unique_ptr<httplib::Client> Client() {
    auto client = std::make_unique<httplib::Client>("http://" + gateway_->http_address());
    client->set_read_timeout(20, 0);
    return client;
  }

  Reply Post(const std::string& path, const std::string& body,
             const httplib::Headers& headers = {}) {
    Reply reply;
    auto result = Client()->Post(path.c_str(), headers, body, "application/json");
    if (!result) return reply;
    reply.status = result->status;
    reply.headers = result->headers;
    reply.body = result->body;
    reply.json = Json::parse(reply.body, nullptr, false);
    return reply;
  }

  Reply Get(const std::string& path, const httplib::Headers& headers = {}) {
    Reply reply;
    auto result = Client()->Get(path.c_str(), headers);
    if (!result) return reply;
    reply.status = result->status;
    reply.headers = result->headers;
    reply.body = result->body;
    reply.json = Json::parse(reply.body, nullptr, false);
    return reply;
  }

  // A 4xx/5xx in OpenAI's shape; returns error.param (or "null").
  static std::string ExpectError(const Reply& r, int status) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_TRUE(r.json.is_object() && r.json.contains("error")) << r.body;
    if (!r.json.is_object() || !r.json.contains("error")) return "";
    const Json& e = r.json["error"];
    for (const char* key : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(e.contains(key)) << key << " missing: " << r.body;
    }
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    return e["param"].is_string() ? e["param"].get<std::string>() : "null";
  }

  FakeDecodeWorker decode_;
  FakePrefillWorker prefill_;
  std::unique_ptr<grpc::Server> workers_;
  std::unique_ptr<router::RouterServer> router_;
  std::unique_ptr<GatewayServer> gateway_;
};

TEST_F(OpenAiHttpTest, CompletionWithoutStreaming) {
  ScriptHello();
  const Reply r = Post("/v1/completions",
                       R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "seed": 7,
                           "temperature": 0.5, "top_p": 0.9, "user": "u1", "session_id": "s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "text_completion");
  EXPECT_TRUE(absl::StartsWith(r.json["id"].get<std::string>(), "cmpl-")) << r.body;
  EXPECT_EQ(r.json["model"], "test-model");
  ASSERT_EQ(r.json["choices"].size(), 1u);
  EXPECT_EQ(r.json["choices"][0]["text"], "Hello");
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
  // BOS + the two bytes of "hi": a text prompt gets the tokenizer's BOS by default.
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 5);
  EXPECT_EQ(r.json["usage"]["total_tokens"], 8);
  // The request the decode worker got: the same fields as over gRPC.
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  ASSERT_EQ(reserves[0].prompt_token_ids_size(), 3);
  EXPECT_EQ(reserves[0].prompt_token_ids(0), 256);  // the byte tokenizer's BOS
  EXPECT_EQ(reserves[0].max_tokens(), 5);
  EXPECT_EQ(reserves[0].sampling().seed(), 7u);
  EXPECT_FLOAT_EQ(reserves[0].sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(reserves[0].sampling().top_p(), 0.9f);
  const std::string metrics = gateway_->MetricsText();
  for (const char* line : {"ced_gateway_requests_total{api=\"openai\",outcome=\"length\"} 1",
                           "ced_gateway_generated_tokens_total{api=\"openai\"} 5",
                           "ced_gateway_ttft_seconds_count{api=\"openai\"} 1",
                           "ced_gateway_requests_total{api=\"grpc\",outcome=\"length\"} 0"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line;
  }
}

// n > 1: one call per choice (choice i samples with seed + i), answered
// together: the choices in index order, the prompt counted once in usage.
TEST_F(OpenAiHttpTest, SeveralChoicesWithoutStreaming) {
  ScriptHello();
  const Reply r = Post("/v1/completions",
                       R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "seed": 7,
                           "temperature": 0.5, "n": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 3u) << r.body;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.json["choices"][i]["index"], i) << r.body;
    EXPECT_EQ(r.json["choices"][i]["text"], "Hello") << r.body;
    EXPECT_EQ(r.json["choices"][i]["finish_reason"], "length") << r.body;
  }
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 15);
  EXPECT_EQ(r.json["usage"]["total_tokens"], 18);
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 3u);
  std::vector<uint64_t> seeds;
  std::vector<std::string> ids;
  for (const auto& reserve : reserves) {
    seeds.push_back(reserve.sampling().seed());
    ids.push_back(reserve.request_id());
  }
  std::sort(seeds.begin(), seeds.end());
  EXPECT_EQ(seeds, (std::vector<uint64_t>{7, 8, 9}));
  std::sort(ids.begin(), ids.end());
  EXPECT_TRUE(std::unique(ids.begin(), ids.end()) == ids.end()) << "one request id per choice";
  // Out of range: 400 naming n.
  const Reply bad = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "n": 17})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json["error"]["param"], "n") << bad.body;
}

TEST_F(OpenAiHttpTest, SeveralChoicesStreamed) {
  ScriptHello();
  const Reply r = Post("/v1/chat/completions",
                       R"({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 5, "n": 2, "stream": true,
                           "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed) << r.body;
  EXPECT_TRUE(e.done) << r.body;
  std::string text[2];
  int roles[2] = {0, 0}, finishes[2] = {0, 0}, usage_chunks = 0;
  for (const Json& chunk : e.chunks) {
    EXPECT_EQ(chunk["id"], e.chunks[0]["id"]);
    if (chunk["choices"].empty()) {
      ++usage_chunks;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 10) << r.body;
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null()) << r.body;
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const Json& c = chunk["choices"][0];
    const int i = c["index"].get<int>();
    ASSERT_TRUE(i == 0 || i == 1) << r.body;
    EXPECT_EQ(finishes[i], 0) << "an event after choice " << i << " finished: " << r.body;
    if (c["delta"].contains("role")) ++roles[i];
    if (c["delta"].contains("content")) text[i] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes[i];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(text[i], "Hello") << "choice " << i << ": " << r.body;
    EXPECT_EQ(roles[i], 1) << r.body;
    EXPECT_EQ(finishes[i], 1) << r.body;
  }
  EXPECT_EQ(usage_chunks, 1) << r.body;
  EXPECT_TRUE(e.chunks.back()["choices"].empty()) << "the usage chunk comes last: " << r.body;
  EXPECT_EQ(decode_.reserves().size(), 2u);
}

// Without a seed, each request samples anew (OpenAI's behaviour): the
// gateway draws one per request; a given seed is passed as it is.
TEST_F(OpenAiHttpTest, ASeedIsDrawnPerRequestWhenNoneIsGiven) {
  ScriptHello();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                          "temperature": 0.9})")
                  .status,
              200);
  }
  ASSERT_EQ(Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                        "temperature": 0.9, "seed": null})")
                .status,
            200);
  ASSERT_EQ(Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                        "temperature": 0.9, "seed": 0})")
                .status,
            200);
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 5u);
  std::vector<uint64_t> drawn;
  for (int i = 0; i < 4; ++i) drawn.push_back(reserves[i].sampling().seed());
  std::sort(drawn.begin(), drawn.end());
  EXPECT_TRUE(std::unique(drawn.begin(), drawn.end()) == drawn.end())
      << "the same seed drawn twice in four requests";
  EXPECT_EQ(reserves[4].sampling().seed(), 0u) << "a given seed (0 too) is kept";
}

TEST_F(OpenAiHttpTest, PromptAsTokenIdsAndDefaultMaxTokens) {
  ScriptHello();
  const Reply r = Post("/v1/completions", R"({"model": "test-model", "prompt": [72, 105, 33]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  ASSERT_EQ(reserves[0].prompt_token_ids_size(), 3);
  EXPECT_EQ(reserves[0].prompt_token_ids(2), 33);
  EXPECT_EQ(reserves[0].max_tokens(), 16);  // OpenAI's default for completions
}

TEST_F(OpenAiHttpTest, StreamedCompletionIsServerSentEvents) {
  ScriptHello();
  const Reply r = Post("/v1/completions",
                       R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                           "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed) << r.body;
  EXPECT_TRUE(e.done) << r.body;
  EXPECT_EQ(e.text, "Hello");
  ASSERT_GE(e.chunks.size(), 3u) << r.body;
  // finish_reason null until the last choice chunk; then the usage chunk.
  for (size_t i = 0; i + 2 < e.chunks.size(); ++i) {
    EXPECT_TRUE(e.chunks[i]["choices"][0]["finish_reason"].is_null()) << r.body;
    EXPECT_TRUE(e.chunks[i]["usage"].is_null()) << r.body;
  }
  const Json& last = e.chunks[e.chunks.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const Json& usage = e.chunks.back();
  EXPECT_TRUE(usage["choices"].empty()) << r.body;
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  for (const Json& c : e.chunks) EXPECT_EQ(c["id"], e.chunks[0]["id"]);
}

TEST_F(OpenAiHttpTest, StreamWithoutIncludeUsageHasNoUsageChunk) {
  ScriptHello();
  const Reply r =
      Post("/v1/completions",
           R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "stream": true})");
  const Events e = ParseEvents(r.body);
  ASSERT_TRUE(e.done) << r.body;
  ASSERT_FALSE(e.chunks.empty());
  for (const Json& c : e.chunks) {
    EXPECT_FALSE(c.contains("usage")) << r.body;
    EXPECT_EQ(c["choices"].size(), 1u);
  }
  EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAiHttpTest, AddBosFalseSendsOnlyThePromptText) {
  ScriptHello();
  const Reply r = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi",
                                               "max_tokens": 5, "add_bos": false})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 2);
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  ASSERT_EQ(reserves[0].prompt_token_ids_size(), 2);
  EXPECT_EQ(reserves[0].prompt_token_ids(0), 'h');
}
TEST_F(OpenAiHttpTest, ForcedUsage) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->http_force_usage = true; });
  ScriptHello();
  const Reply r =
      Post("/v1/completions",
           R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "stream": true})");
  const Events e = ParseEvents(r.body);
  ASSERT_TRUE(e.done) << r.body;
  EXPECT_TRUE(e.chunks.back()["choices"].empty()) << r.body;
  EXPECT_EQ(e.chunks.back()["usage"]["total_tokens"], 8) << r.body;
}

// A chat request that offers tools: the calls the model writes (here in the
// hermes format, as --tool-call-parser names it) come back as tool_calls,
// whole and streamed; without tools, or with tool_choice "none", the text
// stays as the model wrote it.
TEST_F(OpenAiHttpTest, ToolCallsInTheOutputBecomeToolCalls) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->tool_call_parser = "hermes"; });
  const std::string output =
      "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const int n = static_cast<int>(output.size());
  auto script = [&] {
    // In pieces that split the marker: "Checking.<to" | "ol_call>..." | the rest.
    decode_.SetScript({grpc::Status::OK,
                       {Chunk(0, output.substr(0, 12)), Chunk(12, output.substr(12, 20)),
                        Chunk(32, output.substr(32), FINISH_REASON_STOP)},
                       /*hold_open=*/false});
    prefill_.SetScript({output[0], true, true, false, grpc::Status::OK});
  };
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  const std::string head = absl::StrCat(R"({"model": "test-model", "max_tokens": )", n,
                                        R"(, "messages": [{"role": "user", "content": "hi"}], )");
  script();
  Reply r = Post("/v1/chat/completions", head + tools + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json choice = r.json["choices"][0];  // a copy: r is reused below
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  EXPECT_EQ(choice["message"]["content"], "Checking.") << r.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  const Json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "call_")) << r.body;
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));

  script();
  r = Post("/v1/chat/completions", head + tools + R"(, "stream": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  ASSERT_TRUE(e.well_formed && e.done) << r.body;
  EXPECT_EQ(e.text, "Checking.") << r.body;  // no byte of the call as content
  int calls_chunks = 0;
  for (const Json& chunk : e.chunks) {
    const Json& delta = chunk["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    ++calls_chunks;
    ASSERT_EQ(delta["tool_calls"].size(), 1u) << r.body;
    EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
    EXPECT_TRUE(absl::StartsWith(delta["tool_calls"][0]["id"].get<std::string>(), "call_"));
    EXPECT_EQ(delta["tool_calls"][0]["type"], "function");
    EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(delta["tool_calls"][0]["function"]["arguments"], call["function"]["arguments"]);
  }
  EXPECT_EQ(calls_chunks, 1) << r.body;
  EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "tool_calls") << r.body;

  // No tools offered, or tool_choice "none": the text as written.
  for (const std::string& extra : {std::string(), tools + R"(, "tool_choice": "none")"}) {
    script();
    r = Post("/v1/chat/completions",
             extra.empty() ? head.substr(0, head.size() - 2) + "}" : head + extra + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["message"]["content"], output) << r.body;
    EXPECT_FALSE(r.json["choices"][0]["message"].contains("tool_calls")) << r.body;
    EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop") << r.body;
  }
}

TEST_F(OpenAiHttpTest, AnUnknownToolCallParserIsAStartUpErrorNamingTheFlag) {
  GatewayServerOptions go = TestGatewayOptions(router_->grpc_address());
  go.http_address = "127.0.0.1:0";
  go.tool_call_parser = "mistral";
  auto gateway = GatewayServer::Start(go);
  ASSERT_FALSE(gateway.ok());
  EXPECT_EQ(gateway.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gateway.status().message().find("--tool-call-parser"), absl::string_view::npos)
      << gateway.status();
  EXPECT_NE(gateway.status().message().find("mistral"), absl::string_view::npos);
}

// Two calls in one output: both, or with parallel_tool_calls false the first
// only, whole and streamed.
TEST_F(OpenAiHttpTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->tool_call_parser = "hermes"; });
  const std::string output =
      "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</tool_call>";
  decode_.SetScript(
      {grpc::Status::OK,
       {Chunk(0, output.substr(0, 30)), Chunk(30, output.substr(30), FINISH_REASON_STOP)},
       /*hold_open=*/false});
  prefill_.SetScript({output[0], true, true, false, grpc::Status::OK});
  const std::string head = absl::StrCat(
      R"({"model": "test-model", "max_tokens": )", output.size(),
      R"(, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a"}}])");
  for (const bool parallel : {true, false}) {
    const std::string flag = parallel ? "" : R"(, "parallel_tool_calls": false)";
    Reply r = Post("/v1/chat/completions", head + flag + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    const Json& calls = r.json["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), parallel ? 2u : 1u) << r.body;
    EXPECT_EQ(calls[0]["function"]["name"], "a");
    r = Post("/v1/chat/completions", head + flag + R"(, "stream": true})");
    const Events e = ParseEvents(r.body);
    ASSERT_TRUE(e.well_formed && e.done) << r.body;
    size_t streamed = 0;
    for (const Json& chunk : e.chunks) {
      const Json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("tool_calls")) streamed += delta["tool_calls"].size();
    }
    EXPECT_EQ(streamed, parallel ? 2u : 1u) << r.body;
  }
}

// The official `openai` npm client reads the tool call the model wrote, from
// the whole response and from the stream's deltas alike.
TEST_F(OpenAiHttpTest, OfficialOpenAiClientReadsTheToolCalls) {
  if (!testing::HaveCommand("node")) CED_SKIP_OR_FAIL_WHEN_MISSING("node");
  if (!std::ifstream(testing::NodeModules() + "/openai/index.mjs")) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("the openai npm package (tests/node/node_modules)");
  }
  TearDown();
  Start([](GatewayServerOptions* o) { o->tool_call_parser = "hermes"; });
  const std::string output =
      "On it.<tool_call>{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}</tool_call>";
  decode_.SetScript({grpc::Status::OK,
                     {Chunk(0, output.substr(0, 9)), Chunk(9, output.substr(9, 20)),
                      Chunk(29, output.substr(29), FINISH_REASON_STOP)},
                     /*hold_open=*/false});
  prefill_.SetScript({output[0], true, true, false, grpc::Status::OK});
  int status = -1;
  const std::string out = testing::Shell(
      absl::StrCat("node ",
                   testing::Quote(testing::SourceDir() + "/tests/gateway_http/openai_tools.mjs"),
                   " ", testing::Quote(testing::NodeModules()), " ",
                   testing::Quote("http://" + gateway_->http_address() + "/v1"), " test-model ",
                   output.size(), " 2>&1"),
      &status);
  ASSERT_EQ(status, 0) << out;
  const Json j = Json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  for (const char* form : {"whole", "streamed"}) {
    const Json& r = j[form];
    EXPECT_EQ(r["content"], "On it.") << form << ": " << out;
    EXPECT_EQ(r["finish_reason"], "tool_calls") << form << ": " << out;
    ASSERT_EQ(r["tool_calls"].size(), 1u) << form << ": " << out;
    const Json& call = r["tool_calls"][0];
    EXPECT_EQ(call["type"], "function") << form;
    EXPECT_EQ(call["name"], "w") << form;
    EXPECT_EQ(call["arguments"], Json({{"c", "P"}})) << form;
    EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "call_")) << form << ": " << out;
  }
}

// echo: the completion's text starts with the prompt's, as given (token ids
// decoded), whole and streamed; not with logprobs.
TEST_F(OpenAiHttpTest, EchoPutsThePromptBeforeTheCompletion) {
  ScriptHello();
  Reply r = Post("/v1/completions",
                 R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "echo": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], "hiHello") << r.body;
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 5);
  ScriptHello();
  r = Post("/v1/completions", R"({"model": "test-model", "prompt": [104, 105], "max_tokens": 5,
                                  "echo": true, "stream": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed && e.done) << r.body;
  EXPECT_EQ(e.text, "hiHello") << r.body;
  ScriptHello();
  r = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                  "echo": true, "n": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(r.json["choices"][i]["text"], "hiHello") << r.body;
  r = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                  "echo": true, "logprobs": 1})");
  EXPECT_EQ(ExpectError(r, 400), "echo");
}

TEST_F(OpenAiHttpTest, StreamedChat) {
  ScriptHello();
  const Reply r = Post("/v1/chat/completions",
                       R"({"model": "test-model", "max_completion_tokens": 5, "stream": true,
                           "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": [{"type": "text", "text": "hi"}]}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed && e.done) << r.body;
  ASSERT_GE(e.chunks.size(), 2u);
  EXPECT_EQ(e.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(e.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(e.text, "Hello");
  EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "length");
  // The prompt is the rendered template, tokenized.
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  std::string prompt;
  for (int id : reserves[0].prompt_token_ids()) prompt += static_cast<char>(id);
  EXPECT_NE(prompt.find("Be brief."), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("hi"), std::string::npos) << prompt;
  EXPECT_EQ(reserves[0].max_tokens(), 5);
}

// vLLM's /tokenize and /detokenize: the ids a completion or a chat request
// with these fields gets, and text back from ids.
TEST_F(OpenAiHttpTest, TokenizeAndDetokenize) {
  Reply r = Post("/tokenize", R"({"model": "test-model", "prompt": "hi"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["tokens"], Json::array({256, 'h', 'i'})) << "BOS by default, as completions";
  EXPECT_EQ(r.json["count"], 3);
  EXPECT_GT(r.json["max_model_len"].get<int>(), 0);
  r = Post("/tokenize", R"({"prompt": "hi", "add_special_tokens": false})");  // model optional
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["tokens"], Json::array({'h', 'i'}));
  // Messages: the ids the chat endpoint sends the workers for them.
  ScriptHello();
  const std::string messages =
      R"("messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])";
  r = Post("/tokenize", absl::StrCat("{", messages, "}"));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(Post("/v1/chat/completions",
                 absl::StrCat(R"({"model": "test-model", "max_tokens": 2, )", messages, "}"))
                .status,
            200);
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  EXPECT_EQ(r.json["tokens"], Json(std::vector<int32_t>(reserves[0].prompt_token_ids().begin(),
                                                        reserves[0].prompt_token_ids().end())));
  Reply d = Post("/detokenize", R"({"model": "test-model", "tokens": [104, 105, 33]})");
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["prompt"], "hi!");
  // Errors name the field; a foreign model is 404; GET is 405.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/tokenize", R"({"prompt": 5})"},
      {"/tokenize", R"({"prompt": "a", "messages": [{"role": "user", "content": "b"}]})"},
      {"/tokenize", R"({"text": "a"})"},
      {"/detokenize", R"({"tokens": [1, 99999]})"},
      {"/detokenize", R"({"tokens": "1"})"},
      {"/detokenize", R"({})"},
  };
  const std::vector<std::string> params = {"prompt",    "prompt", "text",
                                           "tokens[1]", "tokens", "tokens"};
  for (size_t i = 0; i < bad.size(); ++i) {
    const Reply e = Post(bad[i].first, bad[i].second);
    EXPECT_EQ(e.status, 400) << bad[i].second << ": " << e.body;
    EXPECT_EQ(e.json["error"]["param"], params[i]) << bad[i].second << ": " << e.body;
  }
  EXPECT_EQ(Post("/tokenize", R"({"model": "other", "prompt": "a"})").status, 404);
  auto client = Client();
  const auto get = client->Get("/tokenize");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

TEST_F(OpenAiHttpTest, ChatWithoutStreaming) {
  ScriptHello();
  const Reply r = Post("/v1/chat/completions",
                       R"({"model": "test-model", "max_tokens": 5,
                           "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "chat.completion");
  EXPECT_EQ(r.json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r.json["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
}

// The official client's README opens with a "developer" message.
TEST_F(OpenAiHttpTest, DeveloperMessagesAreServed) {
  ScriptHello();
  const Reply r = Post("/v1/chat/completions",
                       R"({"model": "test-model", "max_tokens": 5,
                           "messages": [{"role": "developer", "content": "be brief"},
                                        {"role": "user", "content": "hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["message"]["content"], "Hello");
}

TEST_F(OpenAiHttpTest, StopStringsNeverLeakAcrossChunks) {
  // "lo w" spans three worker chunks; nothing of it may reach the client.
  decode_.SetScript({grpc::Status::OK,
                     {Chunk(0, "Hel"), Chunk(3, "l"), Chunk(4, "o"), Chunk(5, " w"),
                      Chunk(7, "orld", FINISH_REASON_LENGTH)},
                     false});
  prefill_.SetScript({std::nullopt, true, true, false, grpc::Status::OK});
  for (const char* stop : {R"("lo w")", R"(["xyz", "lo w"])"}) {
    const Reply r = Post("/v1/completions",
                         absl::StrCat(R"({"model": "test-model", "prompt": "hi", "max_tokens": 11,
                                          "stream": true, "stop": )",
                                      stop, "}"));
    const Events e = ParseEvents(r.body);
    ASSERT_TRUE(e.done) << r.body;
    EXPECT_EQ(e.text, "Hel") << r.body;
    EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "stop") << r.body;
    const Reply whole =
        Post("/v1/completions", absl::StrCat(R"({"model": "test-model", "prompt": "hi",
                                              "max_tokens": 11, "stop": )",
                                             stop, "}"));
    EXPECT_EQ(whole.json["choices"][0]["text"], "Hel") << whole.body;
    EXPECT_EQ(whole.json["choices"][0]["finish_reason"], "stop") << whole.body;
  }
}

TEST_F(OpenAiHttpTest, BadRequestsNameTheField) {
  struct Case {
    std::string body, param;
  };
  const std::vector<Case> cases = {
      {R"({"model": "test-model", "prompt": "hi",)", "body"},
      {R"([1, 2])", "body"},
      {R"({"model": "test-model", "prompt": "hi", "max_tokens": "5"})", "max_tokens"},
      {R"({"model": "test-model", "prompt": "hi", "max_tokens": 2.5})", "max_tokens"},
      {R"({"model": "test-model", "prompt": "hi", "frobnicate": 1})", "frobnicate"},
      {R"({"model": "test-model", "prompt": "hi", "n": 0})", "n"},
      {R"({"model": "test-model", "prompt": "hi", "stop": 3})", "stop"},
      {R"({"model": "test-model", "prompt": "hi", "stop": ["a", 4]})", "stop[1]"},
      {R"({"model": "test-model", "prompt": "hi", "temperature": -1})", "temperature"},
      {R"({"model": "test-model", "prompt": "hi", "stream": "yes"})", "stream"},
      {R"({"model": "test-model", "prompt": "hi", "stream_options": {"include_usage": true}})",
       "stream_options"},
      {R"({"model": "test-model", "prompt": "hi", "replay_on": "left"})", "replay_on"},
      {R"({"model": "test-model", "prompt": "hi", "ignore_eos": 1})", "ignore_eos"},
      {R"({"model": "test-model", "prompt": "hi", "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"model": "test-model", "prompt": "hi", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"model": "test-model", "prompt": "hi", "frequency_penalty": "1"})", "frequency_penalty"},
      {R"({"model": "test-model", "prompt": "hi", "logit_bias": {"999999": 1}})",
       "logit_bias[999999]"},
      {R"({"model": "test-model", "prompt": "hi", "logit_bias": {"65": 101}})", "logit_bias[65]"},
      {R"({"model": "test-model", "prompt": "hi", "repetition_penalty": -1})",
       "repetition_penalty"},
      {R"({"model": "test-model", "prompt": [1, 999999]})", "prompt_token_ids[1]"},
      {R"({"model": "test-model", "prompt": ["a", "b"]})", "prompt"},
      {R"({"model": "test-model", "prompt": "hi", "max_tokens": 100000})", "max_tokens"},
      // Text the gateway tokenizes is named as the client wrote it.
      {absl::StrCat(R"({"model": "test-model", "prompt": ")", std::string(300, 'a'), R"("})"),
       "prompt"},
      {R"({"prompt": "hi"})", "model"},
      {R"({"model": "test-model"})", "prompt"},
      {"{\"model\": \"test-model\", \"prompt\": \"\xff\"}", "body"},
  };
  for (const Case& c : cases) {
    const Reply r = Post("/v1/completions", c.body);
    EXPECT_EQ(ExpectError(r, 400), c.param) << c.body << " -> " << r.body;
    EXPECT_EQ(r.json["error"]["type"], "invalid_request_error") << r.body;
  }
  const std::vector<Case> chat = {
      {R"({"model": "test-model", "messages": "hi"})", "messages"},
      {R"({"model": "test-model", "messages": [{"role": "robot", "content": "x"}]})",
       "messages[0].role"},
      {R"({"model": "test-model", "messages": [{"role": "user", "content": "x", "mood": 1}]})",
       "messages[0].mood"},
      {R"({"model": "test-model", "messages": [{"role": "user", "content": "x"}], "prompt": "p"})",
       "prompt"},
      {absl::StrCat(R"({"model": "test-model", "messages": [{"role": "user", "content": ")",
                    std::string(300, 'a'), R"("}]})"),
       "messages"},
  };
  for (const Case& c : chat) {
    const Reply r = Post("/v1/chat/completions", c.body);
    EXPECT_EQ(ExpectError(r, 400), c.param) << c.body << " -> " << r.body;
  }
  EXPECT_TRUE(decode_.reserves().empty());
  EXPECT_NE(gateway_->MetricsText().find(absl::StrCat(
                "ced_gateway_requests_total{api=\"openai\",outcome=\"invalid_argument\"} ",
                cases.size() + chat.size())),
            std::string::npos);
}

TEST_F(OpenAiHttpTest, UnknownModelIs404AndUnknownPathToo) {
  const Reply r = Post("/v1/completions", R"({"model": "gpt-4", "prompt": "hi"})");
  EXPECT_EQ(ExpectError(r, 404), "model");
  EXPECT_EQ(r.json["error"]["code"], "model_not_found");
  ExpectError(Post("/v1/embeddings", R"({"model": "test-model", "input": "hi"})"), 404);
  // A known path with the wrong method: 405 and the method it takes.
  const Reply get = Get("/v1/completions");
  ExpectError(get, 405);
  EXPECT_EQ(get.headers.find("Allow") != get.headers.end() ? get.headers.find("Allow")->second : "",
            "POST");
  const Reply post = Post("/v1/models", "{}");
  ExpectError(post, 405);
  EXPECT_EQ(
      post.headers.find("Allow") != post.headers.end() ? post.headers.find("Allow")->second : "",
      "GET");
}

TEST_F(OpenAiHttpTest, OversizedBodyIs413) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->max_request_bytes = 2048; });
  const std::string prompt(4096, 'a');
  ExpectError(Post("/v1/completions",
                   absl::StrCat(R"({"model": "test-model", "prompt": ")", prompt, R"("})")),
              413);
}

TEST_F(OpenAiHttpTest, AdmissionRefusalIs429) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->max_inflight = 1; });
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "H")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, true, false, grpc::Status::OK});
  std::thread first([&] {
    Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5})");
  });
  ASSERT_TRUE(decode_.WaitForStreams(1, absl::Seconds(10)));
  const Reply r = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi"})");
  ExpectError(r, 429);
  EXPECT_EQ(r.json["error"]["type"], "rate_limit_error");
  const auto retry = r.headers.find("Retry-After");
  ASSERT_NE(retry, r.headers.end());
  EXPECT_EQ(retry->second, "1");
  gateway_->Shutdown();  // cancels the held request
  first.join();
}

TEST_F(OpenAiHttpTest, NoWorkersIs503) {
  TearDown();
  Start(nullptr, /*workers=*/false);
  const Reply r = Post("/v1/completions", R"({"model": "test-model", "prompt": "hi"})");
  ExpectError(r, 503);
  EXPECT_EQ(r.headers.count("Retry-After"), 1u);
  const Reply s =
      Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "stream": true})");
  ExpectError(s, 503);  // before the first token: a plain HTTP error, not an event
  EXPECT_EQ(Get("/health").status, 503);
}

// A streamed response commits to 200 once a decode worker took the request
// (its headers go out while the prompt is computed): what fails before that
// is an HTTP error, what fails after it an error event ending the stream.
TEST_F(OpenAiHttpTest, StreamErrorsBeforePlacementAreHttpAfterItAnEvent) {
  const std::string body =
      R"({"model": "test-model", "prompt": "hi", "max_tokens": 5, "stream": true})";
  // No room on the only decode worker: nothing was placed.
  decode_.SetScript({grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no K/V room"),
                     {},
                     /*hold_open=*/false});
  prefill_.SetScript({'H', true, true, false, grpc::Status::OK});
  ExpectError(Post("/v1/completions", body), 429);
  EXPECT_TRUE(prefill_.prefills().empty());

  // Placed, then the prefill fails before any token.
  decode_.SetScript({grpc::Status::OK, {}, /*hold_open=*/true});
  prefill_.SetScript(
      {std::nullopt, false, true, false, grpc::Status(grpc::StatusCode::INTERNAL, "exploded")});
  const Reply r = Post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed) << r.body;
  EXPECT_FALSE(e.done) << r.body;
  ASSERT_EQ(e.chunks.size(), 1u) << r.body;
  ASSERT_TRUE(e.chunks[0].contains("error")) << r.body;
  EXPECT_NE(e.chunks[0]["error"]["message"].get<std::string>().find("exploded"), std::string::npos)
      << r.body;
  EXPECT_EQ(e.chunks[0]["error"]["type"], "server_error") << r.body;

  // The same failure without streaming: an HTTP error, as before.
  const std::string whole = R"({"model": "test-model", "prompt": "hi", "max_tokens": 5})";
  ExpectError(Post("/v1/completions", whole), 500);
}

TEST_F(OpenAiHttpTest, BearerTokens) {
  TearDown();
  Start([](GatewayServerOptions* o) {
    services::SecurityConfig security;
    security.bearer_tokens = {"sesame"};
    o->http_security = security;
  });
  ScriptHello();
  const std::string body = R"({"model": "test-model", "prompt": "hi", "max_tokens": 5})";
  const Reply none = Post("/v1/completions", body);
  ExpectError(none, 401);
  EXPECT_EQ(none.json["error"]["code"], "invalid_api_key");
  ExpectError(Post("/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401);
  ExpectError(Get("/v1/models"), 401);
  EXPECT_EQ(Post("/v1/completions", body, {{"Authorization", "Bearer sesame"}}).status, 200);
  EXPECT_EQ(Get("/v1/models", {{"Authorization", "Bearer sesame"}}).status, 200);
  EXPECT_TRUE(decode_.reserves().size() == 1u);
}

TEST_F(OpenAiHttpTest, ModelsAndHealth) {
  const Reply models = Get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.json["object"], "list");
  ASSERT_EQ(models.json["data"].size(), 1u);
  EXPECT_EQ(models.json["data"][0]["id"], "test-model");
  EXPECT_EQ(models.json["data"][0]["max_model_len"], 128);  // the test model's context
  // A Unix time: the server's start, neither 0 nor in the future.
  const int64_t created = models.json["data"][0]["created"].get<int64_t>();
  EXPECT_GT(created, 1700000000);
  EXPECT_LE(created, absl::ToUnixSeconds(absl::Now()));
  EXPECT_EQ(Get("/v1/models/test-model").json["id"], "test-model");
  EXPECT_EQ(Get("/v1/models/test-model").json["created"], created);
  ExpectError(Get("/v1/models/other"), 404);
  ASSERT_TRUE(WaitForHealth(gateway_->grpc_address(), true, absl::Seconds(10)));
  EXPECT_EQ(Get("/health").status, 200);
}

// Many clients connecting at the same moment (a burst of streams) are all
// answered: the listener's backlog holds them until the server accepts.
TEST_F(OpenAiHttpTest, BurstOfConnectionsIsAllAnswered) {
  constexpr int kClients = 96;
  std::vector<std::thread> threads;
  std::vector<int> status(kClients, 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client client("http://" + gateway_->http_address());
      client.set_connection_timeout(20, 0);
      client.set_read_timeout(20, 0);
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      auto result = client.Get("/health");
      status[i] = result ? result->status : -static_cast<int>(result.error());
    });
  }
  while (ready.load() < kClients) std::this_thread::yield();
  go.store(true);
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i << ": "
                              << (status[i] < 0
                                      ? httplib::to_string(static_cast<httplib::Error>(-status[i]))
                                      : std::to_string(status[i]));
  }
}

// Streams the request and hangs up after the first event; returns what came.
std::string StreamAndHangUp(const std::string& address, const std::string& body) {
  httplib::Client client("http://" + address);
  client.set_read_timeout(20, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string got;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    got.append(data, n);
    return got.find("\n\n") == std::string::npos;  // false: abort the transfer
  };
  client.send(req);
  return got;
}

TEST_F(OpenAiHttpTest, ClientThatHangsUpCancelsBothWorkers) {
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hi")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, true, /*hold_open=*/true, grpc::Status::OK});
  const std::string got =
      StreamAndHangUp(gateway_->http_address(),
                      R"({"model": "test-model", "prompt": "hi", "max_tokens": 50, "stream": true,
          "request_id": "hang-1"})");
  EXPECT_NE(got.find("\"text\":\"Hi\""), std::string::npos) << got;
  EXPECT_TRUE(decode_.WaitForCancel("hang-1", absl::Seconds(10)));
  EXPECT_TRUE(prefill_.WaitForCancel("hang-1", absl::Seconds(10)));
  EXPECT_TRUE(decode_.WaitForCancelledStreams(1, absl::Seconds(10)));
}

// The connection's thread writing every event (--http-direct-stream=false,
// --access-log: one JSON line per answered request, refused ones included.
TEST_F(OpenAiHttpTest, AccessLogHasALinePerRequest) {
  TearDown();
  const std::string path = ::testing::TempDir() + "/ced_access_log_test.jsonl";
  std::remove(path.c_str());
  Start([&](GatewayServerOptions* o) { o->access_log = path; });
  ScriptHello();
  ASSERT_EQ(Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                                        "request_id": "logged-1", "session_id": "s-9",
                                        "temperature": 0.7, "seed": 99})")
                .status,
            200);
  ASSERT_EQ(Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "n": 30})").status,
            400);
  std::ifstream in(path);
  std::vector<Json> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(Json::parse(line, nullptr, false));
  ASSERT_EQ(lines.size(), 2u);
  const Json& ok = lines[0];
  ASSERT_TRUE(ok.is_object());
  EXPECT_EQ(ok["api"], "openai");
  EXPECT_EQ(ok["client"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << ok;
  EXPECT_EQ(ok["request_id"], "logged-1");
  EXPECT_EQ(ok["session_id"], "s-9");
  EXPECT_EQ(ok["outcome"], "length");
  EXPECT_EQ(ok["status"], "OK");
  EXPECT_EQ(ok["completion_tokens"], 5);
  EXPECT_EQ(ok["prompt_tokens"], 3) << "BOS + 'h' + 'i'";
  EXPECT_GE(ok["ttft_ms"].get<double>(), 0);
  EXPECT_GE(ok["total_ms"].get<double>(), ok["ttft_ms"].get<double>());
  EXPECT_EQ(ok["prefill_worker"], "p0");
  EXPECT_EQ(ok["decode_worker"], "d0");
  EXPECT_EQ(ok["time"].get<std::string>().size(), 24u) << ok["time"];
  EXPECT_EQ(ok["seed"], 99) << "a sampled request's seed, to reproduce it";
  const Json& bad = lines[1];
  ASSERT_TRUE(bad.is_object());
  EXPECT_EQ(bad["outcome"], "invalid_argument");
  EXPECT_EQ(bad["client"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << bad;
  EXPECT_EQ(bad["status"], "INVALID_ARGUMENT");
  EXPECT_NE(bad["error"].get<std::string>().find("n:"), std::string::npos) << bad;
  EXPECT_TRUE(bad["ttft_ms"].is_null());
  std::remove(path.c_str());
  // A log that cannot be opened is a start-up error naming the flag.
  GatewayServerOptions o = TestGatewayOptions(router_->grpc_address());
  o.access_log = "/nonexistent-dir/x.log";
  auto failed = GatewayServer::Start(o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("--access-log"), std::string::npos) << failed.status();
}

// and the path TLS takes): the same stream, and a hang-up still cancels.
TEST_F(OpenAiHttpTest, StreamWrittenByTheConnectionThread) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->http_direct_stream = false; });
  ScriptHello();
  const Reply r = Post("/v1/completions",
                       R"({"model": "test-model", "prompt": "hi", "max_tokens": 5,
                           "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed) << r.body;
  EXPECT_TRUE(e.done) << r.body;
  EXPECT_EQ(e.text, "Hello");
  EXPECT_EQ(e.chunks.back()["usage"]["completion_tokens"], 5);

  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hi")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, true, /*hold_open=*/true, grpc::Status::OK});
  const std::string got =
      StreamAndHangUp(gateway_->http_address(),
                      R"({"model": "test-model", "prompt": "hi", "max_tokens": 50, "stream": true,
          "request_id": "hang-2"})");
  EXPECT_NE(got.find("\"text\":\"Hi\""), std::string::npos) << got;
  EXPECT_TRUE(decode_.WaitForCancel("hang-2", absl::Seconds(10)));
  EXPECT_TRUE(prefill_.WaitForCancel("hang-2", absl::Seconds(10)));
}

// Many chunks on one stream, each its own event, in order (the direct path
// sends each from the call's thread).
TEST_F(OpenAiHttpTest, LongStreamArrivesWhole) {
  TearDown();
  Start([](GatewayServerOptions* o) { o->model->max_position = 8192; });
  std::vector<ced::internal::TokenChunk> chunks;
  std::string want;
  for (int i = 0; i < 60; ++i) {
    const std::string text(100, static_cast<char>('a' + i % 26));
    chunks.push_back(Chunk(
        i * 100, text, i == 59 ? FINISH_REASON_LENGTH : ced::internal::FINISH_REASON_UNSPECIFIED));
    want += text;
  }
  decode_.SetScript({grpc::Status::OK, chunks, /*hold_open=*/false});
  prefill_.SetScript({'a', true, true, false, grpc::Status::OK});
  const Reply r = Post("/v1/completions",
                       R"({"model": "test-model", "prompt": "hi", "max_tokens": 6000,
                           "stream": true})");
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  const Events e = ParseEvents(r.body);
  EXPECT_TRUE(e.well_formed);
  EXPECT_TRUE(e.done);
  EXPECT_TRUE(e.text == want) << e.text.size() << " bytes of " << want.size();
  EXPECT_GE(e.chunks.size(), 2u);
}

TEST_F(OpenAiHttpTest, NonStreamingClientThatGivesUpCancels) {
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hi")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, true, false, grpc::Status::OK});
  httplib::Client client("http://" + gateway_->http_address());
  client.set_read_timeout(0, 300000);  // gives up after 0.3 s: closes the connection
  auto result = client.Post("/v1/completions",
                            R"({"model": "test-model", "prompt": "hi", "max_tokens": 50,
                                "request_id": "gone-1"})",
                            "application/json");
  EXPECT_FALSE(result);
  EXPECT_TRUE(decode_.WaitForCancel("gone-1", absl::Seconds(10)));
  EXPECT_TRUE(WaitForMetric(gateway_.get(),
                            "ced_gateway_requests_total{api=\"openai\",outcome=\"cancelled\"} 1"));
}

}  // namespace
}  // namespace ced::gateway
