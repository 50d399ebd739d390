#include "bench/loadgen/stats.h"

#include "gtest/gtest.h"

namespace ced::loadgen {
namespace {

TEST(LoadgenSummarizeTest, MeanAndPercentiles) {
  const LatencySummary s = Summarize({4, 1, 3, 2});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.p90, 3.7);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_EQ(Summarize({}).count, 0);
}

RequestRecord Rec(double sent, double first, double end, int64_t tokens,
                  std::string outcome = "OK") {
  RequestRecord r;
  r.sent_s = sent;
  r.first_token_s = first;
  r.end_s = end;
  r.output_tokens = tokens;
  r.max_tokens = tokens;
  r.prompt_tokens = 10;
  r.outcome = std::move(outcome);
  return r;
}

TEST(LoadgenLatencyTest, TtftTpotE2e) {
  const RequestRecord r = Rec(1.0, 1.2, 2.1, 10);
  EXPECT_NEAR(TtftMs(r), 200, 1e-9);
  EXPECT_NEAR(E2eMs(r), 1100, 1e-9);
  double tpot = 0;
  ASSERT_TRUE(TpotMs(r, &tpot));
  EXPECT_NEAR(tpot, 100, 1e-9);                      // (1100 - 200) / 9
  EXPECT_FALSE(TpotMs(Rec(0, 0.1, 0.1, 1), &tpot));  // one token: undefined
  EXPECT_FALSE(TpotMs(Rec(0, -1, 0.5, 0, "UNAVAILABLE"), &tpot));
}

TEST(LoadgenSloTest, BothLimitsMustHold) {
  const Slo slo{250, 50};
  EXPECT_TRUE(MeetsSlo(Rec(0, 0.2, 0.2 + 0.045 * 9, 10), slo));   // TTFT 200, TPOT 45
  EXPECT_FALSE(MeetsSlo(Rec(0, 0.3, 0.3 + 0.045 * 9, 10), slo));  // TTFT 300
  EXPECT_FALSE(MeetsSlo(Rec(0, 0.1, 0.1 + 0.06 * 9, 10), slo));   // TPOT 60
  EXPECT_TRUE(MeetsSlo(Rec(0, 0.1, 0.1, 1), slo));                // no TPOT: only TTFT counts
  EXPECT_FALSE(MeetsSlo(Rec(0, 0.1, 0.5, 5, "DEADLINE_EXCEEDED"), slo));
  EXPECT_TRUE(MeetsSlo(Rec(0, 9, 90, 10), Slo{}));  // no limits
  EXPECT_FALSE(MeetsSlo(Rec(0, 0.1, 0.5, 5, "FINISH_ERROR"), Slo{}));
}

TEST(LoadgenReportTest, CountsAttainmentAndGoodput) {
  const Slo slo{250, 50};
  std::vector<RequestRecord> recs = {
      Rec(0.0, 0.2, 0.2 + 0.04 * 9, 10),  // meets both
      Rec(1.0, 1.1, 1.1 + 0.03 * 4, 5),   // meets both
      Rec(2.0, 2.5, 2.5 + 0.01 * 9, 10),  // TTFT 500: miss
      Rec(3.0, 3.1, 3.1 + 0.08 * 9, 10),  // TPOT 80: miss
      Rec(4.0, -1, 5.0, 0, "UNAVAILABLE"), Rec(5.0, 5.1, 8.0, 3, "DEADLINE_EXCEEDED"),
      Rec(6.0, -1, 6.5, 0, "UNAVAILABLE"),
  };
  for (size_t i = 0; i < recs.size(); ++i) recs[i].index = static_cast<int64_t>(i);
  const RunReport r = ComputeReport(recs, slo);
  EXPECT_EQ(r.issued, 7);
  EXPECT_EQ(r.succeeded, 4);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.issued, r.succeeded + r.failed);
  EXPECT_EQ(r.errors.at("UNAVAILABLE"), 2);
  EXPECT_EQ(r.errors.at("DEADLINE_EXCEEDED"), 1);
  EXPECT_EQ(r.errors.count("OK"), 0u);
  EXPECT_EQ(r.slo_met, 2);
  EXPECT_NEAR(r.slo_attainment, 2.0 / 7, 1e-12);
  EXPECT_DOUBLE_EQ(r.duration_s, 8.0);  // the latest end
  EXPECT_NEAR(r.goodput, 2 / 8.0, 1e-12);
  EXPECT_NEAR(r.request_throughput, 4 / 8.0, 1e-12);
  EXPECT_EQ(r.output_tokens, 10 + 5 + 10 + 10 + 3);  // every token received
  EXPECT_NEAR(r.output_throughput, 38 / 8.0, 1e-12);
  EXPECT_EQ(r.prompt_tokens, 40);  // succeeded only
  // Latencies over the 4 successes: TTFT 200, 100, 500, 100 ms.
  EXPECT_EQ(r.ttft.count, 4);
  EXPECT_NEAR(r.ttft.p50, 150, 1e-9);
  EXPECT_NEAR(r.ttft.max, 500, 1e-9);
  EXPECT_NEAR(r.ttft.mean, 225, 1e-9);
  EXPECT_EQ(r.tpot.count, 4);
  EXPECT_NEAR(r.tpot.p50, 35, 1e-9);  // {10, 30, 40, 80}
  EXPECT_EQ(r.e2e.count, 4);
  EXPECT_EQ(r.server_ttft.count, 0);  // no record carried gateway timings
}

