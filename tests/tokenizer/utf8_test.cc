#include "engine/tokenizer/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace ced {
namespace {

const std::string kFffd(kUtf8Replacement);

TEST(Utf8Test, ValidTextPassesThrough) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  EXPECT_EQ(ToValidUtf8(text), text);
  EXPECT_EQ(ToValidUtf8(""), "");
  EXPECT_EQ(ToValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8Test, IllFormedBytesBecomeReplacementCharacters) {
  EXPECT_EQ(ToValidUtf8("\x80"), kFffd);                                      // lone continuation
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), kFffd + kFffd);                          // overlong lead
  EXPECT_EQ(ToValidUtf8("\xE0\x80\x80"), kFffd + kFffd + kFffd);              // overlong 3-byte
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // surrogate U+D800
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(ToValidUtf8("\xFF"), kFffd);
  // A truncated sequence is one maximal subpart: one U+FFFD, then the next char.
  EXPECT_EQ(ToValidUtf8("\xE2\x82"
                        "a"),
            kFffd + "a");
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(ToValidUtf8("\xC3"), kFffd);
}

TEST(Utf8Test, IncompleteTailIsHeldBackUnlessAtEnd) {
  std::string out;
  EXPECT_EQ(AppendValidUtf8("ab\xF0\x9F", /*at_end=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  // An invalid tail is not held back: it can never become valid.
  EXPECT_EQ(AppendValidUtf8("ab\xF0\x41", /*at_end=*/false, &out), 4u);
  EXPECT_EQ(out, "ab" + kFffd + "A");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("\xE2\x82", /*at_end=*/true, &out), 2u);
  EXPECT_EQ(out, kFffd);
}

}  // namespace
}  // namespace ced
