#include "services/gateway/request_validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "services/gateway/request_parsing.h"

namespace ced::gateway {
namespace {

using ced::v1::GenerateRequest;

class RequestValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ByteTokenizer::Options options;
    options.vocab_size = 260;
    auto tokenizer = ByteTokenizer::Create(options);
    ASSERT_TRUE(tokenizer.ok());
    tokenizer_ = std::move(*tokenizer);
    limits_.vocab_size = 260;
    limits_.max_position = 64;
  }
  absl::StatusOr<ValidatedRequest> Validate(const GenerateRequest& r) {
    return ValidateGenerateRequest(r, *tokenizer_, limits_);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  RequestLimits limits_;
};

TEST_F(RequestValidationTest, AcceptsAndResolvesDefaults) {
  GenerateRequest r;
  r.set_prompt("hi");
  r.set_add_bos(true);
  r.set_top_p(0);
  r.add_stop("\n");
  r.add_stop_token_ids(10);
  r.set_replay_on(ced::v1::REPLAY_ON_DECODE);
  r.set_max_tokens(16);
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt_token_ids, (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(v->max_tokens, 16);
  EXPECT_EQ(v->sampling.top_p, 1.0f);
  EXPECT_EQ(v->replay_on, ced::internal::REPLAY_ON_DECODE);
  EXPECT_EQ(v->stop_token_ids, (std::vector<int32_t>{10}));
  EXPECT_EQ(v->sampling.presence_penalty, 0.0f);
  EXPECT_FALSE(v->sampling.has_penalties());
  r.set_presence_penalty(-2.0f);  // the ends of the range are allowed
  r.set_frequency_penalty(2.0f);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->sampling.presence_penalty, -2.0f);
  EXPECT_EQ(v->sampling.frequency_penalty, 2.0f);
  EXPECT_EQ(v->sampling.repetition_penalty, 1.0f) << "0 (unset) means off";
  r.set_repetition_penalty(1.2f);
  (*r.mutable_logit_bias())[9] = -100.0f;
  (*r.mutable_logit_bias())[3] = 100.0f;
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(v->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 100.0f}, {9, -100.0f}}));
}

TEST_F(RequestValidationTest, MaxTokensIsRequiredAndMustFitTheContext) {
  GenerateRequest r;
  r.mutable_prompt_token_ids()->Resize(60, 1);
  auto v = Validate(r);  // max_tokens left 0
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message().rfind("max_tokens:", 0), 0u) << v.status();
  r.set_max_tokens(4);  // exactly the room left
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->max_tokens, 4);
}

