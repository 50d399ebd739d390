// The gateway in process against a real router and fake worker services.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ced/internal/router.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"
#include "engine/model/presets.h"
#include "services/common/grpc_util.h"
#include "services/gateway/gateway_command.h"
#include "services/gateway/gateway_server.h"
#include "services/router/router_server.h"
#include "tests/gateway/fake_workers.h"
#include "tests/gateway/gateway_test_util.h"
#include "tests/metrics/test_util.h"

namespace ced::gateway {
namespace {

using ced::internal::FINISH_REASON_LENGTH;
using ced::internal::FINISH_REASON_STOP;
using ced::v1::GenerateRequest;
using testing::Chunk;
using testing::FakeDecodeWorker;
using testing::FakePrefillWorker;

std::vector<int32_t> Ids(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster(); }

  void StartCluster(bool with_prefill = true,
                    std::function<void(router::RouterServerOptions*)> router_tweak = nullptr,
                    std::function<void(GatewayServerOptions*)> gateway_tweak = nullptr) {
    gateway_.reset();
    router_.reset();
    workers_.reset();
    router::RouterServerOptions ro;
    ro.heartbeat_timeout = absl::Seconds(600);
    if (router_tweak) router_tweak(&ro);
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
    auto router_stub =
        ced::internal::Router::NewStub(services::MakeChannel(router_->grpc_address()));
    if (with_prefill) {
      ASSERT_TRUE(RegisterWorker(router_stub.get(), PrefillInfo(address)).ok());
    }
    ASSERT_TRUE(RegisterWorker(router_stub.get(), DecodeInfo(address)).ok());

    GatewayServerOptions go = TestGatewayOptions(router_->grpc_address());
    if (gateway_tweak) gateway_tweak(&go);
    auto gateway = GatewayServer::Start(go);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = std::move(*gateway);
    stub_ = ced::v1::Gateway::NewStub(services::MakeChannel(gateway_->grpc_address()));
  }

  void TearDown() override {
    if (gateway_ != nullptr) gateway_->Shutdown();
    if (workers_ != nullptr) workers_->Shutdown(std::chrono::system_clock::now());
  }

  // The happy-path scripts: "Hello" in two chunks; the prefill worker also
  // sends the first token.
  void ScriptHello() {
    decode_.SetScript({grpc::Status::OK,
                       {Chunk(0, "He"), Chunk(2, "llo", FINISH_REASON_LENGTH)},
                       /*hold_open=*/false});
    prefill_.SetScript({'H', true, true, false, grpc::Status::OK});
  }

  GenerateRequest Request(const std::string& prompt = "hi", int max_tokens = 5) {
    GenerateRequest r;
    r.set_prompt(prompt);
    r.set_max_tokens(max_tokens);
    r.set_request_id("req-1");
    return r;
  }

  GenerateResult Generate(const GenerateRequest& request, grpc::ClientContext* ctx = nullptr) {
    grpc::ClientContext local;
    return CollectGenerate(stub_.get(), request, ctx != nullptr ? ctx : &local);
  }

  FakeDecodeWorker decode_;
  FakePrefillWorker prefill_;
  std::unique_ptr<grpc::Server> workers_;
  std::unique_ptr<router::RouterServer> router_;
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
};

TEST_F(GatewayTest, StreamsOrderedTokensAndAFinalMessage) {
  ScriptHello();
  GenerateRequest request = Request();
  request.set_replay_on(ced::v1::REPLAY_ON_PREFILL);
  const GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.token_ids, Ids("Hello")) << "each step exactly once, in order";
  EXPECT_EQ(result.text, "Hello");
  ASSERT_GE(result.messages.size(), 2u);
  for (const auto& m : result.messages) EXPECT_EQ(m.request_id(), "req-1");
  for (size_t i = 0; i + 1 < result.messages.size(); ++i) {
    EXPECT_EQ(result.messages[i].finish_reason(), ced::v1::FINISH_REASON_UNSPECIFIED);
  }
  const ced::v1::GenerateResponse& last = result.messages.back();
  EXPECT_EQ(last.finish_reason(), ced::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 2);
  EXPECT_EQ(last.usage().completion_tokens(), 5);
  EXPECT_GT(last.timings().ttft_ms(), 0);
  EXPECT_GE(last.timings().total_ms(), last.timings().ttft_ms());
  EXPECT_GE(last.timings().queue_ms(), 1);
  EXPECT_EQ(last.timings().prefill_ms(), 2);
  EXPECT_EQ(last.timings().transfer_ms(), 3);
  EXPECT_EQ(last.placement().prefill_worker_id(), "p0");
  EXPECT_EQ(last.placement().decode_worker_id(), "d0");
  EXPECT_EQ(last.placement().replay_on(), ced::v1::REPLAY_ON_PREFILL);
  EXPECT_EQ(last.placement().replay_mode(), ced::v1::REPLAY_MODE_BOUNDED);
  EXPECT_EQ(last.placement().replay_window(), 16);
  EXPECT_FALSE(last.placement().local_prefill());

