// OpenAI request parsing and response JSON, without a server.
#include "services/gateway/openai/openai_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/gateway/openai/openai_stream.h"

namespace ced::gateway::openai {
namespace {

using Json = nlohmann::json;

TEST(OpenAiProtocolTest, CompletionFieldsMapOntoTheGrpcRequest) {
  auto r = ParseRequest(Endpoint::kCompletions, R"({
      "model": "m", "prompt": "hello", "max_tokens": 9, "temperature": 0.7, "top_p": 0.5,
      "seed": -1, "stop": ["a", "bc"], "n": 1, "user": "x", "stream": true,
      "stream_options": {"include_usage": true}, "ignore_eos": true, "replay_on": "decode",
      "replay_mode": "exact", "top_k": 5, "stop_token_ids": [7], "session_id": "s1",
      "presence_penalty": 0.25, "frequency_penalty": -1.5, "logprobs": null, "echo": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  const ced::v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.prompt(), "hello");
  EXPECT_EQ(g.max_tokens(), 9);
  EXPECT_FLOAT_EQ(g.temperature(), 0.7f);
  EXPECT_FLOAT_EQ(g.top_p(), 0.5f);
  EXPECT_EQ(g.seed(), ~uint64_t{0});
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "bc");
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.replay_on(), ced::v1::REPLAY_ON_DECODE);
  EXPECT_EQ(g.replay_mode(), ced::v1::REPLAY_MODE_EXACT);
  EXPECT_EQ(g.top_k(), 5);
  EXPECT_EQ(g.stop_token_ids(0), 7);
  EXPECT_EQ(g.session_id(), "s1");  // a routing hint, validated like the gRPC field
  EXPECT_FLOAT_EQ(g.presence_penalty(), 0.25f);
  EXPECT_FLOAT_EQ(g.frequency_penalty(), -1.5f);
}

TEST(OpenAiProtocolTest, LogitBiasAndRepetitionPenalty) {
  auto r = ParseRequest(Endpoint::kChat, R"({"model": "m",
      "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"50": -100, "7": 2.5},
      "repetition_penalty": 1.1})");
  ASSERT_TRUE(r.ok()) << r.status();
  const ced::v1::GenerateRequest& g = r->generate;
  ASSERT_EQ(g.logit_bias_size(), 2);
  EXPECT_FLOAT_EQ(g.logit_bias().at(50), -100.0f);
  EXPECT_FLOAT_EQ(g.logit_bias().at(7), 2.5f);
  EXPECT_FLOAT_EQ(g.repetition_penalty(), 1.1f);
  const std::pair<const char*, const char*> bad[] = {
      {R"("logit_bias": {"x": 1})", "logit_bias"},
      {R"("logit_bias": {"5": "1"})", "logit_bias[5]"},
      {R"("logit_bias": [1])", "logit_bias"},
      {R"("repetition_penalty": "1")", "repetition_penalty"},
  };
  for (const auto& [field, name] : bad) {
    const std::string body =
        std::string(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )") + field +
        "}";
    auto e = ParseRequest(Endpoint::kChat, body);
    ASSERT_FALSE(e.ok()) << body;
    EXPECT_EQ(FieldOf(e.status()), name) << body << ": " << e.status();
  }
}

TEST(OpenAiProtocolTest, SeveralChoices) {
  auto r = ParseRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "n": 16})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 16);
  for (const char* n : {"0", "17", "-1", "1.5", "\"2\""}) {
    auto bad = ParseRequest(Endpoint::kCompletions,
                            absl::StrCat(R"({"model": "m", "prompt": "x", "n": )", n, "}"));
    ASSERT_FALSE(bad.ok()) << n;
    EXPECT_EQ(FieldOf(bad.status()), "n") << n;
  }
  ResponseHeader h;
  h.endpoint = Endpoint::kChat;
  h.id = "chatcmpl-2";
  h.model = "m";
  UsageCounts usage;
  usage.prompt_tokens = 4;
  usage.completion_tokens = 9;
  const Json body = Json::parse(CompletionJson(h, {{"a", "stop"}, {"bc", "length"}}, usage));
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], "bc");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "a");
  EXPECT_EQ(body["usage"]["total_tokens"], 13);
  // A later choice's stream chunks carry its index.
  ResponseBuilder b(h, /*include_usage=*/false, /*index=*/3);
  std::string events;
  ced::v1::GenerateResponse delta;
  delta.set_text("z");
  b.AppendEvents(delta, &events);
  EXPECT_NE(events.find(R"("index":3)"), std::string::npos) << events;
  EXPECT_EQ(events.find(R"("index":0)"), std::string::npos) << events;
}

