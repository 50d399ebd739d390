// Fault 5: SIGTERM on each service. It stops taking new work at once (the
// workers answer NOT_SERVING and leave the router; the gateway and the router
// refuse new calls), finishes what it has in flight within its drain timeout
// (--drain-timeout-ms), and exits 0. In-flight streams end with the right
// tokens; requests sent meanwhile go elsewhere or fail fast.
#include <signal.h>
#include <sys/wait.h>

#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kLongTokens = 1000;
constexpr int kNotServing = 2;
const std::vector<std::string> kDrainFlags = {"--drain-timeout-ms", "30000"};

double Running(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_decode_running_sequences").value_or(-1);
}

void ExpectCleanExit(Proc& p, const std::string& scenario, SteadyClock::time_point t_term) {
  const std::optional<int> st = p.WaitExit(Ms(60000));
  ASSERT_TRUE(st.has_value()) << p.name() << " did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*st)) << p.name() << " died of signal " << WTERMSIG(*st) << "\n" << p.Log();
  EXPECT_EQ(WEXITSTATUS(*st), 0) << p.Log();
  Figure(scenario, "exit_after_sigterm_ms", MsSince(t_term));
}

TEST(FaultDrainTest, DecodeWorkerFinishesItsStreamsAndExitsZero) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 2);
  o.decode_flags = kDrainFlags;
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 1);
  const auto want = ref.Run(prompt, kLongTokens);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, kLongTokens, "drain-decode"), Ms(120000));
  ASSERT_TRUE(s.ReadTokens(5));
  const int x = Running(c.decode(0)) == 1 ? 0 : 1;
  ASSERT_EQ(Running(c.decode(x)), 1);

  const auto t0 = SteadyClock::now();
  c.decode(x).Signal(SIGTERM);
  EXPECT_TRUE(WaitUntil(
      [&] { return HealthStatus(c.decode(x).grpc(), "ced.internal.DecodeWorker") == kNotServing; },
      Ms(10000), Ms(10)));
  Figure("decode_sigterm", "not_serving_ms", MsSince(t0));
  EXPECT_TRUE(WaitUntil([&] { return !c.Listed(c.decode_id(x)); }, Ms(10000), Ms(10)));
  Figure("decode_sigterm", "left_router_ms", MsSince(t0));
  // Still draining: new work goes to the other decode worker.
  EXPECT_EQ(Running(c.decode(x)), 1) << "the stream ended before the test could check the drain";
  for (int i = 0; i < 3; ++i) {
    const auto p = Prompt(40, 10 + i);
    const GenResult r =
        Generate(c.gateway().grpc(), FaultRequest(p, 8, "new-" + std::to_string(i)));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, ref.Run(p, 8));
    EXPECT_EQ(r.last.placement().decode_worker_id(), c.decode_id(1 - x));
  }
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
  ExpectCleanExit(c.decode(x), "decode_sigterm", t0);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

int SendingPrefill(FaultCluster& c) {
  for (int i = 0; i < 2; ++i) {
    if (ScrapeMetric(c.prefill(i).metrics(), "ced_kv_transfer_bytes_total{direction=\"out\"}")
            .value_or(0) > 0) {
      return i;
    }
  }
  return -1;
}

TEST(FaultDrainTest, PrefillWorkerFinishesItsTransferAndExitsZero) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 2, 1);
  o.prefill_flags = {"--chunk",
                     "64",
                     "--fault-injection-for-testing",
                     "match=drain,send_delay_ms=500",
                     "--drain-timeout-ms",
                     "30000"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(300, 2);
  const auto want = ref.Run(prompt, 20);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, 20, "drain-prefill"), Ms(120000));
  ASSERT_TRUE(WaitUntil([&] { return SendingPrefill(c) >= 0; }, Ms(30000), Ms(20)));
  const int x = SendingPrefill(c);
  const auto t0 = SteadyClock::now();
  c.prefill(x).Signal(SIGTERM);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return HealthStatus(c.prefill(x).grpc(), "ced.internal.PrefillWorker") == kNotServing;
      },
      Ms(10000), Ms(10)));
  Figure("prefill_sigterm", "not_serving_ms", MsSince(t0));
  EXPECT_TRUE(WaitUntil([&] { return !c.Listed(c.prefill_id(x)); }, Ms(10000), Ms(10)));
  for (int i = 0; i < 2; ++i) {
    const auto p = Prompt(40, 20 + i);
    const GenResult r =
        Generate(c.gateway().grpc(), FaultRequest(p, 8, "new-" + std::to_string(i)));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, ref.Run(p, 8));
    EXPECT_EQ(r.last.placement().prefill_worker_id(), c.prefill_id(1 - x));
  }
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
  EXPECT_EQ(s.last().placement().prefill_worker_id(), c.prefill_id(x));
  ExpectCleanExit(c.prefill(x), "prefill_sigterm", t0);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

TEST(FaultDrainTest, GatewayFinishesItsStreamsAndExitsZero) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 1);
  o.gateway_flags = kDrainFlags;
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 3);
  const auto want = ref.Run(prompt, kLongTokens);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, kLongTokens, "drain-gateway"), Ms(120000));
  ASSERT_TRUE(s.ReadTokens(5));
  const auto t0 = SteadyClock::now();
  c.gateway().Signal(SIGTERM);
  // No new work: health is no longer SERVING and new calls fail fast.
  EXPECT_TRUE(
      WaitUntil([&] { return HealthStatus(c.gateway().grpc(), "") != 1; }, Ms(10000), Ms(10)));
  Figure("gateway_sigterm", "not_serving_ms", MsSince(t0));
  const auto t_new = SteadyClock::now();
  const GenResult r = Generate(c.gateway().grpc(), FaultRequest(Prompt(40, 4), 8, "new"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  Figure("gateway_sigterm", "new_request_refused_ms", MsSince(t_new));
  EXPECT_GT(Running(c.decode(0)), 0) << "the stream ended before the test could check the drain";
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
  ExpectCleanExit(c.gateway(), "gateway_sigterm", t0);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

TEST(FaultDrainTest, RouterExitsZeroWithoutDisturbingStreams) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Topology(model, 1, 1));
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 5);
  const auto want = ref.Run(prompt, kLongTokens);
  Stream s(c.gateway().grpc(), FaultRequest(prompt, kLongTokens, "drain-router"), Ms(120000));
  ASSERT_TRUE(s.ReadTokens(5));
  const auto t0 = SteadyClock::now();
  c.router().Signal(SIGTERM);
  ExpectCleanExit(c.router(), "router_sigterm", t0);
  EXPECT_NE(HealthStatus(c.router_address(), ""), 1);
  const grpc::Status st = s.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.tokens(), want);
}

}  // namespace
}  // namespace ced::testing
