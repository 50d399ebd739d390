// Cache-aware routing end to end (DESIGN.md §1.6, issue 16): agent sessions
// on a `ced cluster` with 2 prefill + 2 decode workers. Each turn resends the
// whole conversation (previous prompt + answer + new tokens) with its
// session_id. Under cache-aware routing every later turn lands on the decode
// worker that holds its session, which prefills the short uncached suffix
// itself, and usage.cached_prompt_tokens covers the previous turns; under
// --routing=load the same trace reuses measurably less. Tokens equal the
// colocated engine (exact replay) wherever a turn ran.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

constexpr int kSessions = 4;
constexpr int kTurns = 4;
constexpr int kAnswerTokens = 24;
constexpr int kFirstPromptTokens = 160;

// New tokens per turn (a tool result): short for most sessions (the decode
// worker prefills them), long for the last one (the prefill pool does).
int NewTokens(int session) { return session == kSessions - 1 ? 300 : 40; }

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Turn {
  std::vector<int32_t> prompt;
  GenResult result;
};

struct TraceResult {
  std::vector<std::vector<Turn>> turns;  // [session][turn]
  double router_hit_tokens = -1;
};

// Runs the trace: round t sends turn t of every session at once, started in
// an order rotated every round (as independent agents would).
TraceResult RunTrace(const std::string& model, const std::string& routing) {
  TraceResult out;
  LocalCluster cluster(
      model, {"--prefill", "2", "--decode", "2", "--routing", routing, "--replay-mode", "exact"});
  EXPECT_TRUE(cluster.ready()) << cluster.Log();
  if (!cluster.ready()) return out;
  // A gateway learns the block chain from its first routed request.
  const GenResult warm =
      Generate(cluster.gateway(), Request(Prompt(8, 1), 1, ced::v1::REPLAY_ON_UNSPECIFIED));
  EXPECT_TRUE(warm.status.ok()) << warm.status.error_message();

  out.turns.assign(kSessions, std::vector<Turn>(kTurns));
  for (int t = 0; t < kTurns; ++t) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kSessions; ++i) {
      const int s = (i + t) % kSessions;
      Turn& turn = out.turns[s][t];
      turn.prompt =
          t == 0 ? Prompt(kFirstPromptTokens, 100 + s)
                 : Concat(Concat(out.turns[s][t - 1].prompt, out.turns[s][t - 1].result.tokens),
                          Prompt(NewTokens(s), 1000 + 10 * s + t));
      threads.emplace_back([&cluster, &turn, s, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(40 * i));
        ced::v1::GenerateRequest req =
            Request(turn.prompt, kAnswerTokens, ced::v1::REPLAY_ON_UNSPECIFIED);
        req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
        req.set_session_id("agent-session-" + std::to_string(s));
        turn.result = Generate(cluster.gateway(), req);
      });
    }
    for (std::thread& th : threads) th.join();
    for (int s = 0; s < kSessions; ++s) {
      const GenResult& r = out.turns[s][t].result;
      EXPECT_TRUE(r.status.ok()) << routing << " session " << s << " turn " << t << ": "
                                 << r.status.error_message() << "\n"
                                 << cluster.Log();
      if (!r.status.ok()) return out;
    }
  }
  const std::string router_metrics = cluster.addresses().at("router").at("metrics");
  out.router_hit_tokens =
      ScrapeMetric(router_metrics, "ced_router_cache_hit_tokens_total").value_or(-1);
  // Every worker sent a full block list after registering, then deltas with
  // its heartbeats (one a second).
  EXPECT_GE(
      ScrapeMetric(router_metrics, "ced_router_prefix_reports_total{outcome=\"full\"}").value_or(0),
      4);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ScrapeMetric(router_metrics, "ced_router_prefix_reports_total{outcome=\"delta\"}")
                   .value_or(0) > 0;
      },
      std::chrono::seconds(10)));
  return out;
}

// Prompt tokens of turns >= 2 that a cache could have supplied (the previous
// prompt's full blocks), and those usage says were cached.
std::pair<int64_t, int64_t> HitTokens(const TraceResult& trace, int block_size) {
  int64_t reusable = 0, cached = 0;
  for (const auto& session : trace.turns) {
    for (int t = 1; t < static_cast<int>(session.size()); ++t) {
      reusable += static_cast<int64_t>(session[t - 1].prompt.size()) / block_size * block_size;
      cached += session[t].result.last.usage().cached_prompt_tokens();
    }
  }
  return {reusable, cached};
}

TEST(E2eCacheRoutingTest, SessionsStayWithTheirBlocksAndBeatLoadOnlyRouting) {
  const std::string model = MakeModelDir("tiny");
  ColocatedEngine colocated(model);
  ASSERT_TRUE(colocated.ok());
  const int bs = colocated.engine().cache_stats().block_size;

  const TraceResult aware = RunTrace(model, "cache_aware");
  ASSERT_FALSE(HasFailure());
  const TraceResult load = RunTrace(model, "load");
  ASSERT_FALSE(HasFailure());

  // Both runs saw the same tokens (deterministic, placement-independent), so
  // the same prompts: one colocated reference per turn serves both.
  for (int s = 0; s < kSessions; ++s) {
    for (int t = 0; t < kTurns; ++t) {
      const Turn& a = aware.turns[s][t];
      const Turn& l = load.turns[s][t];
      ASSERT_EQ(a.prompt, l.prompt) << "session " << s << " turn " << t;
      const std::vector<int32_t> expected =
          colocated.Run(a.prompt, kAnswerTokens, ReplayMode::kExact);
      EXPECT_EQ(a.result.tokens, expected) << "cache_aware session " << s << " turn " << t;
      EXPECT_EQ(l.result.tokens, expected) << "load session " << s << " turn " << t;
    }
  }

  // Cache-aware: every later turn on its session's decode worker; short
  // suffixes prefilled there; the previous turns cached.
  for (int s = 0; s < kSessions; ++s) {
    const std::string home = aware.turns[s][0].result.last.placement().decode_worker_id();
    for (int t = 1; t < kTurns; ++t) {
      const Turn& turn = aware.turns[s][t];
      const ced::v1::Placement& p = turn.result.last.placement();
      EXPECT_EQ(p.decode_worker_id(), home) << "session " << s << " turn " << t;
      if (NewTokens(s) + kAnswerTokens + bs <= 256) {
        EXPECT_TRUE(p.local_prefill()) << "session " << s << " turn " << t;
        const int64_t previous = static_cast<int64_t>(aware.turns[s][t - 1].prompt.size());
        EXPECT_GE(turn.result.last.usage().cached_prompt_tokens(), previous / bs * bs)
            << "session " << s << " turn " << t;
      } else {
        EXPECT_FALSE(p.local_prefill()) << "session " << s << " turn " << t;
      }
    }
  }

  const auto [reusable, aware_cached] = HitTokens(aware, bs);
  const auto [reusable_load, load_cached] = HitTokens(load, bs);
  std::printf(
      "reusable prompt tokens %lld: cached %lld (cache_aware, router predicted %.0f), "
      "%lld (load, router predicted %.0f)\n",
      static_cast<long long>(reusable), static_cast<long long>(aware_cached),
      aware.router_hit_tokens, static_cast<long long>(load_cached), load.router_hit_tokens);
  EXPECT_EQ(reusable, reusable_load);
  EXPECT_GE(aware_cached, reusable * 9 / 10);
  EXPECT_GT(aware_cached, load_cached);
  EXPECT_GT(aware.router_hit_tokens, 0);
}

}  // namespace
}  // namespace ced::testing