TEST(OpenAiProtocolTest, PromptForms) {
  auto ids = ParseRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": [[1, 2, 3]]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.prompt_token_ids_size(), 3);
  auto big = ParseRequest(Endpoint::kCompletions,
                          R"({"model": "m", "prompt": "x", "seed": 18446744073709551615})");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->generate.seed(), ~uint64_t{0});
  auto one =
      ParseRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": ["x"], "stop": "s"})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->generate.prompt(), "x");
  EXPECT_EQ(one->generate.stop(0), "s");
}

TEST(OpenAiProtocolTest, ChatMessagesAndMaxCompletionTokens) {
  auto r = ParseRequest(Endpoint::kChat, R"({"model": "m", "max_completion_tokens": 4,
      "messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": null,
                    "tool_calls": [{"id": "c1", "type": "function",
                                    "function": {"name": "f", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "42"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.max_tokens(), 4);
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_TRUE(r->messages[1].content_is_null);
  EXPECT_EQ(r->messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(r->messages[2].tool_call_id, "c1");
  EXPECT_FALSE(r->messages[2].content_is_null);
}

TEST(OpenAiProtocolTest, OnlyAnAssistantMessageMayLeaveItsContentOut) {
  for (const char* role : {"user", "system", "developer", "tool"}) {
    for (const char* content : {"", R"(, "content": null)"}) {
      const std::string body = std::string(R"({"model": "m", "messages": [{"role": "user", )") +
                               R"("content": "hi"}, {"role": ")" + role + "\"" + content + "}]}";
      auto r = ParseRequest(Endpoint::kChat, body);
      ASSERT_FALSE(r.ok()) << body;
      EXPECT_EQ(FieldOf(r.status()), "messages[1].content") << body;
      EXPECT_NE(r.status().message().find(std::string("required for a \"") + role),
                std::string::npos)
          << r.status();
    }
  }
  auto ok = ParseRequest(Endpoint::kChat, R"({"model": "m", "messages": [{"role": "user",
      "content": "hi"}, {"role": "assistant"}]})");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// Fields clients send at their defaults are accepted there, and refused
// naming the field at any value that would change the answer.
TEST(OpenAiProtocolTest, NeutralFieldsAreAcceptedOnlyAtTheirNeutralValues) {
  auto ok = ParseRequest(Endpoint::kChat, R"({"model": "m",
      "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"},
      "store": false, "metadata": {"team": "a"}, "service_tier": "auto", "suffix": "",
      "frequency_penalty": 0.0, "logit_bias": {}, "tool_choice": "auto"})");
  EXPECT_TRUE(ok.ok()) << ok.status();
  const std::pair<const char*, const char*> bad[] = {
      {R"("response_format": {"type": "json_object"})", "response_format"},
      {R"("response_format": "text")", "response_format"},
      {R"("response_format": {"type": "text", "schema": {}})", "response_format.schema"},
      {R"("store": true)", "store"},
      {R"("store": "no")", "store"},
      {R"("metadata": {"k": 1})", "metadata.k"},
      {R"("metadata": [])", "metadata"},
      {R"("service_tier": "flex")", "service_tier"},
      {R"("suffix": "end")", "suffix"},
      {R"("frequency_penalty": "0.5")", "frequency_penalty"},
      {R"("presence_penalty": true)", "presence_penalty"},
  };
  for (const auto& [field, name] : bad) {
    const std::string body =
        std::string(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )") + field +
        "}";
    auto r = ParseRequest(Endpoint::kChat, body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(FieldOf(r.status()), name) << body << ": " << r.status();
    EXPECT_EQ(HttpStatusOf(r.status().code()), 400) << body;
  }
}

