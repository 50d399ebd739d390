#include "services/gateway/token_assembler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ced::gateway {
namespace {

std::vector<int32_t> Bytes(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

class TokenAssemblerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = ByteTokenizer::Create({});
    ASSERT_TRUE(tokenizer.ok());
    tokenizer_ = std::move(*tokenizer);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST(StopMatcherTest, PassesTextWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.Feed("abc"), "abc");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcherTest, HoldsBackAPossibleStartAndReleasesIt) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Feed("abcE"), "abc");
  EXPECT_EQ(m.Feed("N"), "");
  EXPECT_EQ(m.Feed("x"), "ENx");
  EXPECT_EQ(m.Feed("EN"), "");
  EXPECT_EQ(m.Flush(), "EN");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcherTest, MatchAcrossFeedsTruncates) {
  StopMatcher m({"\n\n", "END"});
  EXPECT_EQ(m.Feed("one E"), "one ");
  EXPECT_EQ(m.Feed("ND two"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_string(), "END");
  EXPECT_EQ(m.Feed("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EarliestMatchWins) {
  StopMatcher m({"cd", "bcd"});
  EXPECT_EQ(m.Feed("abcde"), "a");
  EXPECT_EQ(m.matched_string(), "bcd");
}

TEST_F(TokenAssemblerTest, EmitsInOrderOnceEach) {
  TokenAssembler a(tokenizer_.get(), {}, 100);
  a.Add(1, Bytes("ello"));  // step 0 not here yet
  TokenAssembler::Output out = a.TakeReady();
  EXPECT_TRUE(out.token_ids.empty());
  EXPECT_TRUE(a.has_gap());
  a.Add(0, Bytes("H"));
  out = a.TakeReady();
  EXPECT_EQ(out.token_ids, Bytes("Hello"));
  EXPECT_EQ(out.text, "Hello");
  a.Add(0, Bytes("Hel"));  // duplicates, same ids
  a.Add(5, Bytes("!"));
  out = a.TakeReady();
  EXPECT_EQ(out.token_ids, Bytes("!"));
  EXPECT_EQ(a.emitted(), 6);
  EXPECT_EQ(a.mismatches(), 0);
  a.Add(0, Bytes("X"));
  EXPECT_EQ(a.mismatches(), 1);
  EXPECT_EQ(a.Finish(), "");
  EXPECT_FALSE(a.has_gap());
}

TEST_F(TokenAssemblerTest, HoldsBackIncompleteUtf8) {
  TokenAssembler a(tokenizer_.get(), {}, 100);
  const std::string euro = "\xE2\x82\xAC";
  a.Add(0, Bytes(euro.substr(0, 2)));
  TokenAssembler::Output out = a.TakeReady();
  EXPECT_EQ(out.token_ids.size(), 2u);
  EXPECT_EQ(out.text, "");
  a.Add(2, Bytes(euro.substr(2)));
  EXPECT_EQ(a.TakeReady().text, euro);
  a.Add(3, Bytes("\xE2"));
  a.TakeReady();
  EXPECT_EQ(a.Finish(), "\xEF\xBF\xBD");
}

TEST_F(TokenAssemblerTest, StopStringDropsLaterTokens) {
  TokenAssembler a(tokenizer_.get(), {"lo"}, 100);
  a.Add(0, Bytes("Hello world"));
  TokenAssembler::Output out = a.TakeReady();
  EXPECT_TRUE(a.stopped());
  EXPECT_EQ(a.matched_stop(), "lo");
  EXPECT_EQ(out.text, "Hel");
  EXPECT_EQ(out.token_ids, Bytes("Hello"));  // up to the token completing the match
  EXPECT_EQ(a.emitted(), 5);
  a.Add(11, Bytes("x"));
  EXPECT_TRUE(a.TakeReady().token_ids.empty());
  EXPECT_EQ(a.Finish(), "");
}

TEST_F(TokenAssemblerTest, NeverEmitsMoreThanMaxTokens) {
  TokenAssembler a(tokenizer_.get(), {}, 3);
  a.Add(0, Bytes("abcdef"));
  EXPECT_EQ(a.TakeReady().token_ids, Bytes("abc"));
  EXPECT_FALSE(a.has_gap());
}

ced::internal::StepLogprobs Logprob(int32_t token, float logprob) {
  ced::internal::StepLogprobs l;
  l.mutable_token()->set_token_id(token);
  l.mutable_token()->set_logprob(logprob);
  auto* top = l.add_top();
  top->set_token_id(token + 1);
  top->set_logprob(logprob - 1);
  return l;
}

// Each step's logprobs leave with its token, in step order, whichever copy
// of the step brought them.
TEST_F(TokenAssemblerTest, LogprobsFollowTheirTokens) {
  TokenAssembler a(tokenizer_.get(), {}, 10);
  google::protobuf::RepeatedPtrField<ced::internal::StepLogprobs> later;
  *later.Add() = Logprob('c', -3);
  *later.Add() = Logprob('d', -4);
  a.Add(2, Bytes("cd"), &later);
  EXPECT_TRUE(a.TakeReady().token_ids.empty());  // steps 0 and 1 are missing
  a.Add(0, Bytes("a"));                          // a copy without them (not kept)...
  google::protobuf::RepeatedPtrField<ced::internal::StepLogprobs> first;
  *first.Add() = Logprob('a', -1);
  a.Add(0, Bytes("a"), &first);  // ...then the one with them
  *first.Mutable(0) = Logprob('b', -2);
  a.Add(1, Bytes("b"), &first);
  const TokenAssembler::Output out = a.TakeReady();
  EXPECT_EQ(out.token_ids, Bytes("abcd"));
  ASSERT_EQ(out.logprobs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.logprobs[i].token().token_id(), 'a' + i);
    EXPECT_EQ(out.logprobs[i].token().logprob(), -1.0f - i);
    ASSERT_EQ(out.logprobs[i].top_size(), 1);
    EXPECT_EQ(out.logprobs[i].top(0).token_id(), 'a' + i + 1);
  }
  // A mismatching duplicate neither replaces the step nor its logprobs.
  *first.Mutable(0) = Logprob('z', -9);
  a.Add(4, Bytes("e"));
  a.Add(4, Bytes("z"), &first);
  const TokenAssembler::Output next = a.TakeReady();
  EXPECT_EQ(next.token_ids, Bytes("e"));
  EXPECT_TRUE(next.logprobs.empty());
  EXPECT_EQ(a.mismatches(), 1);
}

TEST_F(TokenAssemblerTest, FinishReleasesHeldText) {
  TokenAssembler a(tokenizer_.get(), {"abc"}, 10);
  a.Add(0, Bytes("xab"));
  EXPECT_EQ(a.TakeReady().text, "x");
  EXPECT_EQ(a.Finish(), "ab");
  EXPECT_FALSE(a.stopped());
}

}  // namespace
}  // namespace ced::gateway
