// Faults 6 and 7: the router's view of the cluster under churn.
// - The router is killed and restarted (same address) while a request
//   streams: the stream finishes, the gateway answers UNAVAILABLE fast while
//   the router is away, the workers register again by themselves, and new
//   requests succeed once it is back.
// - A worker is SIGSTOPped: its heartbeats lapse, the router lists it stale
//   (ListWorkers, ced_router_workers{state="stale"}) and routes around it;
//   the stream it was running resumes after SIGCONT with the right tokens,
//   and it rejoins.
#include <signal.h>

#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kLongTokens = 1000;

double Running(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_decode_running_sequences").value_or(-1);
}

TEST(FaultMembershipTest, RouterRestartedWhileRequestsRun) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Topology(model, 1, 1));
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 1);
  const auto want = ref.Run(prompt, kLongTokens);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, kLongTokens, "through-restart"), Ms(120000));
  ASSERT_TRUE(s.ReadTokens(5));

  c.router().Kill();
  const auto t_down = SteadyClock::now();
  int unavailable = 0;
  double worst_ms = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = SteadyClock::now();
    const GenResult r =
        Generate(c.gateway().grpc(), FaultRequest(Prompt(40, 2), 8, "down-" + std::to_string(i)));
    worst_ms = std::max(worst_ms, MsSince(t0));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
    if (r.status.error_code() == grpc::StatusCode::UNAVAILABLE) ++unavailable;
  }
  // Fast: within the gateway's route timeout (2 s), not the client deadline.
  EXPECT_LT(worst_ms, 10000);
  Figure("router_restart", "gateway_unavailable_worst_ms", worst_ms);
  EXPECT_GT(Running(c.decode(0)), 0) << "the stream ended before the router came back";

  c.ReplaceRouter(c.StartRouter());
  ASSERT_TRUE(c.router().ready());
  const auto t_up = SteadyClock::now();
  ASSERT_TRUE(c.WaitAllLive(Ms(20000))) << c.router().Log();
  Figure("router_restart", "workers_reregistered_ms", MsSince(t_up));
  const auto p = Prompt(40, 3);
  const auto want_p = ref.Run(p, 8);
  GenResult r;
  ASSERT_TRUE(WaitUntil(
      [&] {
        r = Generate(c.gateway().grpc(), FaultRequest(p, 8, "after-restart"));
        return r.status.ok();
      },
      Ms(20000), Ms(50)))
      << r.status.error_message();
  Figure("router_restart", "first_success_after_restart_ms", MsSince(t_up));
  Figure("router_restart", "router_down_ms",
         std::chrono::duration<double, std::milli>(t_up - t_down).count());
  EXPECT_EQ(r.tokens, want_p);
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
  Figure("router_restart", "inflight_requests_lost", st.ok() ? 0 : 1);
  EXPECT_TRUE(WaitUntil([&] { return HealthStatus(c.gateway().grpc(), "") == 1; }, Ms(10000)));
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

TEST(FaultMembershipTest, StoppedWorkersAreRoutedAroundAndRejoin) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Topology(model, 2, 2));
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 4);
  const auto want = ref.Run(prompt, kLongTokens);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, kLongTokens, "frozen"), Ms(120000));
  ASSERT_TRUE(s.ReadTokens(5));
  const int x = Running(c.decode(0)) == 1 ? 0 : 1;
  ASSERT_EQ(Running(c.decode(x)), 1);

  // Stop the decode worker running the stream, and a prefill worker.
  const auto t_stop = SteadyClock::now();
  c.decode(x).Signal(SIGSTOP);
  c.prefill(x).Signal(SIGSTOP);
  ASSERT_TRUE(WaitUntil([&] { return !c.Live(c.decode_id(x)) && !c.Live(c.prefill_id(x)); },
                        Ms(20000), Ms(20)));
  Figure("sigstop", "router_stale_ms", MsSince(t_stop));
  EXPECT_EQ(
      ScrapeMetric(c.router().metrics(), "ced_router_workers{role=\"decode\",state=\"stale\"}"),
      1.0);
  EXPECT_EQ(
      ScrapeMetric(c.router().metrics(), "ced_router_workers{role=\"prefill\",state=\"stale\"}"),
      1.0);
  EXPECT_EQ(HealthStatus(c.gateway().grpc(), ""), 1);  // one worker of each kind is left

  std::vector<ced::v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> wants;
  for (int i = 0; i < 4; ++i) {
    const auto p = Prompt(40, 10 + i);
    reqs.push_back(FaultRequest(p, 8, "around-" + std::to_string(i)));
    wants.push_back(ref.Run(p, 8));
  }
  const auto rs = GenerateConcurrently(c.gateway().grpc(), reqs);
  int lost = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_TRUE(rs[i].status.ok()) << rs[i].status.error_message();
    if (!rs[i].status.ok()) ++lost;
    EXPECT_EQ(rs[i].tokens, wants[i]);
    EXPECT_EQ(rs[i].last.placement().decode_worker_id(), c.decode_id(1 - x));
    EXPECT_EQ(rs[i].last.placement().prefill_worker_id(), c.prefill_id(1 - x));
  }
  Figure("sigstop", "requests_lost_while_stopped", lost);

  const auto t_cont = SteadyClock::now();
  c.decode(x).Signal(SIGCONT);
  c.prefill(x).Signal(SIGCONT);
  ASSERT_TRUE(c.WaitAllLive(Ms(20000)));
  Figure("sigstop", "rejoin_after_sigcont_ms", MsSince(t_cont));
  EXPECT_EQ(
      ScrapeMetric(c.router().metrics(), "ced_router_workers{role=\"decode\",state=\"stale\"}"),
      0.0);
  // The frozen stream resumes where it stopped.
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
  // The rejoined workers get work again: concurrent requests spread over both.
  reqs.clear();
  wants.clear();
  for (int i = 0; i < 6; ++i) {
    const auto p = Prompt(40, 20 + i);
    reqs.push_back(FaultRequest(p, 200, "rejoined-" + std::to_string(i)));
    wants.push_back(ref.Run(p, 200));
  }
  const auto rs2 = GenerateConcurrently(c.gateway().grpc(), reqs);
  int on_x = 0;
  for (size_t i = 0; i < rs2.size(); ++i) {
    EXPECT_TRUE(rs2[i].status.ok()) << rs2[i].status.error_message();
    EXPECT_EQ(rs2[i].tokens, wants[i]);
    if (rs2[i].last.placement().decode_worker_id() == c.decode_id(x)) ++on_x;
  }
  EXPECT_GT(on_x, 0) << "the rejoined decode worker got no work";
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  Figure("sigstop", "kv_blocks_leaked", c.DecodeSum("ced_kv_blocks_used"));
}

}  // namespace
}  // namespace ced::testing