  // What the workers were asked.
  const auto reserves = decode_.reserves();
  ASSERT_EQ(reserves.size(), 1u);
  const ced::internal::ReserveRequest& reserve = reserves[0];
  EXPECT_EQ(reserve.request_id(), "req-1");
  EXPECT_EQ(
      std::vector<int32_t>(reserve.prompt_token_ids().begin(), reserve.prompt_token_ids().end()),
      Ids("hi"));
  EXPECT_EQ(reserve.max_tokens(), 5);
  EXPECT_EQ(std::vector<int32_t>(reserve.stop_token_ids().begin(), reserve.stop_token_ids().end()),
            std::vector<int32_t>{257})
      << "EOS is a stop token unless ignore_eos";
  EXPECT_EQ(reserve.replay().replay_on(), ced::internal::REPLAY_ON_PREFILL);
  EXPECT_EQ(reserve.replay().mode(), ced::internal::REPLAY_MODE_BOUNDED);
  EXPECT_FALSE(reserve.local_prefill());
  EXPECT_EQ(reserve.prefill_worker_id(), "p0");
  EXPECT_EQ(reserve.sampling().top_p(), 1.0f);
  const auto prefills = prefill_.prefills();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].transfer_token(), 42u);
  EXPECT_EQ(prefills[0].decode_worker_id(), "d0");
  EXPECT_EQ(prefills[0].decode_kv_address(), "inproc://d0");
  EXPECT_EQ(prefills[0].kv_format(), "bf16");
  EXPECT_EQ(prefills[0].token_ids_size(), 2);
  EXPECT_TRUE(decode_.cancels().empty());

  const std::string metrics = gateway_->MetricsText();
  for (const char* line :
       {"ced_gateway_requests_total{api=\"grpc\",outcome=\"length\"} 1",
        "ced_gateway_generated_tokens_total{api=\"grpc\"} 5",
        "ced_gateway_prompt_tokens_total{api=\"grpc\"} 2",
        "ced_gateway_ttft_seconds_count{api=\"grpc\"} 1",
        "ced_gateway_e2e_latency_seconds_count{api=\"grpc\"} 1",
        "ced_gateway_inflight_requests 0"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line;
  }
}

TEST_F(GatewayTest, FirstTokenOnlyFromPrefillIsOrderedFirst) {
  decode_.SetScript({grpc::Status::OK, {Chunk(1, "ello", FINISH_REASON_STOP)}, false});
  prefill_.SetScript({'H', true, true, false, grpc::Status::OK});
  const GenerateResult result = Generate(Request());
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.token_ids, Ids("Hello"));
  EXPECT_EQ(result.text, "Hello");
  EXPECT_EQ(result.messages.back().finish_reason(), ced::v1::FINISH_REASON_STOP);
}

TEST_F(GatewayTest, MissingStepIsAnError) {
  decode_.SetScript({grpc::Status::OK, {Chunk(1, "ello", FINISH_REASON_LENGTH)}, false});
  prefill_.SetScript({std::nullopt, true, true, false, grpc::Status::OK});
  const GenerateResult result = Generate(Request());
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(result.status.error_message().find("step 0"), std::string::npos)
      << result.status.error_message();
  EXPECT_TRUE(result.token_ids.empty());
}

TEST_F(GatewayTest, StopStringTruncatesAndCancelsTheDecodeWorker) {
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "He"), Chunk(2, "llo wor")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, false, false, grpc::Status::OK});
  GenerateRequest request = Request("hi", 20);
  request.add_stop("xyz");
  request.add_stop("lo w");
  const GenerateResult result = Generate(request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, "Hel");
  EXPECT_EQ(result.token_ids, Ids("Hello w"));
  const ced::v1::GenerateResponse& last = result.messages.back();
  EXPECT_EQ(last.finish_reason(), ced::v1::FINISH_REASON_STOP);
  EXPECT_EQ(last.finish_detail(), "lo w");
  EXPECT_EQ(last.usage().completion_tokens(), 7);
  EXPECT_TRUE(decode_.WaitForCancel("req-1", absl::Seconds(10)));
  EXPECT_TRUE(decode_.WaitForCancelledStreams(1, absl::Seconds(10)));
}

TEST_F(GatewayTest, ClientCancelCancelsBothWorkers) {
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "He")}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, false, false, /*hold_open=*/true, grpc::Status::OK});
  grpc::ClientContext ctx;
  GenerateRequest request = Request("hi", 20);
  request.set_request_id("cancel-me");
  auto reader = stub_->Generate(&ctx, request);
  ced::v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.token_ids_size(), 2);
  ctx.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(decode_.WaitForCancel("cancel-me", absl::Seconds(10)));
  EXPECT_TRUE(prefill_.WaitForCancel("cancel-me", absl::Seconds(10)));
  EXPECT_TRUE(decode_.WaitForCancelledStreams(1, absl::Seconds(10)));
}

// The placement runs on completions (Route, then Reserve, then the streams):
// a client that leaves while the Reserve is on its way gets CANCELLED, the
// reservation is cancelled on the decode worker once it answered, and no
// prefill starts.
TEST_F(GatewayTest, ClientCancelDuringTheReserveCancelsItAndStartsNoPrefill) {
  // A first request: the gateway learns that the fake worker has no
  // multiplexed stream, so the next Reserve goes out asynchronously.
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hi", FINISH_REASON_LENGTH)}, false});
  const GenerateResult first = Generate(Request("hi", 2));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(prefill_.prefills().size(), 1u);

  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hi", FINISH_REASON_LENGTH)}, false,
                     /*reserve_delay=*/absl::Milliseconds(1500)});
  grpc::ClientContext ctx;
  GenerateRequest request = Request("hi", 2);
  request.set_request_id("cancel-in-reserve");
  auto reader = stub_->Generate(&ctx, request);
  ASSERT_TRUE(decode_.WaitForReserves(2, absl::Seconds(10)));
  ctx.TryCancel();
  ced::v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(decode_.WaitForCancel("cancel-in-reserve", absl::Seconds(10)));
  EXPECT_EQ(prefill_.prefills().size(), 1u) << "no prefill for the cancelled request";
  EXPECT_EQ(decode_.reserves().size(), 2u);
}

TEST_F(GatewayTest, DeadlinePropagatesAndExpires) {
  decode_.SetScript({grpc::Status::OK, {}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, false, false, grpc::Status::OK});
  grpc::ClientContext ctx;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(1500);
  ctx.set_deadline(deadline);
  const GenerateResult result = Generate(Request(), &ctx);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(decode_.WaitForStreams(1, absl::Seconds(10)));
  EXPECT_LE(decode_.last_stream_deadline(), deadline + std::chrono::seconds(1))
      << "the decode stream carries the client's deadline";
  EXPECT_TRUE(decode_.WaitForCancel("req-1", absl::Seconds(10)));
}

TEST_F(GatewayTest, ReserveErrorsPropagateTheirCode) {
  decode_.SetScript(
      {grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no free KV blocks"), {}, false});
  const GenerateResult result = Generate(Request());
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(result.status.error_message().find("no free KV blocks"), std::string::npos);
  EXPECT_TRUE(prefill_.prefills().empty());
}

TEST_F(GatewayTest, PrefillErrorsPropagateAndCancelTheDecodeWorker) {
  decode_.SetScript({grpc::Status::OK, {}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, false, false, false,
                      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no decoder weights")});
  const GenerateResult result = Generate(Request());
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(result.status.error_message().find("prefill worker p0"), std::string::npos);
  EXPECT_TRUE(decode_.WaitForCancel("req-1", absl::Seconds(10)));
}

TEST_F(GatewayTest, InvalidRequestsNameTheFieldAndReachNoWorker) {
  struct Case {
    std::string field;
    std::function<void(GenerateRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"prompt", [](GenerateRequest* r) { r->clear_prompt(); }},
      {"prompt", [](GenerateRequest* r) { r->add_prompt_token_ids(5); }},
      {"prompt", [](GenerateRequest* r) { r->set_prompt("\xff\xfe"); }},
      {"prompt_token_ids[0]",
       [](GenerateRequest* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(100000);
       }},
      {"max_tokens", [](GenerateRequest* r) { r->set_max_tokens(-1); }},
      {"max_tokens", [](GenerateRequest* r) { r->set_max_tokens(127); }},
      {"temperature", [](GenerateRequest* r) { r->set_temperature(-1); }},
      {"top_p", [](GenerateRequest* r) { r->set_top_p(2); }},
      {"top_k", [](GenerateRequest* r) { r->set_top_k(-2); }},
      {"stop",
       [](GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->add_stop("x");
       }},
      {"stop[0]", [](GenerateRequest* r) { r->add_stop(""); }},
      {"stop_token_ids[0]", [](GenerateRequest* r) { r->add_stop_token_ids(-4); }},
      {"request_id", [](GenerateRequest* r) { r->set_request_id("tab\there"); }},
      {"replay_on",
       [](GenerateRequest* r) { r->set_replay_on(static_cast<ced::v1::ReplayOn>(4)); }},
      {"replay_mode",
       [](GenerateRequest* r) { r->set_replay_mode(static_cast<ced::v1::ReplayMode>(7)); }},
  };
  for (const Case& c : cases) {
    GenerateRequest request = Request();
    c.mutate(&request);
    const GenerateResult result = Generate(request);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(result.status.error_message().rfind(c.field + ":", 0), 0u)
        << c.field << " <- " << result.status.error_message();
    EXPECT_TRUE(result.messages.empty());
  }
  EXPECT_TRUE(decode_.reserves().empty());
  EXPECT_NE(gateway_->MetricsText().find(absl::StrCat(
                "ced_gateway_requests_total{api=\"grpc\",outcome=\"invalid_argument\"} ",
                cases.size())),
            std::string::npos);
}

TEST_F(GatewayTest, OversizedRequestIsResourceExhausted) {
  StartCluster(true, nullptr, [](GatewayServerOptions* o) { o->max_request_bytes = 4096; });
  const GenerateResult result = Generate(Request(std::string(10000, 'a')));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(GatewayTest, AdmissionIsBounded) {
  StartCluster(true, nullptr, [](GatewayServerOptions* o) { o->max_inflight = 1; });
  decode_.SetScript({grpc::Status::OK, {}, /*hold_open=*/true});
  prefill_.SetScript({std::nullopt, true, false, false, grpc::Status::OK});
  grpc::ClientContext first_ctx;
  GenerateRequest first = Request();
  first.set_request_id("first");
  auto reader = stub_->Generate(&first_ctx, first);
  ASSERT_TRUE(decode_.WaitForStreams(1, absl::Seconds(10)));
  GenerateRequest second = Request();
  second.set_request_id("second");
  const GenerateResult rejected = Generate(second);
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(rejected.status.error_message().find("max-inflight"), std::string::npos);
  first_ctx.TryCancel();
  ced::v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(GatewayTest, SequentialRequestsFitOneSlot) {
  StartCluster(true, nullptr, [](GatewayServerOptions* o) { o->max_inflight = 1; });
  ScriptHello();
  for (int i = 0; i < 3; ++i) {
    GenerateRequest request = Request();
    request.set_request_id(absl::StrCat("seq-", i));
    const GenerateResult result = Generate(request);
    ASSERT_TRUE(result.status.ok()) << i << ": " << result.status.error_message();
    EXPECT_EQ(result.text, "Hello");
  }
}

TEST_F(GatewayTest, LocalPrefillSkipsThePrefillWorker) {
  StartCluster(/*with_prefill=*/false,
               [](router::RouterServerOptions* o) { o->policy.local_prefill_fallback = true; });
  decode_.SetScript({grpc::Status::OK, {Chunk(0, "Hey", FINISH_REASON_LENGTH)}, false});
  const GenerateResult result = Generate(Request("hi", 3));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, "Hey");
  EXPECT_TRUE(result.messages.back().placement().local_prefill());
  EXPECT_EQ(result.messages.back().placement().prefill_worker_id(), "");
  EXPECT_TRUE(prefill_.prefills().empty());
  ASSERT_EQ(decode_.reserves().size(), 1u);
  EXPECT_TRUE(decode_.reserves()[0].local_prefill());
}

// --access-log on the gRPC API: a line for a served request and one for a
// request refused by validation, each naming the caller.
TEST_F(GatewayTest, AccessLogOverGrpc) {
  const std::string path = ::testing::TempDir() + "/ced_gateway_access_log_test.jsonl";
  std::remove(path.c_str());
  StartCluster(true, nullptr, [&](GatewayServerOptions* o) { o->access_log = path; });
  ScriptHello();
  ASSERT_TRUE(Generate(Request()).status.ok());
  GenerateRequest bad = Request();
  bad.set_top_k(-1);
  bad.set_request_id("req-bad");
  EXPECT_EQ(Generate(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  for (const char* want :
       {"\"api\":\"grpc\"", "\"client\":\"127.0.0.1:", "\"request_id\":\"req-1\"",
        "\"outcome\":\"length\"", "\"status\":\"OK\"", "\"completion_tokens\":5",
        "\"decode_worker\":\"d0\""}) {
    EXPECT_NE(lines[0].find(want), std::string::npos) << want << " in " << lines[0];
  }
  for (const char* want : {"\"request_id\":\"req-bad\"", "\"outcome\":\"invalid_argument\"",
                           "\"status\":\"INVALID_ARGUMENT\"", "top_k", "\"client\":\"127.0.0.1:"}) {
    EXPECT_NE(lines[1].find(want), std::string::npos) << want << " in " << lines[1];
  }
  std::remove(path.c_str());
}

TEST_F(GatewayTest, RouterDownIsUnavailable) {
  const int port = metrics::testing::PickFreePort();
  StartCluster(true, nullptr, [port](GatewayServerOptions* o) {
    o->router_address = absl::StrCat("127.0.0.1:", port);
  });
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  const GenerateResult result = Generate(Request(), &ctx);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_NE(result.status.error_message().find("router"), std::string::npos);
}

TEST_F(GatewayTest, TokenizeAndModelInfo) {
  grpc::ClientContext ctx;
  ced::v1::TokenizeRequest tokenize;
  tokenize.set_text("hi");
  tokenize.set_add_bos(true);
  ced::v1::TokenizeResponse tokens;
  ASSERT_TRUE(stub_->Tokenize(&ctx, tokenize, &tokens).ok());
  EXPECT_EQ(std::vector<int32_t>(tokens.token_ids().begin(), tokens.token_ids().end()),
            (std::vector<int32_t>{256, 'h', 'i'}));

  grpc::ClientContext info_ctx;
  ced::v1::ModelInfoResponse info;
  ASSERT_TRUE(stub_->ModelInfo(&info_ctx, {}, &info).ok());
  EXPECT_EQ(info.model_name(), "test-model");
  EXPECT_EQ(info.vocab_size(), 260);
  EXPECT_EQ(info.num_layers(), 8);
  EXPECT_EQ(info.num_encoder_layers(), 4);
  EXPECT_EQ(info.max_position(), 128);
  EXPECT_EQ(info.eos_token_id(), 257);
  EXPECT_EQ(info.bos_token_id(), 256);
  EXPECT_FALSE(info.decoder_only());
  EXPECT_GT(info.params_per_generated_token(), info.params_per_prompt_token());
  EXPECT_EQ(info.num_prefill_workers(), 1);
  EXPECT_EQ(info.num_decode_workers(), 1);
  EXPECT_EQ(info.kv_block_size(), 16);
  EXPECT_EQ(info.kv_cache_dtype(), "bf16");
  EXPECT_EQ(info.model_fingerprint(), "fp-test");
}

TEST_F(GatewayTest, HealthFollowsTheWorkers) {
  EXPECT_TRUE(WaitForHealth(gateway_->grpc_address(), /*serving=*/true, absl::Seconds(20)));
  // The prefill pool leaves: the cluster cannot serve until it is back.
  auto router = ced::internal::Router::NewStub(services::MakeChannel(router_->grpc_address()));
  grpc::ClientContext ctx;
  ced::internal::DeregisterRequest leave;
  leave.set_worker_id("p0");
  ced::internal::DeregisterResponse left;
  ASSERT_TRUE(router->Deregister(&ctx, leave, &left).ok());
  EXPECT_TRUE(WaitForHealth(gateway_->grpc_address(), /*serving=*/false, absl::Seconds(20)));
  ASSERT_TRUE(RegisterWorker(router.get(), PrefillInfo("127.0.0.1:1")).ok());
  EXPECT_TRUE(WaitForHealth(gateway_->grpc_address(), /*serving=*/true, absl::Seconds(20)));
}

TEST(GatewayCommandTest, UsageErrorsAndHelp) {
  EXPECT_EQ(RunGatewayCommand({"--help"}), 0);
  EXPECT_EQ(RunGatewayCommand({}), 2) << "--model is required";
  EXPECT_EQ(RunGatewayCommand({"--model=m", "--max-inflight=0"}), 2);
  EXPECT_EQ(RunGatewayCommand({"--model=m", "--replay-on=sideways"}), 2);
  EXPECT_EQ(RunGatewayCommand({"--model=/nonexistent/model"}), 1);
}

}  // namespace
}  // namespace ced::gateway
