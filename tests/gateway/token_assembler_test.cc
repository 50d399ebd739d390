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

TEST_F(TokenAssemblerTest, FinishReleasesHeldText) {
  TokenAssembler a(tokenizer_.get(), {"abc"}, 10);
  a.Add(0, Bytes("xab"));
  EXPECT_EQ(a.TakeReady().text, "x");
  EXPECT_EQ(a.Finish(), "ab");
  EXPECT_FALSE(a.stopped());
}

}  // namespace
}  // namespace ced::gateway
