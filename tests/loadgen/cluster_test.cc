// The load generator against a real `ced cluster` (router, gateway, one
// prefill and one decode worker as processes on loopback) on the tiny model.
#include <nlohmann/json.hpp>

#include "bench/loadgen/report.h"
#include "bench/loadgen/runner.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"

namespace ced::loadgen {
namespace {

TEST(LoadgenClusterTest, LowRateRunSucceedsAndCountsAddUp) {
  const std::string model = ::testing::TempDir() + "/ced_loadgen_tiny";
  MakeModelOptions mo;
  mo.preset = "tiny";
  mo.seed = 1;
  mo.out_dir = model;
  ASSERT_TRUE(MakeModel(mo).ok());
  ced::testing::LocalCluster cluster(model, {"--prefill", "1", "--decode", "1"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();

  auto info = FetchModelInfo(cluster.gateway());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->decoder_only());
  // A target that is another service (the router) is named as such.
  const std::string router = cluster.addresses().at("router").at("grpc");
  auto not_gateway = FetchModelInfo(router);
  ASSERT_FALSE(not_gateway.ok());
  EXPECT_EQ(
      not_gateway.status().message(),
      "--target " + router + " is not a gateway (UNIMPLEMENTED: it does not serve ModelInfo)");

  WorkloadOptions w;
  w.input_mean = 48;
  w.output_mean = 12;
  w.rate = 2;
  w.seed = 5;
  auto workload = Workload::Create(w);
  ASSERT_TRUE(workload.ok());
  RunOptions run;
  run.target = cluster.gateway();
  run.duration_s = 5;
  run.max_requests = 40;  // a second bound; the duration ends this run first
  run.request_timeout_s = 60;
  auto runner = LoadRunner::Create(run, &*workload);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto result = (*runner)->Run();
  ASSERT_TRUE(result.ok()) << result.status();

  // Issued exactly the trace's arrivals before the 5 s bound.
  auto check = Workload::Create(w);
  int64_t expected = 0;
  while (check->Get(expected).arrival_s < run.duration_s && expected < run.max_requests) ++expected;
  ASSERT_GT(expected, 0);
  ASSERT_EQ(static_cast<int64_t>(result->records.size()), expected);

  int64_t planned_tokens = 0;
  for (size_t i = 0; i < result->records.size(); ++i) {
    const RequestRecord& r = result->records[i];
    const PlannedRequest p = check->Get(static_cast<int64_t>(i));
    EXPECT_EQ(r.index, static_cast<int64_t>(i));
    EXPECT_EQ(r.outcome, "OK") << "request " << i << "\n" << cluster.Log();
    EXPECT_EQ(r.max_tokens, p.output_tokens);
    EXPECT_EQ(r.planned_s, p.arrival_s);
    EXPECT_GE(r.sent_s, r.planned_s);
    EXPECT_EQ(r.output_tokens, p.output_tokens) << "ignore_eos: max_tokens is reached";
    EXPECT_GE(r.first_token_s, r.sent_s);
    EXPECT_GE(r.end_s, r.first_token_s);
    EXPECT_GE(r.server_ttft_ms, 0) << "the final message carries the gateway's timings";
    planned_tokens += p.output_tokens;
  }
  const RunReport rep = ComputeReport(result->records, Slo{60000, 60000}, result->duration_s);
  EXPECT_EQ(rep.issued, expected);
  EXPECT_EQ(rep.succeeded, expected);
  EXPECT_EQ(rep.failed, 0);
  EXPECT_TRUE(rep.errors.empty());
  EXPECT_EQ(rep.output_tokens, planned_tokens);
  EXPECT_EQ(rep.slo_met, expected);
  EXPECT_EQ(rep.ttft.count, expected);
  EXPECT_EQ(rep.e2e.count, expected);
  EXPECT_EQ(rep.server_ttft.count, expected);
  EXPECT_GT(rep.request_throughput, 0);

  const Progress done = (*runner)->Snapshot();
  EXPECT_EQ(done.issued, expected);
  EXPECT_EQ(done.done, expected);
  EXPECT_EQ(done.in_flight, 0);
  EXPECT_EQ(done.output_tokens, planned_tokens);

  RunSummary summary;
  summary.label = "ced";
  summary.report = rep;
  const auto doc = nlohmann::json::parse(ReportJson(ReportContext{}, {summary}));
  EXPECT_EQ(doc["runs"][0]["succeeded"].get<int64_t>() + doc["runs"][0]["failed"].get<int64_t>(),
            doc["runs"][0]["issued"].get<int64_t>());
}

}  // namespace
}  // namespace ced::loadgen
