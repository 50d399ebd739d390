// A client on a second gRPC implementation (Debian's Python grpcio, messages
// generated from proto/ by protoc at test time) against a real cluster: the
// gateway's health, its server reflection (which lists ced.v1.Gateway and
// serves its descriptor), and a streamed Generate whose tokens equal the C++
// client's and the colocated engine's. Skipped without Python grpcio (fails under CI=true).
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/common/missing_tool.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/metrics/test_util.h"

namespace ced::testing {
namespace {

using metrics::testing::RunCommand;
using metrics::testing::TempDir;

std::string SourceDir() {
  const char* dir = std::getenv("CED_SOURCE_DIR");
  return dir != nullptr ? dir : CED_SOURCE_DIR_DEFAULT;
}

// Debian's interpreter carries python3-grpcio; a PATH python3 may not.
std::string Python() {
  for (const std::string& candidate :
       {std::string("/usr/bin/python3"), metrics::testing::FindInPath("python3")}) {
    if (candidate.empty()) continue;
    std::string output;
    auto rc = RunCommand({candidate, "-c", "import grpc, google.protobuf"}, "", &output,
                         absl::Seconds(60));
    if (rc.ok() && *rc == 0) return candidate;
  }
  return "";
}

class E2ePythonClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = Python();
    if (python_.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("python3 with grpcio and protobuf");
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "1", "--decode", "1"});
  }
  void TearDown() override { cluster_.reset(); }
  std::string python_, model_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(E2ePythonClientTest, StreamsTheSameTokensAndSeesHealthAndReflection) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  TempDir generated;
  std::string output;
  auto rc = RunCommand({CED_PROTOC, absl::StrCat("--proto_path=", SourceDir(), "/proto"),
                        absl::StrCat("--python_out=", generated.path()), "ced/v1/gateway.proto"},
                       "", &output, absl::Seconds(60));
  ASSERT_TRUE(rc.ok() && *rc == 0) << output;

  const std::vector<int32_t> prompt = Prompt(120, 7);
  constexpr int kMaxTokens = 20;
  output.clear();
  rc = RunCommand(
      {python_, SourceDir() + "/tests/e2e/python_client.py", cluster_->gateway(), generated.path(),
       std::to_string(kMaxTokens), "REPLAY_ON_DECODE", absl::StrJoin(prompt, ",")},
      "", &output, absl::Seconds(120));
  ASSERT_TRUE(rc.ok()) << rc.status() << "\n" << output;
  ASSERT_EQ(*rc, 0) << output;

  const std::vector<int32_t> expected = ColocatedEngine(model_).Run(prompt, kMaxTokens);
  const GenResult cpp =
      Generate(cluster_->gateway(), Request(prompt, kMaxTokens, ced::v1::REPLAY_ON_DECODE));
  ASSERT_TRUE(cpp.status.ok()) << cpp.status.error_message();
  EXPECT_EQ(cpp.tokens, expected);
  const std::string tokens_line = "tokens " + absl::StrJoin(expected, ",") + "\n";
  for (const std::string& line :
       {std::string("health 0801\n"), tokens_line, std::string("finish FINISH_REASON_LENGTH\n"),
        std::string("request_id python-1\n"),
        std::string("placement REPLAY_ON_DECODE prefill-0 decode-0\n"),
        std::string("service ced.v1.Gateway\n"), std::string("service grpc.health.v1.Health\n"),
        std::string("method ced.v1.Gateway.Generate server_streaming=True\n"),
        std::string("method ced.v1.Gateway.Tokenize server_streaming=False\n"),
        std::string("method ced.v1.Gateway.ModelInfo server_streaming=False\n")}) {
    EXPECT_NE(output.find(line), std::string::npos) << "missing: " << line << "---\n" << output;
  }
}

}  // namespace
}  // namespace ced::testing
