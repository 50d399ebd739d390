// The runner without a cluster: validation and failing calls.
#include "bench/loadgen/runner.h"

#include "gtest/gtest.h"

namespace ced::loadgen {
namespace {

TEST(LoadgenRunnerTest, UnreachableGatewayFailsEveryRequestWithItsCode) {
  WorkloadOptions w;
  w.input_mean = 8;
  w.output_mean = 2;
  w.rate = 50;
  auto workload = Workload::Create(w);
  ASSERT_TRUE(workload.ok());
  RunOptions run;
  run.target = "127.0.0.1:1";  // nothing listens on port 1
  run.max_requests = 5;
  run.request_timeout_s = 5;
  auto runner = LoadRunner::Create(run, &*workload);
  ASSERT_TRUE(runner.ok());
  auto result = (*runner)->Run();
  ASSERT_TRUE(result.ok());
  const RunReport rep = ComputeReport(result->records, Slo{});
  EXPECT_EQ(rep.issued, 5);
  EXPECT_EQ(rep.failed, 5);
  EXPECT_EQ(rep.errors.at("UNAVAILABLE"), 5);
  EXPECT_FALSE(rep.first_errors.at("UNAVAILABLE").empty());  // gRPC's reason
  EXPECT_FALSE(FetchModelInfo("127.0.0.1:1", 0.5).ok());
}

TEST(LoadgenRunnerTest, ARunNeedsABound) {
  auto workload = Workload::Create(WorkloadOptions{});
  ASSERT_TRUE(workload.ok());
  RunOptions run;
  run.target = "127.0.0.1:1";
  EXPECT_FALSE(LoadRunner::Create(run, &*workload).ok());
  run.max_requests = 1;
  run.request_timeout_s = 0;
  EXPECT_FALSE(LoadRunner::Create(run, &*workload).ok());
}

}  // namespace
}  // namespace ced::loadgen
