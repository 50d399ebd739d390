// Unit tests of the tokenizer.json components (pre-tokenizer behaviours,
// normalizers, BPE, added tokens, decoding, configuration, errors) on small
// hand-made tokenizer.json files. Equality with the reference on real files
// is hf_reference_test.
#include "engine/tokenizer/hf_tokenizer.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/utf8_scan.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ced {
namespace {

using json = nlohmann::json;
namespace ti = tokenizer_internal;

std::vector<std::string> Pieces(const json& config, const std::string& text) {
  auto pipeline = ti::CreatePreTokenizer(config, "pre_tokenizer");
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  std::vector<std::string_view> pieces = {text}, next;
  std::deque<std::string> arena;
  for (const auto& step : pipeline->steps) {
    next.clear();
    for (std::string_view p : pieces) step->Split(p, &arena, &next);
    pieces.swap(next);
  }
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

json SplitRegex(const std::string& regex, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", behavior},
          {"invert", invert}};
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, SplitBehaviours) {
  const std::string text = "a-b--c";
  EXPECT_EQ(Pieces(SplitRegex("-", "Isolated"), text), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(Pieces(SplitRegex("-", "Removed"), text), (V{"a", "b", "c"}));
  EXPECT_EQ(Pieces(SplitRegex("-", "MergedWithPrevious"), text), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(Pieces(SplitRegex("-", "MergedWithNext"), text), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(Pieces(SplitRegex("-", "Contiguous"), text), (V{"a", "-", "b", "--", "c"}));
  // invert: the matches are the pieces, the rest are delimiters.
  EXPECT_EQ(Pieces(SplitRegex("[a-z]", "Removed", true), text), (V{"a", "b", "c"}));
  EXPECT_EQ(Pieces(SplitRegex("[a-z]", "Isolated", true), text), (V{"a", "-", "b", "--", "c"}));
  const json literal = {
      {"type", "Split"}, {"pattern", {{"String", "--"}}}, {"behavior", "Isolated"}};
  EXPECT_EQ(Pieces(literal, text), (V{"a-b", "--", "c"}));
}

TEST(PreTokenizerTest, OnigurumaRegexFeatures) {
  // \p{..}, ASCII-only (?i:..) and a lookahead, as in the Qwen2 pattern.
  const json qwen = SplitRegex(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      "Isolated");
  EXPECT_EQ(Pieces(qwen, "IT'S 42 héllo   wörld\n\n"),
            (V{"IT", "'S", " ", "4", "2", " héllo", "  ", " wörld", "\n\n"}));
  EXPECT_EQ(Pieces(qwen, "'\xC5\xBF"), (V{"'\xC5\xBF"}));  // 'ſ: one piece ([^..]?\p{L}+)
  const json digits3 = SplitRegex("\\p{N}{1,3}", "Isolated");
  EXPECT_EQ(Pieces(digits3, "x1234567"), (V{"x", "123", "456", "7"}));
}

TEST(PreTokenizerTest, DigitsSequenceAndByteLevel) {
  EXPECT_EQ(Pieces({{"type", "Digits"}, {"individual_digits", true}}, "ab12c"),
            (V{"ab", "1", "2", "c"}));
  EXPECT_EQ(Pieces({{"type", "Digits"}, {"individual_digits", false}}, "ab12c"),
            (V{"ab", "12", "c"}));
  const json gpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(Pieces(gpt2, "Hello world's  x"), (V{" Hello", " world", "'s", " ", " x"}));
  const json seq = {
      {"type", "Sequence"},
      {"pretokenizers",
       {SplitRegex("\\s+", "Removed"), {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_EQ(Pieces(seq, "a  b"), (V{"a", "b"}));
}

TEST(PreTokenizerTest, UnsupportedComponentsAreNamed) {
  auto s = ti::CreatePreTokenizer({{"type", "Whitespace"}}, "tokenizer.json: pre_tokenizer");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.status().message().find("\"Whitespace\""), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("pre_tokenizer"), std::string::npos) << s.status();
  s = ti::CreatePreTokenizer(SplitRegex("(", "Isolated"), "p");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  s = ti::CreatePreTokenizer(SplitRegex("a", "Sideways"), "p");
  EXPECT_NE(s.status().message().find("Sideways"), std::string::npos) << s.status();
  auto n = ti::CreateNormalizer({{"type", "Lowercase"}}, "tokenizer.json: normalizer");
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(n.status().message().find("Lowercase"), std::string::npos) << n.status();
}

TEST(NormalizerTest, NfcAndSequence) {
  auto nfc = ti::CreateNormalizer({{"type", "NFC"}}, "n");
  ASSERT_TRUE(nfc.ok());
  std::string scratch;
  EXPECT_EQ((*nfc)->Apply("e\xCC\x81", &scratch), "\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ((*nfc)->Apply("plain", &scratch), "plain");
  auto seq = ti::CreateNormalizer(
      {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "NFC"}}}}}, "n");
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ((*seq)->Apply("\xC3\xA9", &scratch), "\xC3\xA9");
  auto nfkc = ti::CreateNormalizer({{"type", "NFKC"}}, "n");
  EXPECT_EQ((*nfkc)->Apply("\xEF\xAC\x81", &scratch), "fi");  // ﬁ ligature
}

// A byte-level tokenizer: ids 0..255 are the bytes, then merges.
class TinyTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ced_hf_tokenizer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    for (int b = 0; b < 256; ++b) {
      std::string s;
      ti::AppendUtf8(ti::kByteToCodePoint[b], &s);
      vocab_[s] = b;
    }
    for (const char* t : {"he", "ll", "hell", "hello", "aa", "aaaa", "\xC4\xA0w"}) {
      vocab_[t] = next_id_++;
    }
    root_ = {{"normalizer", {{"type", "NFC"}}},
             {"pre_tokenizer",
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
             {"post_processor", {{"type", "ByteLevel"}}},
             {"decoder", {{"type", "ByteLevel"}}},
             {"model",
              {{"type", "BPE"},
               {"vocab", vocab_},
               {"merges", {"h e", "l l", "he ll", "hell o", "a a", "aa aa", "\xC4\xA0 w"}}}},
             {"added_tokens",
              {{{"id", 300}, {"content", "<s>"}, {"special", true}},
               {{"id", 301}, {"content", "</s>"}, {"special", true}},
               {{"id", 302},
                {"content", "<x>"},
                {"special", false},
                {"lstrip", true},
                {"rstrip", true},
                {"normalized", false}}}}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const json& config = nullptr) {
    std::ofstream(dir_ / "tokenizer.json") << root_.dump();
    if (!config.is_null()) std::ofstream(dir_ / "tokenizer_config.json") << config.dump();
    return HfTokenizer::Create({(dir_ / "tokenizer.json").string(), "", 0});
  }

  std::filesystem::path dir_;
  json vocab_ = json::object();
  int next_id_ = 256;
  json root_;
};

TEST_F(TinyTokenizer, MergesInBothFormsAndLongWords) {
  auto t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("hello", false), (std::vector<int>{259}));
  EXPECT_EQ((*t)->Encode("hel w", false), (std::vector<int>{256, 'l', 262}));
  // 10 bytes (quadratic path) and 50 bytes (heap path): leftmost merges first.
  EXPECT_EQ((*t)->Encode(std::string(10, 'a'), false), (std::vector<int>{261, 261, 260}));
  std::vector<int> expected(12, 261);
  expected.push_back(260);
  EXPECT_EQ((*t)->Encode(std::string(50, 'a'), false), expected);
  root_["model"]["merges"] = json::array();
  for (auto m : {std::pair{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}) {
    root_["model"]["merges"].push_back({m.first, m.second});
  }
  t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("hello", false), (std::vector<int>{259}));
  EXPECT_EQ((*t)->vocab_size(), 303);
}

TEST_F(TinyTokenizer, AddedTokensStripAndSpecialsDecodeToNothing) {
  auto t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  // <x> strips the spaces beside it; <s> does not.
  EXPECT_EQ((*t)->Encode("he  <x>  he<s> ", false), (std::vector<int>{256, 302, 256, 300, ' '}));
  EXPECT_TRUE((*t)->IsSpecial(300));
  EXPECT_EQ((*t)->TokenBytes(300), "");
  EXPECT_EQ((*t)->TokenBytes(302), "<x>");
  EXPECT_EQ((*t)->TokenBytes(262), " w");  // byte-level spelling undone
  EXPECT_EQ((*t)->Decode({300, 259, 302, 262, 301}), "hello<x> w");
}

TEST_F(TinyTokenizer, NormalizesAndReplacesIllFormedUtf8) {
  auto t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("e\xCC\x81", false), (*t)->Encode("\xC3\xA9", false));  // NFC
  EXPECT_EQ((*t)->Encode("a\xFF"
                         "b\xE2\x82",
                         false),
            (*t)->Encode("a\xEF\xBF\xBD"
                         "b\xEF\xBF\xBD",
                         false));
}

TEST_F(TinyTokenizer, StreamingDecodeNeverSplitsACharacter) {
  auto t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int> ids = (*t)->Encode("h\xE2\x82\xAC\xF0\x9F\x98\x80!", false);
  IncrementalDecoder stream(t->get());
  std::string all;
  for (int id : ids) {
    const std::string delta = stream.Feed(id);
    EXPECT_TRUE(delta.empty() || (static_cast<unsigned char>(delta[0]) & 0xC0) != 0x80);
    all += delta;
  }
  all += stream.Flush();
  EXPECT_EQ(all, "h\xE2\x82\xAC\xF0\x9F\x98\x80!");
  EXPECT_EQ(all, (*t)->Decode(ids));
}

TEST_F(TinyTokenizer, BosAndEosFromConfigOrTemplate) {
  auto t = Load();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_EQ((*t)->Encode("he", true), (std::vector<int>{256}));
  t = Load({{"add_bos_token", true},
            {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
            {"eos_token", "</s>"}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 300);
  EXPECT_EQ((*t)->eos_id(), 301);
  EXPECT_EQ((*t)->Encode("he", true), (std::vector<int>{300, 256}));
  EXPECT_EQ((*t)->Encode("he", false), (std::vector<int>{256}));
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  root_["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single",
                              {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                               {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}}};
  t = Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("he", true), (std::vector<int>{300, 256, 301}));
  t = Load({{"bos_token", "<nope>"}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("bos_token"), std::string::npos) << t.status();
}

TEST_F(TinyTokenizer, UnsupportedComponentsAndSmallVocabGiveClearErrors) {
  root_["model"]["type"] = "WordPiece";
  auto t = Load();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("WordPiece"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos) << t.status();
  root_["model"]["type"] = "BPE";
  root_["decoder"] = {{"type", "Metaspace"}};
  t = Load();
  EXPECT_NE(t.status().message().find("Metaspace"), std::string::npos) << t.status();
  root_["decoder"] = {{"type", "ByteLevel"}};
  root_["model"]["merges"].push_back("x yz");
  t = Load();
  EXPECT_NE(t.status().message().find("merges[7]"), std::string::npos) << t.status();
  root_["model"]["merges"].erase(7);
  ASSERT_TRUE(Load().ok());
  auto small = CreateTokenizer(dir_.string(), 300);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("vocab_size is 300"), std::string::npos)
      << small.status();
  EXPECT_NE(small.status().message().find("302"), std::string::npos) << small.status();
  auto fits = CreateTokenizer(dir_.string(), 512);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ((*fits)->vocab_size(), 512);
  EXPECT_EQ((*fits)->TokenBytes(400), "");
}

TEST_F(TinyTokenizer, SharedAcrossThreads) {
  auto t = Load();
  ASSERT_TRUE(t.ok());
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("hello w" + std::string(i % 60, 'a') + std::to_string(i));
  std::vector<std::vector<int>> expected;
  for (const auto& s : texts) expected.push_back((*t)->Encode(s, false));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        for (size_t i = 0; i < texts.size(); ++i)
          bad += (*t)->Encode(texts[i], false) != expected[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace ced
