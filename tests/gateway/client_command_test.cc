// `ced client generate|tokenize|model-info` against an in-process gateway.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/cli/commands.h"
#include "services/cli/service_commands.h"
#include "services/common/grpc_util.h"
#include "services/router/router_server.h"
#include "tests/gateway/fake_workers.h"
#include "tests/gateway/gateway_test_util.h"

namespace ced::cli {

// The ced binary defines Fail in main.cc; this test links the command alone.
int Fail(const std::string& words, const std::string& message, int code) {
  std::fprintf(stderr, "ced %s: %s\n", words.c_str(), message.c_str());
  return code;
}

namespace {

using ced::gateway::testing::Chunk;

struct CommandRun {
  int code = -1;
  std::string out, err;
};

class ClientCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddClientCommand(&commands_);
    router::RouterServerOptions ro;
    ro.heartbeat_timeout = absl::Seconds(600);
    auto router = router::RouterServer::Start(ro);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = std::move(*router);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&decode_);
    builder.RegisterService(&prefill_);
    workers_ = builder.BuildAndStart();
    ASSERT_NE(workers_, nullptr);
    const std::string address = absl::StrCat("127.0.0.1:", port);
    auto stub = ced::internal::Router::NewStub(services::MakeChannel(router_->grpc_address()));
    ASSERT_TRUE(gateway::RegisterWorker(stub.get(), gateway::PrefillInfo(address)).ok());
    ASSERT_TRUE(gateway::RegisterWorker(stub.get(), gateway::DecodeInfo(address)).ok());
    auto gw = gateway::GatewayServer::Start(gateway::TestGatewayOptions(router_->grpc_address()));
    ASSERT_TRUE(gw.ok()) << gw.status();
    gateway_ = std::move(*gw);
    decode_.SetScript({grpc::Status::OK,
                       {Chunk(0, "He"), Chunk(2, "llo wo", ced::internal::FINISH_REASON_LENGTH)},
                       false});
    prefill_.SetScript({'H', true, true, false, grpc::Status::OK});
  }
  void TearDown() override {
    gateway_->Shutdown();
    workers_->Shutdown(std::chrono::system_clock::now());
  }

  CommandRun Invoke(const std::string& words, std::vector<std::string> args,
                    bool at_gateway = true) {
    if (at_gateway) args.push_back("--gateway=" + gateway_->grpc_address());
    for (const Command& c : commands_) {
      if (c.words != words) continue;
      CommandRun run;
      ::testing::internal::CaptureStdout();
      ::testing::internal::CaptureStderr();
      run.code = c.run(args);
      std::fflush(stdout);
      std::fflush(stderr);
      run.out = ::testing::internal::GetCapturedStdout();
      run.err = ::testing::internal::GetCapturedStderr();
      return run;
    }
    ADD_FAILURE() << "no command " << words;
    return {};
  }

  std::vector<Command> commands_;
  gateway::testing::FakeDecodeWorker decode_;
  gateway::testing::FakePrefillWorker prefill_;
  std::unique_ptr<grpc::Server> workers_;
  std::unique_ptr<router::RouterServer> router_;
  std::unique_ptr<gateway::GatewayServer> gateway_;
};

TEST_F(ClientCommandTest, GenerateStreamsTextAndASummary) {
  const CommandRun run = Invoke("client generate", {"hi", "--max-tokens=8", "--request-id=cli-1"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "Hello wo\n");
  EXPECT_NE(run.err.find("FINISH_REASON_LENGTH"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("completion 8"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("request cli-1"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("prefill p0, decode d0"), std::string::npos) << run.err;
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  EXPECT_EQ(reserves[0].prompt_token_ids(0), 256) << "BOS by default";
}

TEST_F(ClientCommandTest, StopFlagsRepeatAndSplit) {
  const CommandRun run = Invoke(
      "client generate", {"--prompt=hi", "--stop", "xyz,o\\x2c", "--stop=lo w", "--max-tokens=8"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "Hel\n");
  EXPECT_NE(run.err.find("FINISH_REASON_STOP (lo w)"), std::string::npos) << run.err;
}

TEST_F(ClientCommandTest, JsonPrintsEveryMessage) {
  prefill_.SetScript({std::nullopt, true, false, false, grpc::Status::OK});
  const CommandRun run =
      Invoke("client generate", {"--prompt-ids=1,2,3", "--max-tokens=8", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("\"token_ids\":[72,101]"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"finish_reason\":\"FINISH_REASON_LENGTH\""), std::string::npos);
}

TEST_F(ClientCommandTest, ErrorsCarryTheStatusCode) {
  const CommandRun run = Invoke("client generate", {"hi", "--top-k=-1"});
  EXPECT_EQ(run.code, 1);
  EXPECT_EQ(run.err.rfind("ced client generate: INVALID_ARGUMENT: top_k:", 0), 0u) << run.err;
  const CommandRun usage = Invoke("client generate", {"hi", "--replay-on=sideways"});
  EXPECT_EQ(usage.code, 2);
  // --session-id reaches the gateway, which checks it like every field.
  const CommandRun session = Invoke("client generate", {"hi", "--session-id=a b"});
  EXPECT_EQ(session.code, 1);
  EXPECT_EQ(session.err.rfind("ced client generate: INVALID_ARGUMENT: session_id:", 0), 0u)
      << session.err;
  const CommandRun ok = Invoke("client generate", {"hi", "--max-tokens=2", "--session-id=chat-7"});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(ClientCommandTest, WorkersListsWhatTheRouterKnows) {
  const CommandRun run =
      Invoke("client workers", {"--router=" + router_->grpc_address()}, /*at_gateway=*/false);
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("WORKER"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("d0 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("p0 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("K/V blocks free"), std::string::npos) << run.out;
  const CommandRun json =
      Invoke("client workers", {"--router=" + router_->grpc_address(), "--json"}, false);
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"worker_id\":\"d0\""), std::string::npos) << json.out;
  // A gateway is not a router: the error says so.
  const CommandRun wrong =
      Invoke("client workers", {"--router=" + gateway_->grpc_address()}, false);
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.err.find("is not a router"), std::string::npos) << wrong.err;
}

TEST_F(ClientCommandTest, TokenizeAndModelInfo) {
  const CommandRun tokens = Invoke("client tokenize", {"hi"});
  ASSERT_EQ(tokens.code, 0) << tokens.err;
  EXPECT_EQ(tokens.out, "104,105\n");
  const CommandRun info = Invoke("client model-info", {});
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("\"vocab_size\":260"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("\"num_decode_workers\":1"), std::string::npos) << info.out;
}

// `ced client drain` needs --worker, and says so when the address is not a
// prefill or decode worker (here: the gateway, which has no Drain).
TEST_F(ClientCommandTest, DrainNeedsAWorker) {
  const CommandRun missing = Invoke("client drain", {}, /*at_gateway=*/false);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--worker is required"), std::string::npos) << missing.err;
  const CommandRun not_worker =
      Invoke("client drain", {"--worker=" + gateway_->grpc_address()}, /*at_gateway=*/false);
  EXPECT_EQ(not_worker.code, 1);
  EXPECT_EQ(not_worker.err.rfind("ced client drain: " + gateway_->grpc_address() +
                                     " is not a prefill or decode worker (UNIMPLEMENTED",
                                 0),
            0u)
      << not_worker.err;
}

}  // namespace
}  // namespace ced::cli
