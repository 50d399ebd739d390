// The agent workload against real `ced cluster`s (router, gateway, one
// prefill and one decode worker as processes on loopback) on the tiny model:
// every turn after the first reuses the session's cached prefix, and a
// cluster started with --prefix-cache=false reuses nothing.
#include <nlohmann/json.hpp>

#include "bench/loadgen/agent_report.h"
#include "bench/loadgen/agent_runner.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"

namespace ced::loadgen {
namespace {

std::string TinyModel() {
  const std::string model = ::testing::TempDir() + "/ced_loadgen_agent_tiny";
  MakeModelOptions mo;
  mo.preset = "tiny";
  mo.seed = 1;
  mo.out_dir = model;
  EXPECT_TRUE(MakeModel(mo).ok());
  return model;
}

sim::AgentTraceOptions Trace() {
  sim::AgentTraceOptions t;
  t.sessions = 2;
  t.turns = 3;
  t.first_prompt_tokens = 120;
  t.tool_result_mean = 40;
  t.tool_result_cv = 0.3;
  t.output_tokens = 6;
  t.think_time_s = 0.05;
  t.seed = 3;
  return t;
}

absl::StatusOr<AgentRunResult> RunAgent(const std::string& gateway,
                                        const std::vector<sim::AgentSessionSpec>& specs,
                                        std::vector<std::string> flush_workers = {}) {
  AgentRunOptions run;
  run.target = gateway;
  run.flush_workers = std::move(flush_workers);
  run.request_timeout_s = 120;
  run.seed = 3;
  auto runner = AgentRunner::Create(run, specs);
  if (!runner.ok()) return runner.status();
  return (*runner)->Run();
}

TEST(LoadgenAgentClusterTest, LaterTurnsReuseTheSessionsCachedPrefix) {
  const std::string model = TinyModel();
  ced::testing::LocalCluster cluster(model, {"--prefill", "1", "--decode", "1"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  auto info = FetchModelInfo(cluster.gateway());
  ASSERT_TRUE(info.ok()) << info.status();
  const int bs = info->kv_block_size();
  ASSERT_GT(bs, 0);

  auto specs = sim::MakeAgentTrace(Trace());
  ASSERT_TRUE(specs.ok());
  auto result = RunAgent(cluster.gateway(), *specs);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->turns.size(), 6u) << cluster.Log();
  EXPECT_EQ(result->planned_turns, 6);
  for (const AgentTurnRecord& t : result->turns) {
    SCOPED_TRACE(::testing::Message() << "session " << t.session << " turn " << t.turn);
    const sim::AgentSessionSpec& spec = (*specs)[static_cast<size_t>(t.session)];
    ASSERT_EQ(t.request.outcome, "OK") << cluster.Log();
    EXPECT_EQ(t.request.output_tokens, spec.output_tokens[static_cast<size_t>(t.turn)]);
    EXPECT_EQ(t.request.prompt_tokens, sim::AgentTurnPromptTokens(spec, t.turn))
        << "turn k = turn k-1's prompt + its answer + the tool result";
    ASSERT_GE(t.cached_prompt_tokens, 0) << "the final message carries usage";
    if (t.turn == 0) {
      EXPECT_EQ(t.cached_prompt_tokens, 0);
      EXPECT_EQ(t.reusable_tokens, 0);
    } else {
      const int64_t prev_prompt = sim::AgentTurnPromptTokens(spec, t.turn - 1);
      EXPECT_EQ(t.reusable_tokens, prev_prompt + spec.output_tokens[t.turn - 1]);
      EXPECT_GT(t.cached_prompt_tokens, 0) << "turn >= 2 reuses the session's prefix";
      // At least the previous prompt's full blocks; never more than what the
      // previous turn left (its prompt and answer).
      EXPECT_GE(t.cached_prompt_tokens, prev_prompt / bs * bs);
      EXPECT_LE(t.cached_prompt_tokens, t.reusable_tokens);
      // Full blocks, or the whole previous prompt (the prefill worker held
      // that turn's sequence and continued it, DESIGN.md 1.6), or with a
      // local prefill the previous prompt and all but the last answer token
      // (the decode worker held it).
      EXPECT_TRUE(t.cached_prompt_tokens % bs == 0 || t.cached_prompt_tokens == prev_prompt ||
                  t.cached_prompt_tokens == t.reusable_tokens - 1)
          << t.cached_prompt_tokens << " cached";
    }
    // Turns of one session follow each other (think time after the answer).
    if (t.turn > 0) {
      const AgentTurnRecord& prev = result->turns[&t - &result->turns[0] - 1];
      EXPECT_GE(t.request.sent_s, prev.request.end_s + spec.think_time_s - 1e-3);
    }
  }
  const AgentReport rep = ComputeAgentReport(*result, info->kv_bytes_per_token());
  EXPECT_EQ(rep.sessions_complete, 2);
  EXPECT_GT(rep.hit_rate_later, 0.5);
  EXPECT_LE(rep.hit_rate_later, 1.0);
  EXPECT_EQ(rep.usage_missing, 0);
  EXPECT_EQ(result->session_id_sent, GatewayHasSessionId());
  const int64_t final0 = sim::AgentTurnPromptTokens((*specs)[0], 2) + 6;
  EXPECT_EQ(result->session_final_tokens[0], final0);
  EXPECT_DOUBLE_EQ(rep.bytes_per_session_max,
                   static_cast<double>(std::max(final0, result->session_final_tokens[1])) *
                       static_cast<double>(info->kv_bytes_per_token()));
}

TEST(LoadgenAgentClusterTest, NoReuseWithThePrefixCacheOff) {
  const std::string model = TinyModel();
  ced::testing::LocalCluster cluster(model,
                                     {"--prefill", "1", "--decode", "1", "--prefix-cache=false"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  sim::AgentTraceOptions t = Trace();
  t.sessions = 1;
  auto specs = sim::MakeAgentTrace(t);
  ASSERT_TRUE(specs.ok());
  auto result = RunAgent(cluster.gateway(), *specs);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->turns.size(), 3u);
  for (const AgentTurnRecord& r : result->turns) {
    ASSERT_EQ(r.request.outcome, "OK") << cluster.Log();
    EXPECT_EQ(r.cached_prompt_tokens, 0) << "turn " << r.turn;
  }
}

// --flush-workers: the workers' prefix caches are emptied before every turn
// after a session's first. With a host tier the turn still finds the prefix
// (reloaded from it); without one it finds nothing (the flush happened).
TEST(LoadgenAgentClusterTest, FlushedWorkersServeLaterTurnsFromTheirTiers) {
  const std::string model = TinyModel();
  auto specs = sim::MakeAgentTrace(Trace());
  ASSERT_TRUE(specs.ok());
  for (const bool tier : {true, false}) {
    SCOPED_TRACE(tier ? "host tier" : "no tier");
    std::vector<std::string> args = {"--prefill", "1", "--decode", "1"};
    if (tier) args.insert(args.end(), {"--kv-host-mb", "32"});
    ced::testing::LocalCluster cluster(model, args);
    ASSERT_TRUE(cluster.ready()) << cluster.Log();
    auto info = FetchModelInfo(cluster.gateway());
    ASSERT_TRUE(info.ok()) << info.status();
    const int bs = info->kv_block_size();
    const std::vector<std::string> workers = {cluster.addresses().at("prefill-0").at("grpc"),
                                              cluster.addresses().at("decode-0").at("grpc")};
    auto result = RunAgent(cluster.gateway(), *specs, workers);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->turns.size(), 6u) << cluster.Log();
    for (const AgentTurnRecord& t : result->turns) {
      SCOPED_TRACE(::testing::Message() << "session " << t.session << " turn " << t.turn);
      ASSERT_EQ(t.request.outcome, "OK") << cluster.Log();
      if (t.turn == 0) {
        EXPECT_EQ(t.flush_s, 0);
        continue;
      }
      EXPECT_GT(t.flush_s, 0) << "flushed before the turn";
      const sim::AgentSessionSpec& spec = (*specs)[static_cast<size_t>(t.session)];
      const int64_t prev_prompt = sim::AgentTurnPromptTokens(spec, t.turn - 1);
      if (tier) {
        EXPECT_GE(t.cached_prompt_tokens, prev_prompt / bs * bs) << "reloaded from the tier";
      } else {
        EXPECT_EQ(t.cached_prompt_tokens, 0) << "the flush left nothing to reuse";
      }
    }
  }
  // A worker that cannot be reached fails the run, naming it.
  ced::testing::LocalCluster cluster(model, {"--prefill", "1", "--decode", "1"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  auto failed = RunAgent(cluster.gateway(), *specs, {"127.0.0.1:1"});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("FlushCache on worker 127.0.0.1:1"), std::string::npos)
      << failed.status();
}

}  // namespace
}  // namespace ced::loadgen
