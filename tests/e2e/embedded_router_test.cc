// `ced cluster --embed-router`: the gateway runs the router in its own process
// (workers register on the router's port of the gateway process; requests are
// placed by a function call, not a Route RPC). Real processes on loopback; the
// tokens are compared with a colocated run of the same engine.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ced/v1/gateway.grpc.pb.h"
#include "engine/model/presets.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/http_get.h"

namespace ced::testing {
namespace {

TEST(E2eEmbeddedRouterTest, GatewayWithTheRouterInsideServesEqualTokens) {
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--embed-router"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();

  // No router process: the gateway holds it, and says where.
  EXPECT_TRUE(cluster.ServiceArgv("router").empty()) << "a router process runs";
  const std::vector<std::string> argv = cluster.ServiceArgv("gateway");
  ASSERT_FALSE(argv.empty()) << "no gateway process";
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--embed-router"), argv.end());
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--router"), argv.end());
  ASSERT_TRUE(cluster.addresses().count("router")) << "the ready file names no router";
  const std::string router = cluster.addresses().at("router").at("grpc");
  const std::string router_metrics = cluster.addresses().at("router").at("metrics");
  EXPECT_NE(router, cluster.gateway());

  // The workers registered with it.
  const auto workers = ListWorkers(router);
  ASSERT_TRUE(workers.has_value());
  int live = 0;
  for (const auto& w : workers->workers()) live += w.live() ? 1 : 0;
  EXPECT_EQ(live, 2);

  // Both replay placements, as with a router process.
  const auto prompt = Prompt(150, 3);
  ColocatedEngine colocated(model);
  const auto expected = colocated.Run(prompt, 20, ReplayMode::kBounded, {});
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    GenResult r = Generate(cluster.gateway(), Request(prompt, 20, on));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Log();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
    EXPECT_EQ(r.last.placement().replay_on(), on);
  }
  // Concurrent requests each get their own placement.
  std::vector<ced::v1::GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(Request(Prompt(40 + i, 10 + i), 8, ced::v1::REPLAY_ON_AUTO));
  }
  const auto results = GenerateConcurrently(cluster.gateway(), reqs);
  ASSERT_EQ(results.size(), reqs.size());
  for (int i = 0; i < static_cast<int>(results.size()); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.error_message();
    EXPECT_EQ(results[i].tokens, colocated.Run(Prompt(40 + i, 10 + i), 8)) << "request " << i;
  }

  // The router's decisions are counted on its own /metrics endpoint: the 8
  // requests above, placed without a Route RPC.
  int status = 0;
  const std::string text = HttpGet(router_metrics, "/metrics", &status);
  EXPECT_EQ(status, 200);
  double decisions = 0;
  for (const char* replay : {"prefill", "decode"}) {
    for (const char* local : {"false", "true"}) {
      decisions += MetricValue(text, std::string("ced_router_decisions_total{replay_on=\"") +
                                         replay + "\",local_prefill=\"" + local + "\"}")
                       .value_or(0.0);
    }
  }
  EXPECT_EQ(decisions, 8) << text;
  // The process's own metrics once, on the gateway's endpoint, not again on
  // the router's (a fleet-wide sum would count this process's CPU twice).
  EXPECT_EQ(text.find("ced_process_cpu_seconds_total"), std::string::npos) << text;
  const std::string gateway_text =
      HttpGet(cluster.addresses().at("gateway").at("metrics"), "/metrics", &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(MetricValue(gateway_text, "ced_process_cpu_seconds_total").has_value())
      << gateway_text;
  // A bad request is still refused naming the field, before any placement.
  auto bad = Request(Prompt(10, 1), 4, ced::v1::REPLAY_ON_AUTO);
  bad.add_prompt_token_ids(1 << 30);
  GenResult r = Generate(cluster.gateway(), bad);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("prompt_token_ids"), std::string::npos);
}

}  // namespace
}  // namespace ced::testing
