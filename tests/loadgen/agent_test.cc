// The agent workload without a server: the trace (lengths, times,
// determinism, validation), its token contents, the report's arithmetic and
// the session_id lookup by reflection.
#include <nlohmann/json.hpp>

#include "bench/loadgen/agent_report.h"
#include "bench/loadgen/agent_runner.h"
#include "bench/loadgen/agent_workload.h"
#include "bench/sim/agent_workload.h"
#include "gtest/gtest.h"

namespace ced::loadgen {
namespace {

sim::AgentTraceOptions Trace() {
  sim::AgentTraceOptions o;
  o.sessions = 3;
  o.turns = 4;
  o.first_prompt_tokens = 100;
  o.tool_result_mean = 50;
  o.tool_result_cv = 0.5;
  o.output_tokens = 8;
  o.think_time_s = 0.3;
  o.seed = 7;
  return o;
}

TEST(AgentTraceTest, SessionsTurnsLengthsAndStarts) {
  auto trace = sim::MakeAgentTrace(Trace());
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 3u);
  for (size_t s = 0; s < trace->size(); ++s) {
    const sim::AgentSessionSpec& spec = (*trace)[s];
    EXPECT_DOUBLE_EQ(spec.start_s, 0.1 * s) << "default stagger: think time / sessions";
    EXPECT_DOUBLE_EQ(spec.think_time_s, 0.3);
    EXPECT_EQ(spec.first_prompt_tokens, 100);
    ASSERT_EQ(spec.output_tokens.size(), 4u);
    ASSERT_EQ(spec.tool_result_tokens.size(), 3u);
    for (int64_t t : spec.tool_result_tokens) EXPECT_GE(t, 1);
    EXPECT_EQ(sim::AgentTurnPromptTokens(spec, 0), 100);
    EXPECT_EQ(sim::AgentTurnPromptTokens(spec, 2),
              100 + 8 + spec.tool_result_tokens[0] + 8 + spec.tool_result_tokens[1]);
  }
  EXPECT_NE((*trace)[0].tool_result_tokens, (*trace)[1].tool_result_tokens)
      << "sessions draw their own lengths";
}

TEST(AgentTraceTest, DeterministicForASeedAndStableUnderMoreSessions) {
  sim::AgentTraceOptions o = Trace();
  auto a = sim::MakeAgentTrace(o);
  auto b = sim::MakeAgentTrace(o);
  o.sessions = 5;
  auto c = sim::MakeAgentTrace(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t s = 0; s < a->size(); ++s) {
    EXPECT_EQ((*a)[s].tool_result_tokens, (*b)[s].tool_result_tokens);
    EXPECT_EQ((*a)[s].tool_result_tokens, (*c)[s].tool_result_tokens);
  }
  o = Trace();
  o.seed = 8;
  auto d = sim::MakeAgentTrace(o);
  ASSERT_TRUE(d.ok());
  EXPECT_NE((*a)[0].tool_result_tokens, (*d)[0].tool_result_tokens);
}

TEST(AgentTraceTest, FixedLengthsWithZeroCvAndExplicitStagger) {
  sim::AgentTraceOptions o = Trace();
  o.tool_result_cv = 0;
  o.stagger_s = 2;
  auto trace = sim::MakeAgentTrace(o);
  ASSERT_TRUE(trace.ok());
  EXPECT_DOUBLE_EQ((*trace)[2].start_s, 4);
  for (int64_t t : (*trace)[1].tool_result_tokens) EXPECT_EQ(t, 50);
  EXPECT_EQ(sim::AgentTurnPromptTokens((*trace)[1], 3), 100 + 3 * (8 + 50));
}

TEST(AgentTraceTest, RejectsBadOptions) {
  auto bad = [](auto mutate) {
    sim::AgentTraceOptions o = Trace();
    mutate(o);
    return sim::MakeAgentTrace(o).status();
  };
  EXPECT_FALSE(bad([](auto& o) { o.sessions = 0; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.turns = 0; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.first_prompt_tokens = 0; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.tool_result_mean = 0.5; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.tool_result_cv = -1; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.output_tokens = 0; }).ok());
  EXPECT_FALSE(bad([](auto& o) { o.think_time_s = -1; }).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](auto& o) { o.sessions = -3; })));
}

