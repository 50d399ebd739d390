// The benches' shared toolkit (bench/common): the flag parser, the list flags
// and the percentiles every report uses.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "gtest/gtest.h"

namespace ced::bench {
namespace {

absl::Status Parse(FlagSet& f, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return f.Parse(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

TEST(BenchFlagSetTest, ParsesEveryKindAndBothValueForms) {
  FlagSet f;
  int i = 1;
  int64_t big = 0;
  double d = 0;
  std::string s = "x";
  bool b = false, off = true;
  f.Int("i", &i, "");
  f.Int("big", &big, "");
  f.Double("d", &d, "");
  f.String("s", &s, "");
  f.Bool("b", &b, "");
  f.Bool("off", &off, "");
  ASSERT_TRUE(
      Parse(f, {"--i=3", "--big", "5000000000", "--d=2.5", "--s", "a=b", "--b", "--off=0"}).ok());
  EXPECT_EQ(i, 3);
  EXPECT_EQ(big, 5000000000);
  EXPECT_EQ(d, 2.5);
  EXPECT_EQ(s, "a=b");
  EXPECT_TRUE(b);
  EXPECT_FALSE(off);
  EXPECT_FALSE(f.help_requested());
  ASSERT_TRUE(Parse(f, {"-h"}).ok());
  EXPECT_TRUE(f.help_requested());
}

TEST(BenchFlagSetTest, ErrorsNameTheFlag) {
  FlagSet f;
  int i = 0;
  f.Int("num", &i, "");
  EXPECT_EQ(Parse(f, {"--num=abc"}).message(), "--num: bad value 'abc' (expected an integer)");
  EXPECT_EQ(Parse(f, {"--num"}).message(), "flag --num needs a value");
  EXPECT_EQ(Parse(f, {"--nope=1"}).message(), "unknown flag --nope (see --help)");
  EXPECT_EQ(Parse(f, {"positional"}).message(), "unexpected argument 'positional'");
}

TEST(BenchFlagSetTest, HelpShowsDefaults) {
  FlagSet f;
  int n = 7;
  std::string empty;
  f.Int("n", &n, "how many");
  f.String("path", &empty, "where");
  const std::string help = f.Help("prog [flags]", "Does things.");
  EXPECT_EQ(help.rfind("Usage: prog [flags]\n\nDoes things.\n\nFlags:\n", 0), 0u) << help;
  // One column of flags (the CLI's help layout): names padded to 28 characters.
  auto row = [](const std::string& head, const std::string& text) {
    return "\n" + head + std::string(28 - head.size(), ' ') + text + "\n";
  };
  EXPECT_NE(help.find(row("  --n=7", "how many")), std::string::npos) << help;
  EXPECT_NE(help.find(row("  --path=\"\"", "where")), std::string::npos) << help;
  EXPECT_NE(help.find(row("  --help", "this text")), std::string::npos) << help;
}

TEST(BenchListFlagsTest, PositiveIntsAndDoubles) {
  EXPECT_EQ(*ParsePositiveInts("b", "1,16,,4"), (std::vector<int>{1, 16, 4}));
  EXPECT_EQ(ParsePositiveInts("b", "1,0").status().message(), "--b: '0' is not a positive integer");
  EXPECT_EQ(ParsePositiveInts("b", ",").status().message(), "--b is empty");
  EXPECT_EQ(*ParseDoubleList("rate", "1, 2,4.5"), (std::vector<double>{1, 2, 4.5}));
  EXPECT_FALSE(ParseDoubleList("rate", "1,,2").ok());
}

TEST(BenchPercentileTest, LinearInterpolationBetweenClosestRanks) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // any order
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 90.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99.01);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 25), 12.5);
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 50), 2);
}

TEST(BenchPercentileTest, EdgeCases) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 0), 7);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({1, 2, 3}, -5), 1);   // clamped
  EXPECT_EQ(Percentile({1, 2, 3}, 250), 3);  // clamped
}

TEST(BenchPercentileTest, SummarizeQuartilesMatchPercentile) {
  const Summary s = Summarize({4, 1, 3, 2, 10});
  EXPECT_EQ(s.n, 5);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.median, Percentile({4, 1, 3, 2, 10}, 50));
  EXPECT_DOUBLE_EQ(s.q1, Percentile({4, 1, 3, 2, 10}, 25));
  EXPECT_DOUBLE_EQ(s.q3, Percentile({4, 1, 3, 2, 10}, 75));
}

// A results path is checked before the run: writable paths pass (folders
// made, nothing left behind, an existing file untouched), others are refused
// naming the flag.
TEST(BenchCheckWritableTest, RefusesWhatCannotBeWrittenAndLeavesNothing) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bench_check_writable_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(CheckWritable("json", "").ok());
  const std::string fresh = (dir / "sub" / "r.json").string();
  EXPECT_TRUE(CheckWritable("json", fresh).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir / "sub"));
  EXPECT_FALSE(std::filesystem::exists(fresh));
  { std::ofstream(dir / "kept.md") << "old"; }
  EXPECT_TRUE(CheckWritable("md", (dir / "kept.md").string()).ok());
  std::ifstream kept(dir / "kept.md");
  std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "old");
  absl::Status s = CheckWritable("json", dir.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--json: cannot write"), std::string::npos) << s;
  EXPECT_NE(s.message().find("it is a folder"), std::string::npos) << s;
  s = CheckWritable("out", (dir / "kept.md" / "x").string());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--out: cannot write"), std::string::npos) << s;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ced::bench
