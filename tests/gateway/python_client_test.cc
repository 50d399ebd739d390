// A client on a second gRPC implementation (Debian's Python grpcio, messages
// generated from proto/ with protoc at test time) talks to the gateway:
// health, Tokenize, a streamed Generate, a rejected request. Skipped when
// Python grpcio / protobuf are not installed (a failure under CI=true).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "services/common/grpc_util.h"
#include "services/router/router_server.h"
#include "tests/common/missing_tool.h"
#include "tests/gateway/fake_workers.h"
#include "tests/gateway/gateway_test_util.h"
#include "tests/metrics/test_util.h"

namespace ced::gateway {
namespace {

using metrics::testing::RunCommand;
using metrics::testing::TempDir;

std::string Python() {
  // Debian's interpreter carries python3-grpcio; a PATH python3 may not.
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

TEST(PythonClientTest, StreamsThroughTheGateway) {
  const std::string python = Python();
  if (python.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("python3 with grpcio and protobuf");
  const char* env_dir = std::getenv("CED_SOURCE_DIR");
  const std::string source_dir = env_dir != nullptr ? env_dir : CED_TEST_SOURCE_DIR;

  TempDir generated;
  std::string output;
  auto rc = RunCommand({CED_PROTOC, absl::StrCat("--proto_path=", source_dir, "/proto"),
                        absl::StrCat("--python_out=", generated.path()), "ced/v1/gateway.proto"},
                       "", &output, absl::Seconds(60));
  ASSERT_TRUE(rc.ok() && *rc == 0) << output;

  router::RouterServerOptions ro;
  ro.heartbeat_timeout = absl::Seconds(600);
  auto router = router::RouterServer::Start(ro);
  ASSERT_TRUE(router.ok()) << router.status();
  testing::FakeDecodeWorker decode;
  testing::FakePrefillWorker prefill;
  decode.SetScript(
      {grpc::Status::OK,
       {testing::Chunk(0, "He"), testing::Chunk(2, "llo", ced::internal::FINISH_REASON_LENGTH)},
       false});
  prefill.SetScript({'H', true, true, false, grpc::Status::OK});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&decode);
  builder.RegisterService(&prefill);
  std::unique_ptr<grpc::Server> workers = builder.BuildAndStart();
  ASSERT_NE(workers, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto router_stub =
      ced::internal::Router::NewStub(services::MakeChannel((*router)->grpc_address()));
  ASSERT_TRUE(RegisterWorker(router_stub.get(), PrefillInfo(address)).ok());
  ASSERT_TRUE(RegisterWorker(router_stub.get(), DecodeInfo(address)).ok());
  auto gateway = GatewayServer::Start(TestGatewayOptions((*router)->grpc_address()));
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  ASSERT_TRUE(WaitForHealth((*gateway)->grpc_address(), true, absl::Seconds(20)));

  output.clear();
  rc = RunCommand({python, absl::StrCat(source_dir, "/tests/gateway/python_client.py"),
                   (*gateway)->grpc_address(), generated.path()},
                  "", &output, absl::Seconds(120));
  ASSERT_TRUE(rc.ok()) << rc.status() << "\n" << output;
  EXPECT_EQ(*rc, 0) << output;
  for (const char* line :
       {"health 0801\n", "tokenize 256,104,105\n", "tokens 72,101,108,108,111\n", "text Hello\n",
        "finish FINISH_REASON_LENGTH\n", "bad-request INVALID_ARGUMENT top_k:"}) {
    EXPECT_NE(output.find(line), std::string::npos) << line << "\n---\n" << output;
  }
  (*gateway)->Shutdown();
  workers->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace ced::gateway