TEST(AgentTokensTest, DistinctPerSessionAndTurnAndAppend) {
  auto trace = sim::MakeAgentTrace(Trace());
  ASSERT_TRUE(trace.ok());
  const auto s0 = AgentTurnTokens(7, 0, 0, (*trace)[0]);
  const auto s1 = AgentTurnTokens(7, 1, 0, (*trace)[1]);
  EXPECT_EQ(s0.size(), 100u);
  EXPECT_NE(s0, s1) << "sessions must not share a prefix";
  EXPECT_EQ(s0, AgentTurnTokens(7, 0, 0, (*trace)[0]));
  const auto tool = AgentTurnTokens(7, 0, 1, (*trace)[0]);
  EXPECT_EQ(static_cast<int64_t>(tool.size()), (*trace)[0].tool_result_tokens[0]);
  for (int32_t t : tool) EXPECT_TRUE(t >= 0 && t < kPromptTokenRange);
  const std::vector<int32_t> answer = {1, 2, 3};
  const auto next = AppendTurn(s0, answer, tool);
  ASSERT_EQ(next.size(), s0.size() + 3 + tool.size());
  EXPECT_TRUE(std::equal(s0.begin(), s0.end(), next.begin())) << "turn k-1's prompt is a prefix";
  EXPECT_EQ(next[100], 1);
  EXPECT_EQ(next[102], 3);
  EXPECT_EQ(next.back(), tool.back());
}

TEST(AgentSessionIdTest, SetWhenTheProtoHasTheField) {
  ced::v1::GenerateRequest req;
  const bool has = GatewayHasSessionId();
  EXPECT_EQ(has, ced::v1::GenerateRequest::descriptor()->FindFieldByName("session_id") != nullptr);
  EXPECT_EQ(SetSessionId(&req, "agent-s1"), has);
  if (has) {
    const auto* f = ced::v1::GenerateRequest::descriptor()->FindFieldByName("session_id");
    EXPECT_EQ(req.GetReflection()->GetString(req, f), "agent-s1");
  } else {
    EXPECT_EQ(req.ByteSizeLong(), 0u) << "nothing is set without the field";
  }
}

AgentTurnRecord Turn(int session, int turn, int64_t prompt, int64_t cached, int64_t reusable,
                     double ttft_s, std::string outcome = "OK") {
  AgentTurnRecord t;
  t.session = session;
  t.turn = turn;
  t.request.prompt_tokens = prompt;
  t.request.sent_s = 10.0 * turn;
  t.request.first_token_s = t.request.sent_s + ttft_s;
  t.request.end_s = t.request.first_token_s + 0.1;
  t.request.output_tokens = 4;
  if (outcome == "OK") {  // the gateway's timings ride on an OK stream's final message
    t.request.server_queue_ms = 1;
    t.request.server_prefill_ms = 100.0 * turn + session;
    t.request.server_transfer_ms = 2;
    t.request.server_ttft_ms = 150;
  }
  t.request.outcome = std::move(outcome);
  t.cached_prompt_tokens = cached;
  t.reusable_tokens = reusable;
  return t;
}

AgentRunResult Result() {
  AgentRunResult r;
  r.turns = {Turn(0, 0, 100, 0, 0, 1.0),     Turn(0, 1, 160, 96, 104, 0.2),
             Turn(0, 2, 220, 160, 164, 0.3), Turn(1, 0, 100, 0, 0, 1.2),
             Turn(1, 1, 160, 80, 104, 0.4),  Turn(1, 2, 220, -1, 164, 0, "UNAVAILABLE")};
  r.planned_turns = 6;
  r.session_final_tokens = {224, 164};
  r.duration_s = 30;
  return r;
}