// Chat: logprobs (a boolean) and top_logprobs; completions: logprobs is the
// number of most probable tokens (0 = the token's own only), false = off.
TEST(OpenAiProtocolTest, LogprobsFields) {
  auto chat = ParseRequest(Endpoint::kChat, R"({"model": "m",
      "messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->generate.logprobs());
  EXPECT_EQ(chat->generate.top_logprobs(), 3);
  for (const auto& [body, on, top] :
       std::vector<std::tuple<std::string, bool, int>>{{R"("logprobs": 2)", true, 2},
                                                       {R"("logprobs": 0)", true, 0},
                                                       {R"("logprobs": false)", false, 0},
                                                       {R"("logprobs": null)", false, 0}}) {
    auto r = ParseRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": "p", )" + body + "}");
    ASSERT_TRUE(r.ok()) << body << ": " << r.status();
    EXPECT_EQ(r->generate.logprobs(), on) << body;
    EXPECT_EQ(r->generate.top_logprobs(), top) << body;
  }
  const std::tuple<Endpoint, const char*, const char*> bad[] = {
      {Endpoint::kCompletions, R"("logprobs": 21)", "logprobs"},
      {Endpoint::kCompletions, R"("logprobs": -1)", "logprobs"},
      {Endpoint::kCompletions, R"("logprobs": true)", "logprobs"},
      {Endpoint::kCompletions, R"("top_logprobs": 2)", "top_logprobs"},  // chat's field
      {Endpoint::kCompletions, R"("echo": true, "logprobs": 1)", "echo"},
      {Endpoint::kChat, R"("echo": true)", "echo"},
      {Endpoint::kChat, R"("logprobs": 1)", "logprobs"},
      {Endpoint::kChat, R"("top_logprobs": "3")", "top_logprobs"},
      {Endpoint::kChat, R"("parallel_tool_calls": "no")", "parallel_tool_calls"},
  };
  for (const auto& [endpoint, field, name] : bad) {
    const std::string body =
        endpoint == Endpoint::kChat
            ? std::string(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )") +
                  field + "}"
            : std::string(R"({"model": "m", "prompt": "p", )") + field + "}";
    auto r = ParseRequest(endpoint, body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(FieldOf(r.status()), name) << body << ": " << r.status();
  }
}

ced::v1::GenerateResponse Delta(const std::string& text, const std::vector<int32_t>& ids) {
  ced::v1::GenerateResponse m;
  m.set_text(text);
  for (int32_t id : ids) {
    m.add_token_ids(id);
    ced::v1::StepLogprobs* l = m.add_logprobs();
    l->mutable_token()->set_token_id(id);
    l->mutable_token()->set_logprob(-0.5f);
    ced::v1::TokenLogprob* top = l->add_top();
    top->set_token_id('z');
    top->set_logprob(-0.25f);
  }
  return m;
}

// A streamed event carries the logprobs of the tokens since the last event
// (a token whose text is held back waits with it); the shapes are OpenAI's.
TEST(OpenAiProtocolTest, LogprobsInStreamsAndBodies) {
  auto tokenizer = ByteTokenizer::Create({});
  ASSERT_TRUE(tokenizer.ok());
  ResponseHeader h;
  h.endpoint = Endpoint::kChat;
  h.id = "chatcmpl-1";
  h.model = "m";
  ResponseBuilder chat(h, /*include_usage=*/false);
  chat.EnableLogprobs(tokenizer->get());
  std::string events;
  chat.AppendEvents(Delta("", {0xC3}), &events);          // half of U+00E9: no event yet
  chat.AppendEvents(Delta("\xC3\xA9", {0xA9}), &events);  // both tokens' logprobs
  ced::v1::GenerateResponse final = Delta("!", {'!'});
  final.set_finish_reason(ced::v1::FINISH_REASON_STOP);
  chat.AppendEvents(final, &events);
  std::vector<Json> chunks;
  for (size_t at = 0; (at = events.find("data: ", at)) != std::string::npos;) {
    const size_t end = events.find("\n\n", at);
    chunks.push_back(Json::parse(events.substr(at + 6, end - at - 6)));
    at = end;
  }
  ASSERT_EQ(chunks.size(), 3u);  // role, "é", "!"
  EXPECT_TRUE(chunks[0]["choices"][0]["logprobs"].is_null());
  const Json& content = chunks[1]["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "\xEF\xBF\xBD");       // part of a character: U+FFFD...
  EXPECT_EQ(content[0]["bytes"], Json::array({0xC3}));  // ...and its exact bytes
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  ASSERT_EQ(content[0]["top_logprobs"].size(), 1u);
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "z");
  EXPECT_EQ(content[0]["top_logprobs"][0]["bytes"], Json::array({'z'}));
  EXPECT_EQ(content[1]["bytes"], Json::array({0xA9}));
  EXPECT_TRUE(chunks[1]["choices"][0]["logprobs"]["refusal"].is_null());
  EXPECT_EQ(chunks[2]["choices"][0]["logprobs"]["content"][0]["token"], "!");

  // Completions, one body: tokens, token_logprobs, top_logprobs (the top
  // ones and the token itself), text_offset in code points.
  h.endpoint = Endpoint::kCompletions;
  ResponseBuilder body(h, false);
  body.EnableLogprobs(tokenizer->get());
  body.Add(Delta("a", {'a'}));
  body.Add(Delta("z", {'z'}));
  final = Delta("b", {'b'});
  final.set_finish_reason(ced::v1::FINISH_REASON_LENGTH);
  body.Add(final);
  ASSERT_TRUE(body.finished());
  const Json j = Json::parse(body.Body());
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"a", "z", "b"}));
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);  // "z" and "a"
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["a"].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["z"].get<float>(), -0.25f);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);  // "z" is the token itself
  EXPECT_EQ(lp["text_offset"], Json::array({0, 1, 2}));
  ASSERT_TRUE(body.result().logprobs.has_value());
  EXPECT_EQ(body.result().logprobs->entries.size(), 3u);
  // Not asked for: null, as before.
  ResponseBuilder plain(h, false);
  plain.Add(final);
  EXPECT_TRUE(Json::parse(plain.Body())["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(plain.result().logprobs.has_value());
}

// An image part is refused for its type, not for its image_url field.
TEST(OpenAiProtocolTest, ContentPartsOtherThanTextAreRefusedByType) {
  auto image = ParseRequest(Endpoint::kChat, R"({"model": "m", "messages": [{"role": "user",
      "content": [{"type": "text", "text": "hi"},
                  {"type": "image_url", "image_url": {"url": "data:,"}}]}]})");
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(FieldOf(image.status()), "messages[0].content[1].type");
  EXPECT_NE(image.status().message().find("only \"text\" parts are supported, got \"image_url\""),
            std::string::npos)
      << image.status();
  auto untyped =
      ParseRequest(Endpoint::kChat,
                   R"({"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]})");
  ASSERT_FALSE(untyped.ok());
  EXPECT_EQ(FieldOf(untyped.status()), "messages[0].content[0].type");
  EXPECT_NE(untyped.status().message().find("(type is missing)"), std::string::npos)
      << untyped.status();
  auto extra = ParseRequest(Endpoint::kChat, R"({"model": "m", "messages": [{"role": "user",
      "content": [{"type": "text", "text": "x", "cache_control": {}}]}]})");
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(FieldOf(extra.status()), "messages[0].content[0].cache_control");
}