TEST(LoadgenReportTest, GatewayTimingsOfSucceededRequestsOnly) {
  RequestRecord a = Rec(0, 0.1, 0.2, 2), b = Rec(0, 0.1, 0.2, 2),
                c = Rec(0, -1, 0.2, 0, "INTERNAL");
  a.server_queue_ms = 1, a.server_prefill_ms = 2, a.server_transfer_ms = 3, a.server_ttft_ms = 8;
  a.replay_on_decode = true;
  c.server_queue_ms = 100, c.server_prefill_ms = 100, c.server_transfer_ms = 100;
  c.server_ttft_ms = 100;
  const RunReport r = ComputeReport({a, b, c}, Slo{});
  EXPECT_EQ(r.server_ttft.count, 1);  // b had none, c failed
  EXPECT_DOUBLE_EQ(r.server_ttft.mean, 8);
  EXPECT_DOUBLE_EQ(r.server_queue.mean, 1);
  EXPECT_DOUBLE_EQ(r.server_prefill.mean, 2);
  EXPECT_DOUBLE_EQ(r.server_transfer.mean, 3);
  EXPECT_EQ(r.replays_on_decode, 1);
  EXPECT_EQ(r.send_lag.count, 0);  // closed loop: no planned times
}

TEST(LoadgenReportTest, SendLagOverAllIssuedRequests) {
  RequestRecord a = Rec(1.002, 1.1, 1.2, 2), b = Rec(2.010, -1, 2.2, 0, "UNAVAILABLE");
  a.planned_s = 1.0;
  b.planned_s = 2.0;
  const RunReport r = ComputeReport({a, b}, Slo{});
  EXPECT_EQ(r.send_lag.count, 2);
  EXPECT_NEAR(r.send_lag.max, 10, 1e-9);
  EXPECT_NEAR(r.send_lag.mean, 6, 1e-9);
}

TEST(LoadgenReportTest, ExplicitDurationAndEmptyRun) {
  const RunReport r = ComputeReport({Rec(0, 0.1, 1.0, 4)}, Slo{}, 2.0);
  EXPECT_DOUBLE_EQ(r.duration_s, 2.0);
  EXPECT_DOUBLE_EQ(r.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(r.slo_attainment, 1.0);
  const RunReport e = ComputeReport({}, Slo{100, 10});
  EXPECT_EQ(e.issued, 0);
  EXPECT_EQ(e.goodput, 0);
  EXPECT_EQ(e.slo_attainment, 0);
}

}  // namespace
}  // namespace ced::loadgen
