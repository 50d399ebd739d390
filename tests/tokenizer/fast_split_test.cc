// The hand-written Split matchers (fast_split.h) against Oniguruma running the
// same patterns: hand-picked adversarial strings, then many random short
// strings (fixed seed) over an alphabet of tricky characters.
#include "engine/tokenizer/fast_split.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/onig_regex.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

namespace ti = tokenizer_internal;
using Ranges = std::vector<std::pair<size_t, size_t>>;

const char* const kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// As in DeepSeek-V3's tokenizer.json: literal CR and LF characters.
const char* const kDeepSeek =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
    "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const char* const kDigits3 = "\\p{N}{1,3}";
const char* const kCjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";

const char* const kPatterns[] = {kQwen2, kLlama3, kDeepSeek, kDigits3, kCjk};

// Characters that sit on the patterns' edges: ASCII letters of the
// contractions in both cases, digits, punctuation, every kind of space and
// line break, and non-ASCII letters, marks, numbers (Nd, Nl, No), punctuation,
// symbols, spaces and CJK at and around the range ends.
const std::vector<std::string>& Alphabet() {
  static const std::vector<std::string> alphabet = {
      "'",          "s",          "S",      "t",      "T",          "r",          "R",
      "e",          "E",          "v",      "V",      "m",          "M",          "l",
      "L",          "d",          "D",      "a",      "z",          "Z",          "x",
      "0",          "1",          "9",      " ",      " ",          " ",          "\t",
      "\r",         "\n",         "\x0b",   "\x0c",   "!",          "\"",         "#",
      ".",          ",",          "-",      "_",      "`",          "~",          "[",
      "\\",         "]",          "@",      "{",      "|",          "$",          "+",
      "<",          "=",          "^",      "\x01",   "\x7f",       "\u00a0",     "\u0085",
      "\u1680",     "\u2000",     "\u2028", "\u2029", "\u202f",     "\u3000",     "\ufeff",
      "\u200b",     "\u00e9",     "\u00df", "\u0301", "\u0903",     "\u05d0",     "\u0628",
      "\u0663",     "\u00b2",     "\u00bd", "\u2167", "\u3007",     "\u4e00",     "\u4dff",
      "\u9fa5",     "\u9fa6",     "\u3040", "\u303f", "\u309f",     "\u30a0",     "\u30fb",
      "\u30ff",     "\u3100",     "\u3002", "\u00ab", "\u2014",     "\u20ac",     "\u00a9",
      "\U0001F600", "\U0001F3FD", "\u200d", "\ufe0f", "\U00010400", "\U0001D7CE", "\uac00",
      "\u0e01",     "\u0e31",     "\u1100", "\u02b0", "\u00aa"};
  return alphabet;
}

void ExpectSameMatches(const std::string& pattern, const ti::FastSplitter& fast,
                       const ti::OnigRegex& onig, const std::string& text) {
  Ranges want, got;
  onig.Matches(text, &want);
  fast.Matches(text, &got);
  EXPECT_EQ(got, want) << "pattern /" << pattern << "/ on \"" << text << "\"";
}

TEST(FastSplitTest, KnownPatternsAreRecognizedOthersAreNot) {
  for (const char* p : kPatterns) EXPECT_NE(ti::CreateFastSplitter(p), nullptr) << p;
  EXPECT_EQ(ti::CreateFastSplitter("\\p{N}{1,2}"), nullptr);
  EXPECT_EQ(ti::CreateFastSplitter(std::string(kQwen2) + "|x"), nullptr);
}

TEST(FastSplitTest, AdversarialStringsMatchOniguruma) {
  const std::vector<std::string> texts = {"",
                                          " ",
                                          "  ",
                                          "   hello",
                                          "a  b",
                                          "a   \n  b",
                                          "x \t y",
                                          "it's It'S IT'RE we've I'M",
                                          "'ll 'LL 'Ll 'd 'x '",
                                          "don't",
                                          "''s",
                                          "1 12 123 1234 12345 123456 1234567",
                                          "a1b22c333",
                                          "!!!\n\n",
                                          "?!.\r\n\r\n x",
                                          "end  ",
                                          "end\t",
                                          "end\n",
                                          "\r\n",
                                          " \r\n ",
                                          "  \n\n  a",
                                          ":= foo(bar)->baz;",
                                          "#include <x>",
                                          " ...",
                                          " .x",
                                          "$Hello",
                                          "'Hello",
                                          "\ttab\tsep",
                                          "x\u00a0y",
                                          "\u00e9t\u00e9 caf\u00e9",
                                          "\u4e2d\u6587abc\u3053\u308c",
                                          "\u0663\u0664\u0665\u0666",
                                          "\u00b2\u00b3\u00b9\u00bc",
                                          "\U0001F600 \U0001F600!",
                                          "e\u0301\u0301",
                                          " \u0301a",
                                          "a\u3000\u3000b",
                                          "x\u2028\u2028",
                                          "\u0085\u0085a"};
  for (const char* pattern : kPatterns) {
    auto onig = ti::OnigRegex::Create(pattern, "test");
    ASSERT_TRUE(onig.ok()) << onig.status();
    auto fast = ti::CreateFastSplitter(pattern);
    ASSERT_NE(fast, nullptr);
    for (const std::string& text : texts) ExpectSameMatches(pattern, *fast, **onig, text);
  }
}

TEST(FastSplitTest, RandomStringsMatchOniguruma) {
  const auto& alphabet = Alphabet();
  for (const char* pattern : kPatterns) {
    auto onig = ti::OnigRegex::Create(pattern, "test");
    ASSERT_TRUE(onig.ok()) << onig.status();
    auto fast = ti::CreateFastSplitter(pattern);
    ASSERT_NE(fast, nullptr);
    std::mt19937 rng(20261203);
    for (int i = 0; i < 60000 && !HasFailure(); ++i) {
      const size_t length = rng() % 12;
      // Half the strings use only a small random subset, to make runs likely.
      size_t subset = rng() % 2 == 0 ? alphabet.size() : 2 + rng() % 4;
      std::vector<size_t> picks(subset);
      for (size_t& p : picks) p = rng() % alphabet.size();
      std::string text;
      for (size_t k = 0; k < length; ++k) text += alphabet[picks[rng() % picks.size()]];
      ExpectSameMatches(pattern, *fast, **onig, text);
    }
  }
}

}  // namespace
}  // namespace ced
