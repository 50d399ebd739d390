// The disaggregated cluster on the CUDA backend: `ced cluster --device cuda`
// (router, gateway, a prefill and a decode worker as processes on one GPU, K/V
// over UCX) must produce the colocated engine's greedy tokens, with every
// service's /metrics up (the CUDA backend is a plugin, so the services' HTTP
// threads keep their small static TLS). Without a GPU: `ced serve --device
// cuda` must fail with a clear error instead of crashing.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "services/common/subprocess.h"

#include "tests/cuda/cuda_test_util.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/http_get.h"

namespace ced::testing {
namespace {

// Runs `ced args...` to completion (bounded); returns {exit status, output}.
std::pair<int, std::string> RunCed(const std::vector<std::string>& args) {
  const std::string log = ::testing::TempDir() + "/ced_cuda_cli_" + std::to_string(getpid());
  services::SubprocessOptions options;
  options.argv = {CedBinary()};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.output_path = log;
  int st = 0;
  absl::StatusOr<std::unique_ptr<services::Subprocess>> child =
      services::Subprocess::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (child.ok()) {
    absl::StatusOr<int> done = (*child)->Wait(/*timeout_s=*/120);
    if (done.ok()) {
      st = *done;
    } else {
      ADD_FAILURE() << "ced did not exit";
      (*child)->Terminate(/*grace_s=*/0);
    }
  }
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(log.c_str());
  return {st, ss.str()};
}

TEST(CudaServiceTest, ServeOnCudaWithoutADeviceFailsWithAClearError) {
  if (HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  const std::string model = MakeModelDir("tiny");
  for (const char* role : {"--role=prefill", "--role=decode"}) {
    auto [st, out] = RunCed({"serve", role, "--device", "cuda", "--model", model, "--listen",
                             "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--router", ""});
    ASSERT_TRUE(WIFEXITED(st)) << "ced crashed (" << st << "):\n" << out;
    EXPECT_NE(WEXITSTATUS(st), 0) << out;
    EXPECT_NE(out.find("no CUDA device"), std::string::npos) << out;
  }
}

TEST(CudaServiceTest, DisaggregatedOnGpuEqualsColocated) {
  CED_SKIP_WITHOUT_CUDA();
  UseOneOpenMpThreadPerProcess();
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--device", "cuda"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  for (const char* name : {"prefill-0", "decode-0", "router", "gateway"}) {
    ASSERT_TRUE(cluster.addresses().count(name)) << name;
    int status = 0;
    const std::string body =
        HttpGet(cluster.addresses().at(name).at("metrics"), "/metrics", &status);
    EXPECT_EQ(status, 200) << name;
    EXPECT_NE(body.find("# TYPE"), std::string::npos) << name << " /metrics";
  }
  ColocatedEngine colocated(model);
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    const auto prompt = Prompt(150, 3);
    const auto expected = colocated.Run(prompt, 24);
    GenResult r = Generate(cluster.gateway(), Request(prompt, 24, on));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Log();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
  }
}

}  // namespace
}  // namespace ced::testing