TEST(AgentReportTest, PerTurnTtftHitRateAndBytes) {
  const AgentReport rep = ComputeAgentReport(Result(), 1000);
  EXPECT_EQ(rep.overall.issued, 6);
  EXPECT_EQ(rep.overall.succeeded, 5);
  ASSERT_EQ(rep.by_turn.size(), 3u);
  EXPECT_EQ(rep.by_turn[0].turn, 1);
  EXPECT_EQ(rep.by_turn[0].ok, 2);
  EXPECT_NEAR(rep.by_turn[0].ttft.p50, 1100, 1e-6);
  EXPECT_EQ(rep.by_turn[1].cached_tokens, 176);
  EXPECT_EQ(rep.by_turn[1].reusable_tokens, 208);
  EXPECT_NEAR(rep.by_turn[1].hit_rate, 176.0 / 208, 1e-12);
  EXPECT_EQ(rep.by_turn[2].issued, 2);
  EXPECT_EQ(rep.by_turn[2].ok, 1) << "a failed turn counts as issued, not in the hit rate";
  EXPECT_EQ(rep.by_turn[2].reusable_tokens, 164);
  EXPECT_DOUBLE_EQ(rep.by_turn[1].server_prefill_ms, 100.5) << "mean over the OK turns";
  EXPECT_DOUBLE_EQ(rep.by_turn[2].server_prefill_ms, 200) << "the failed turn has no timings";
  EXPECT_DOUBLE_EQ(rep.by_turn[0].server_transfer_ms, 2);
  EXPECT_EQ(rep.ttft_later.count, 3);
  EXPECT_NEAR(rep.ttft_later.p50, 300, 1e-6);
  EXPECT_EQ(rep.cached_later, 336);
  EXPECT_EQ(rep.reusable_later, 372);
  EXPECT_NEAR(rep.hit_rate_later, 336.0 / 372, 1e-12);
  EXPECT_EQ(rep.sessions, 2);
  EXPECT_EQ(rep.sessions_complete, 1);
  EXPECT_DOUBLE_EQ(rep.bytes_per_session_mean, 1000.0 * (224 + 164) / 2);
  EXPECT_DOUBLE_EQ(rep.bytes_per_session_max, 224000);
}

TEST(AgentReportTest, JsonAndMarkdownHoldEveryRun) {
  AgentRunSummary a, b;
  a.label = "ced";
  a.model_name = "small";
  a.num_layers = 12;
  a.num_encoder_layers = 6;
  a.kv_cache_dtype = "f32";
  a.report = ComputeAgentReport(Result(), 24576);
  b = a;
  b.label = "dec";
  b.decoder_only = true;
  AgentReportContext ctx;
  ctx.trace = Trace();
  const auto doc = nlohmann::json::parse(AgentReportJson(ctx, {a, b}));
  EXPECT_EQ(doc["workload"]["kind"], "agent");
  EXPECT_EQ(doc["workload"]["sessions"], 3);
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_EQ(doc["runs"][0]["kv_bytes_per_token"], 24576);
  ASSERT_EQ(doc["runs"][0]["turns"].size(), 3u);
  EXPECT_EQ(doc["runs"][0]["turns"][1]["turn"], 2);
  EXPECT_NEAR(doc["runs"][1]["hit_rate_later_turns"].get<double>(), 336.0 / 372, 1e-12);
  const std::string md = AgentReportMarkdown(ctx, {a, b});
  EXPECT_NE(md.find("| ced | small (CED 6+6) | f32 | 5/6 |"), std::string::npos) << md;
  EXPECT_NE(md.find("small (decoder-only 12)"), std::string::npos);
  EXPECT_NE(md.find("Per turn, dec"), std::string::npos);
  EXPECT_NE(md.find("Errors, ced: UNAVAILABLE 1"), std::string::npos);
}

}  // namespace
}  // namespace ced::loadgen
