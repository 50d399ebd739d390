#include "bench/loadgen/report.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "bench/common/flags.h"
#include "bench/loadgen/flags.h"
#include "bench/loadgen/progress.h"
#include "gtest/gtest.h"

namespace ced::loadgen {
namespace {

RunSummary Summary(const std::string& label, bool decoder_only) {
  RunSummary s;
  s.label = label;
  s.target = "127.0.0.1:1";
  s.model_name = decoder_only ? "tiny-dec" : "tiny";
  s.num_layers = 8;
  s.num_encoder_layers = decoder_only ? 8 : 4;
  s.decoder_only = decoder_only;
  s.rate = 2;
  RequestRecord ok;
  ok.index = 0;
  ok.sent_s = 0;
  ok.first_token_s = 0.1;
  ok.end_s = 0.5;
  ok.output_tokens = 5;
  ok.server_queue_ms = 10;
  ok.server_prefill_ms = 30;
  ok.server_transfer_ms = 5;
  ok.server_ttft_ms = 60;
  ok.replay_on_decode = true;
  RequestRecord bad;
  bad.index = 1;
  bad.sent_s = 0.2;
  bad.end_s = 0.3;
  bad.outcome = "RESOURCE_EXHAUSTED";
  bad.error_message = "no room";
  s.records = {ok, bad};
  s.report = ComputeReport(s.records, Slo{200, 0});
  return s;
}

TEST(LoadgenReportJsonTest, HoldsEveryRunAndItsCounts) {
  ReportContext ctx;
  ctx.workload.seed = 9;
  ctx.run.duration_s = 5;
  ctx.include_records = true;
  const auto doc =
      nlohmann::json::parse(ReportJson(ctx, {Summary("ced", false), Summary("dec", true)}));
  EXPECT_EQ(doc["workload"]["seed"], 9);
  EXPECT_EQ(doc["slo"]["ttft_ms"], 200.0);
  ASSERT_EQ(doc["runs"].size(), 2u);
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["label"], "ced");
  EXPECT_EQ(run["issued"], 2);
  EXPECT_EQ(run["succeeded"], 1);
  EXPECT_EQ(run["errors"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(run["first_errors"]["RESOURCE_EXHAUSTED"], "no room");
  EXPECT_EQ(run["slo_met"], 1);
  EXPECT_NEAR(run["ttft_ms"]["p50"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(run["tpot_ms"]["p50"].get<double>(), 100, 1e-9);
  ASSERT_EQ(run["requests"].size(), 2u);
  EXPECT_EQ(run["requests"][1]["outcome"], "RESOURCE_EXHAUSTED");
  EXPECT_FALSE(run["requests"][1].contains("ttft_ms"));
  EXPECT_EQ(run["requests"][0]["server_ms"]["prefill"], 30.0);
  EXPECT_EQ(run["server_ms"]["ttft"]["count"], 1);
  EXPECT_EQ(run["server_ms"]["queue"]["mean"], 10.0);
  EXPECT_EQ(run["replays_on_decode"], 1);
  EXPECT_TRUE(doc["runs"][1]["model"]["decoder_only"].get<bool>());
  ctx.include_records = false;
  const auto brief = nlohmann::json::parse(ReportJson(ctx, {Summary("ced", false)}));
  EXPECT_FALSE(brief["runs"][0].contains("requests"));
}

// Each outcome keeps the message of its lowest-indexed request, whatever
// order the requests ended in; an outcome without a message shows none.
TEST(LoadgenReportTest, FirstErrorOfEachOutcomeByIndex) {
  std::vector<RequestRecord> records(4);
  const char* outcomes[] = {"UNAVAILABLE", "UNAVAILABLE", "DEADLINE_EXCEEDED", "OK"};
  for (int i = 0; i < 4; ++i) {
    records[static_cast<size_t>(i)].index = 3 - i;  // ended in reverse order
    records[static_cast<size_t>(i)].outcome = outcomes[i];
    records[static_cast<size_t>(i)].error_message = absl::StrCat("message ", 3 - i);
  }
  records[2].error_message.clear();
  const RunReport r = ComputeReport(records, Slo{});
  EXPECT_EQ(r.first_errors.at("UNAVAILABLE"), "message 2");
  EXPECT_EQ(r.first_errors.at("DEADLINE_EXCEEDED"), "");
  EXPECT_EQ(r.first_errors.count("OK"), 0u);
  EXPECT_EQ(ErrorsLine(r.errors, r.first_errors),
            "DEADLINE_EXCEEDED 1, UNAVAILABLE 2 (first: \"message 2\")");
}

TEST(LoadgenReportMarkdownTest, OneRowPerRunAndErrors) {
  const std::string md = ReportMarkdown({Summary("ced", false), Summary("dec", true)});
  EXPECT_NE(md.find("| ced | tiny (CED 4+4) | 2/s | 2 | 1 | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| dec | tiny-dec (decoder-only 8) | 2/s |"), std::string::npos) << md;
  EXPECT_NE(md.find("Errors, ced at 2/s: RESOURCE_EXHAUSTED 1 (first: \"no room\")\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("TTFT <= 200 ms, TPOT unbounded"), std::string::npos) << md;
  const std::string main_table = md.substr(0, md.find("Where TTFT goes"));
  int rows = 0;
  for (size_t p = main_table.find("\n| "); p != std::string::npos;
       p = main_table.find("\n| ", p + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 2);  // header starts the text; two data rows follow the separator
  EXPECT_NE(md.find("| ced | 2/s | 100.0 | 60.0 | 10.0 | 30.0 | 5.0 | 1/1 |"), std::string::npos)
      << md;
}

// The OpenAI API gives a model's name only and no gateway timings: the
// report says so instead of printing 0s ("CED 0+0", "0.0 ms queue").
TEST(LoadgenReportMarkdownTest, RunWithoutModelFactsOrGatewayTimings) {
  RunSummary s = Summary("openai", false);
  s.num_layers = 0;
  s.num_encoder_layers = 0;
  for (RequestRecord& r : s.records) {
    r.server_queue_ms = r.server_prefill_ms = r.server_transfer_ms = r.server_ttft_ms = -1;
  }
  s.report = ComputeReport(s.records, Slo{});
  const std::string md = ReportMarkdown({s});
  EXPECT_NE(md.find("| openai | tiny | 2/s |"), std::string::npos) << md;
  EXPECT_NE(md.find("| openai | 2/s | 100.0 | – | – | – | – | – |"), std::string::npos) << md;
  EXPECT_EQ(ModelLabel("", 8, 4, false), "?");
  EXPECT_EQ(ModelLabel("tiny-dec", 8, 8, true), "tiny-dec (decoder-only 8)");
}

TEST(LoadgenFlagsTest, ParsesTypedFlagsAndLists) {
  bench::FlagSet f;
  int64_t n = 0;
  double d = 0;
  std::string s;
  bool b = false;
  f.Int("num", &n, "");
  f.Double("rate", &d, "");
  f.String("target", &s, "");
  f.Bool("verbose", &b, "");
  const char* argv[] = {"x", "--num=3", "--rate", "2.5", "--target=a=h:1,b=h:2", "--verbose"};
  ASSERT_TRUE(f.Parse(6, const_cast<char**>(argv)).ok());
  EXPECT_EQ(n, 3);
  EXPECT_EQ(d, 2.5);
  EXPECT_TRUE(b);
  auto targets = ParseTargets(s);
  ASSERT_TRUE(targets.ok());
  ASSERT_EQ(targets->size(), 2u);
  EXPECT_EQ((*targets)[1].label, "b");
  EXPECT_EQ((*targets)[1].address, "h:2");
  EXPECT_EQ((*ParseTargets("localhost:5"))[0].label, "gateway");
  EXPECT_FALSE(ParseTargets("a=h:1,a=h:2").ok());
  EXPECT_FALSE(ParseTargets("a=").ok());
  EXPECT_EQ(ParseTargets("a=h:1,b=http://h:2").status().message(),
            "--target: 'http://h:2' is a URL; give host:port (e.g. 127.0.0.1:50050)");
  EXPECT_EQ(ParseTargets("h").status().message(), "--target: 'h' is not host:port");
  auto rates = bench::ParseDoubleList("rate", "1, 2,4.5");
  ASSERT_TRUE(rates.ok());
  EXPECT_EQ(*rates, (std::vector<double>{1, 2, 4.5}));
  EXPECT_FALSE(bench::ParseDoubleList("rate", "1,,2").ok());
}

TEST(LoadgenFlagsTest, ErrorsNameTheFlag) {
  bench::FlagSet f;
  int64_t n = 0;
  f.Int("num", &n, "");
  const char* bad[] = {"x", "--num=abc"};
  absl::Status s = f.Parse(2, const_cast<char**>(bad));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--num"), std::string::npos);
  const char* unknown[] = {"x", "--nope=1"};
  s = f.Parse(2, const_cast<char**>(unknown));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--nope"), std::string::npos);
}

TEST(LoadgenProgressTest, FractionFollowsTheTighterBound) {
  Progress p;
  p.elapsed_s = 5;
  p.issued = 30;
  EXPECT_DOUBLE_EQ(ProgressFraction(p, {10, 0}), 0.5);
  EXPECT_DOUBLE_EQ(ProgressFraction(p, {0, 40}), 0.75);
  EXPECT_DOUBLE_EQ(ProgressFraction(p, {10, 40}), 0.75);
  p.issuing_done = true;
  EXPECT_DOUBLE_EQ(ProgressFraction(p, {10, 40}), 1.0);
  p.in_flight = 2;
  p.done = 28;
  const std::string bar = FormatProgress(p, {10, 40}, true);
  EXPECT_EQ(bar.rfind("[########################] 100%", 0), 0u) << bar;
  EXPECT_NE(bar.find("in flight 2"), std::string::npos);
  EXPECT_NE(bar.find("(draining)"), std::string::npos);
  EXPECT_EQ(FormatProgress(p, {10, 40}, false).find('['), std::string::npos);
}

}  // namespace
}  // namespace ced::loadgen