TEST(OpenAiProtocolTest, ErrorsNameTheField) {
  auto bad = ParseRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "n": 30})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(FieldOf(bad.status()), "n");
  EXPECT_EQ(HttpStatusOf(bad.status().code()), 400);
  const Json e = Json::parse(ErrorJson(bad.status()));
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("[1, 16]"), std::string::npos);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
}

// An INVALID_ARGUMENT that comes back from the call ("field: what") names
// its field as the error's param, as the errors found before the call do.
TEST(OpenAiProtocolTest, FieldOfAnInvalidArgumentFromTheCallBecomesTheParam) {
  const absl::Status s = FromGrpcStatus(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      "max_tokens: 308 tokens (prompt + max_tokens) are larger than the whole K/V cache"));
  EXPECT_EQ(FieldOf(s), "max_tokens");
  EXPECT_EQ(Json::parse(ErrorJson(s))["error"]["param"], "max_tokens");
  EXPECT_EQ(HttpStatusOf(s.code()), 400);
  EXPECT_EQ(FieldOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                "prompt_token_ids[2]: out of range"))),
            "prompt_token_ids[2]");
  // Not a field: a sentence, or another code.
  EXPECT_EQ(FieldOf(FromGrpcStatus(
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "router at 1.2.3.4:5: no"))),
            "");
  EXPECT_EQ(FieldOf(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x: gone"))), "");
}

TEST(OpenAiProtocolTest, ChatStreamEventsOpenWithTheRoleAndEndWithDone) {
  ResponseHeader h;
  h.endpoint = Endpoint::kChat;
  h.id = "chatcmpl-1";
  h.model = "m";
  ResponseBuilder b(h, /*include_usage=*/false);
  std::string events;
  ced::v1::GenerateResponse delta;
  delta.set_text("Hi");
  b.AppendEvents(delta, &events);
  ced::v1::GenerateResponse final;
  final.set_finish_reason(ced::v1::FINISH_REASON_STOP);
  final.mutable_usage()->set_completion_tokens(2);
  b.AppendEvents(final, &events);
  events += b.End(grpc::Status::OK);
  EXPECT_EQ(events.find("data: {"), 0u);
  const size_t n = events.size();
  EXPECT_EQ(events.substr(n - 14), "data: [DONE]\n\n");
  const Json first = Json::parse(events.substr(6, events.find("\n\n") - 6));
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_NE(events.find(R"("finish_reason":"stop")"), std::string::npos);
  const std::string error = b.End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  EXPECT_NE(error.find(R"("error":)"), std::string::npos);
}

// A text delta's event comes from a template made once per stream: byte for
// byte what the whole chunk rendered anew gives, whatever the text, the
// header's strings (a model named like the key the template looks for) or
// the endpoint.
TEST(OpenAiProtocolTest, TextEventsEqualTheWholeChunkRenderedAnew) {
  const std::vector<std::string> texts = {"Hi",
                                          " world",
                                          "\"quoted\" and \\ back",
                                          "line\nbreak\tand\r",
                                          "\x01\x1f\x7f",
                                          "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x99\x82",
                                          "\xff\xfe broken \xc3",
                                          "\"text\":\"x\"",
                                          "x",
                                          "</script>"};
  const std::vector<std::string> models = {"m", R"(m"text":"x")", R"(m","content":"x")",
                                           "caf\xc3\xa9\n"};
  for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
    for (const bool usage : {false, true}) {
      for (const std::string& model : models) {
        ResponseHeader h;
        h.endpoint = endpoint;
        h.id = endpoint == Endpoint::kChat ? "chatcmpl-7" : "cmpl-7";
        h.created = 1765000000;
        h.model = model;
        h.system_fingerprint = "fp_1";
        ResponseBuilder b(h, usage);
        std::string events;
        std::string expected;
        bool first = true;
        for (const std::string& text : texts) {
          ced::v1::GenerateResponse delta;
          delta.set_text(text);
          b.AppendEvents(delta, &events);
          if (first && endpoint == Endpoint::kChat) {
            expected += "data: " + ChunkJson(h, "", "", /*role_only=*/true, usage) + "\n\n";
          }
          first = false;
          expected += "data: " + ChunkJson(h, text, "", false, usage) + "\n\n";
        }
        EXPECT_EQ(events, expected) << "model " << model << ", usage " << usage;
        // Each event is JSON whose text is the delta's (invalid UTF-8 replaced).
        const size_t last = events.rfind("data: ", events.size() - 3);
        const Json chunk = Json::parse(events.substr(last + 6, events.size() - last - 8));
        const Json& choice = chunk["choices"][0];
        EXPECT_EQ(endpoint == Endpoint::kChat ? choice["delta"]["content"] : choice["text"],
                  "</script>");
        EXPECT_EQ(chunk["model"], model);
      }
    }
  }
}

}  // namespace
}  // namespace ced::gateway::openai