TEST_F(RequestValidationTest, EveryBadFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string field;
    std::function<void(GenerateRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"prompt", [](GenerateRequest* r) { r->clear_prompt(); }},
      {"prompt", [](GenerateRequest* r) { r->add_prompt_token_ids(1); }},
      {"prompt_token_ids[1]",
       [](GenerateRequest* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(1);
         r->add_prompt_token_ids(260);
       }},
      {"prompt_token_ids[0]",
       [](GenerateRequest* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(-1);
       }},
      {"prompt", [](GenerateRequest* r) { r->set_prompt(std::string(64, 'x')); }},
      {"max_tokens", [](GenerateRequest* r) { r->set_max_tokens(-3); }},
      {"max_tokens", [](GenerateRequest* r) { r->set_max_tokens(0); }},
      {"max_tokens", [](GenerateRequest* r) { r->set_max_tokens(62); }},
      {"temperature", [](GenerateRequest* r) { r->set_temperature(-0.5f); }},
      {"temperature", [=](GenerateRequest* r) { r->set_temperature(nan); }},
      {"temperature", [=](GenerateRequest* r) { r->set_temperature(inf); }},
      {"top_p", [](GenerateRequest* r) { r->set_top_p(1.5f); }},
      {"top_p", [](GenerateRequest* r) { r->set_top_p(-0.1f); }},
      {"top_p", [=](GenerateRequest* r) { r->set_top_p(nan); }},
      {"top_k", [](GenerateRequest* r) { r->set_top_k(-1); }},
      {"presence_penalty", [](GenerateRequest* r) { r->set_presence_penalty(2.5f); }},
      {"presence_penalty", [=](GenerateRequest* r) { r->set_presence_penalty(nan); }},
      {"frequency_penalty", [](GenerateRequest* r) { r->set_frequency_penalty(-2.01f); }},
      {"frequency_penalty", [=](GenerateRequest* r) { r->set_frequency_penalty(-inf); }},
      {"repetition_penalty", [](GenerateRequest* r) { r->set_repetition_penalty(-1.0f); }},
      {"repetition_penalty", [=](GenerateRequest* r) { r->set_repetition_penalty(nan); }},
      {"logit_bias[300]", [](GenerateRequest* r) { (*r->mutable_logit_bias())[300] = 1.0f; }},
      {"logit_bias[-2]", [](GenerateRequest* r) { (*r->mutable_logit_bias())[-2] = 1.0f; }},
      {"logit_bias[7]", [](GenerateRequest* r) { (*r->mutable_logit_bias())[7] = 101.0f; }},
      {"logit_bias[7]", [=](GenerateRequest* r) { (*r->mutable_logit_bias())[7] = nan; }},
      {"logit_bias",
       [](GenerateRequest* r) {
         for (int i = 0; i <= 1024; ++i) (*r->mutable_logit_bias())[i] = 0.0f;
       }},
      {"top_logprobs", [](GenerateRequest* r) { r->set_top_logprobs(2); }},  // no logprobs
      {"top_logprobs",
       [](GenerateRequest* r) {
         r->set_logprobs(true);
         r->set_top_logprobs(21);
       }},
      {"top_logprobs",
       [](GenerateRequest* r) {
         r->set_logprobs(true);
         r->set_top_logprobs(-1);
       }},
      {"stop",
       [](GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->add_stop("s");
       }},
      {"stop[1]",
       [](GenerateRequest* r) {
         r->add_stop("ok");
         r->add_stop("");
       }},
      {"stop[0]", [](GenerateRequest* r) { r->add_stop(std::string(257, 'x')); }},
      {"stop_token_ids[0]", [](GenerateRequest* r) { r->add_stop_token_ids(999); }},
      {"stop_token_ids",
       [](GenerateRequest* r) {
         for (int i = 0; i < 65; ++i) r->add_stop_token_ids(1);
       }},
      {"request_id", [](GenerateRequest* r) { r->set_request_id(std::string(129, 'a')); }},
      {"request_id", [](GenerateRequest* r) { r->set_request_id("a b"); }},
      {"session_id", [](GenerateRequest* r) { r->set_session_id(std::string(257, 's')); }},
      {"session_id", [](GenerateRequest* r) { r->set_session_id("tab\there"); }},
      {"replay_on",
       [](GenerateRequest* r) { r->set_replay_on(static_cast<ced::v1::ReplayOn>(9)); }},
      {"replay_mode",
       [](GenerateRequest* r) { r->set_replay_mode(static_cast<ced::v1::ReplayMode>(3)); }},
  };
  for (const Case& c : cases) {
    GenerateRequest r;
    r.set_prompt("hello");
    r.set_max_tokens(8);
    c.mutate(&r);
    auto v = Validate(r);
    ASSERT_FALSE(v.ok()) << c.field;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(v.status().message().rfind(c.field + ":", 0), 0u)
        << "expected '" << c.field << ":' in: " << v.status().message();
  }
}

TEST_F(RequestValidationTest, LogprobsArePassedThrough) {
  GenerateRequest r;
  r.set_prompt("hello");
  r.set_max_tokens(4);
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->sampling.logprobs);
  r.set_logprobs(true);
  r.set_top_logprobs(20);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->sampling.logprobs);
  EXPECT_EQ(v->sampling.top_logprobs, 20);
}

TEST_F(RequestValidationTest, SessionIdIsAHintPassedThrough) {
  GenerateRequest r;
  r.set_prompt("hello");
  r.set_max_tokens(8);
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->session_id.empty());
  r.set_session_id(std::string(256, 'x'));  // any well-formed id, known or not
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->session_id, std::string(256, 'x'));
}

TEST(RequestParsingTest, InvalidUtf8NamesTheField) {
  // GenerateRequest{prompt: "\xff", stop: ["ok", "\xfe"]} written by hand.
  const std::string bytes = std::string("\x0a\x01\xff", 3) + std::string("\x42\x02ok", 4) +
                            std::string("\x42\x01\xfe", 3);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  GenerateRequest request;
  absl::Status status = ParseRequest(buffer, &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "prompt: invalid UTF-8");

  const std::string stop_only = std::string("\x42\x02ok", 4) + std::string("\x42\x01\xfe", 3);
  grpc::Slice slice2(stop_only);
  grpc::ByteBuffer buffer2(&slice2, 1);
  status = ParseRequest(buffer2, &request);
  EXPECT_EQ(status.message(), "stop[1]: invalid UTF-8");

  grpc::Slice garbage(std::string("\xff\xff\xff", 3));
  grpc::ByteBuffer buffer3(&garbage, 1);
  status = ParseRequest(buffer3, &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("malformed"), std::string::npos);
}

TEST(RequestParsingTest, RoundTrips) {
  GenerateRequest request;
  request.set_prompt("héllo");
  request.add_stop("\n");
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeMessage(request, &buffer).ok());
  GenerateRequest parsed;
  ASSERT_TRUE(ParseRequest(buffer, &parsed).ok());
  EXPECT_EQ(parsed.prompt(), "héllo");
  EXPECT_EQ(parsed.stop(0), "\n");
}

}  // namespace
}  // namespace ced::gateway
