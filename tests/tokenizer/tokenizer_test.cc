#include "engine/tokenizer/tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ced {
namespace {

std::unique_ptr<ByteTokenizer> MakeByteTokenizer(int vocab_size = 258) {
  auto t = ByteTokenizer::Create({vocab_size});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

TEST(ByteTokenizerTest, EncodeDecodeRoundTrip) {
  auto t = MakeByteTokenizer();
  EXPECT_EQ(t->bos_id(), 256);
  EXPECT_EQ(t->eos_id(), 257);
  EXPECT_EQ(t->vocab_size(), 258);
  const std::string text = "h\xC3\xA9llo \xE2\x82\xAC";
  std::vector<int> ids = t->Encode(text, /*add_bos=*/true);
  ASSERT_EQ(ids.size(), text.size() + 1);
  EXPECT_EQ(ids[0], 256);
  EXPECT_EQ(ids[1], 'h');
  EXPECT_EQ(ids[2], 0xC3);
  EXPECT_EQ(t->Decode(ids), text);
  EXPECT_EQ(t->Encode("ab", /*add_bos=*/false), (std::vector<int>{'a', 'b'}));
}

TEST(ByteTokenizerTest, SpecialAndUnusedIdsDecodeToNothing) {
  auto t = MakeByteTokenizer(/*vocab_size=*/300);
  EXPECT_EQ(t->Decode({256, 'o', 257, 'k', 258, 299}), "ok");
  EXPECT_EQ(t->TokenBytes(-1), "");
  EXPECT_EQ(t->TokenBytes(1000), "");
}

TEST(ByteTokenizerTest, DecodeReplacesIllFormedBytes) {
  auto t = MakeByteTokenizer();
  EXPECT_EQ(t->Decode({'a', 0xFF, 'b'}),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(ByteTokenizerTest, RejectsTooSmallVocab) {
  auto t = ByteTokenizer::Create({257});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("vocab_size"), std::string::npos);
}

TEST(TokenizerTest, ValidateIdsNamesTheFirstBadIdAndIndex) {
  auto t = MakeByteTokenizer();
  EXPECT_TRUE(t->ValidateIds({0, 255, 256, 257}).ok());
  EXPECT_TRUE(t->ValidateIds({}).ok());
  absl::Status s = t->ValidateIds({1, 2, 300, -5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("300"), std::string::npos) << s;
  EXPECT_NE(s.message().find("index 2"), std::string::npos) << s;
  s = t->ValidateIds({-1});
  EXPECT_NE(s.message().find("-1 at index 0"), std::string::npos) << s;
}

TEST(IncrementalDecoderTest, HoldsBackIncompleteCharacters) {
  auto t = MakeByteTokenizer();
  IncrementalDecoder dec(t.get());
  EXPECT_EQ(dec.Feed('a'), "a");
  EXPECT_EQ(dec.Feed(0xF0), "");  // 😀 = F0 9F 98 80
  EXPECT_EQ(dec.Feed(0x9F), "");
  EXPECT_EQ(dec.Feed(256), "");  // a special token in between adds nothing
  EXPECT_EQ(dec.Feed(0x98), "");
  EXPECT_EQ(dec.Feed(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.Flush(), "");
}

TEST(IncrementalDecoderTest, InvalidBytesAndTruncatedTail) {
  auto t = MakeByteTokenizer();
  IncrementalDecoder dec(t.get());
  EXPECT_EQ(dec.Feed(0x80), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Feed(0xE2), "");
  EXPECT_EQ(dec.Feed('x'), "\xEF\xBF\xBDx");  // the broken sequence, then x
  EXPECT_EQ(dec.Feed(0xC3), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Flush(), "");
}

TEST(IncrementalDecoderTest, DeltasConcatenateToDecode) {
  auto t = MakeByteTokenizer();
  std::mt19937 rng(7);
  // Mostly valid multi-byte text with some random bytes mixed in.
  const std::string base = "na\xC3\xAFve \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD";
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> ids;
    for (int i = 0; i < 40; ++i) {
      if (rng() % 5 == 0) {
        ids.push_back(static_cast<int>(rng() % 258));
      } else {
        ids.push_back(static_cast<unsigned char>(base[rng() % base.size()]));
      }
    }
    IncrementalDecoder dec(t.get());
    std::string streamed;
    for (int id : ids) streamed += dec.Feed(id);
    streamed += dec.Flush();
    EXPECT_EQ(streamed, t->Decode(ids)) << "trial " << trial;
  }
}

class CreateTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ced_tokenizer_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CreateTokenizerTest, ByteTokenizerWithoutTokenizerJson) {
  auto t = CreateTokenizer(dir_, 512);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 512);
  EXPECT_EQ((*t)->Decode((*t)->Encode("hi", true)), "hi");
  EXPECT_TRUE(CreateTokenizer("", 258).ok());
}

// A tokenizer.json is loaded as an HfTokenizer (hf_tokenizer_test); one
// outside the supported subset (here: no byte-level pre-tokenizer or decoder)
// is refused, naming the file.
TEST_F(CreateTokenizerTest, UnsupportedTokenizerJsonIsRefused) {
  std::ofstream(dir_ + "/tokenizer.json") << "{}";
  auto t = CreateTokenizer(dir_, 512);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos) << t.status();
}

TEST_F(CreateTokenizerTest, Errors) {
  auto missing = CreateTokenizer(dir_ + "/nope", 512);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  auto small = CreateTokenizer(dir_, 100);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced
