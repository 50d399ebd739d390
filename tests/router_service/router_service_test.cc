// The router service in process, driven by real gRPC client stubs.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ced/internal/router.grpc.pb.h"
#include "services/common/grpc_util.h"
#include "services/router/router_command.h"
#include "services/router/router_server.h"
#include "tests/metrics/test_util.h"

namespace ced::router {
namespace {

using ced::internal::LoadReport;
using ced::internal::RouteRequest;
using ced::internal::RouteResponse;
using ced::internal::WorkerInfo;

WorkerInfo Decode(const std::string& id, int64_t blocks = 100) {
  WorkerInfo w;
  w.set_worker_id(id);
  w.set_role(ced::internal::ROLE_DECODE);
  w.set_grpc_address("127.0.0.1:7" + id.substr(1));
  w.set_kv_address("ucx://" + id);
  w.set_weights(ced::internal::WEIGHTS_HELD_FULL);
  w.set_total_kv_blocks(blocks);
  w.set_block_size(16);
  w.set_model_fingerprint("fp-a");
  w.set_kv_format("f32");
  w.set_kv_transport("ucx");
  return w;
}

WorkerInfo Prefill(const std::string& id, ced::internal::WeightsHeld weights =
                                              ced::internal::WEIGHTS_HELD_ENCODER_REPLAY) {
  WorkerInfo w;
  w.set_worker_id(id);
  w.set_role(ced::internal::ROLE_PREFILL);
  w.set_grpc_address("127.0.0.1:8" + id.substr(1));
  w.set_weights(weights);
  w.set_model_fingerprint("fp-a");
  w.set_kv_format("f32");
  return w;
}

RouteRequest Route(int64_t prompt, int64_t max_tokens,
                   ced::internal::ReplayOn replay_on = ced::internal::REPLAY_ON_UNSPECIFIED) {
  RouteRequest r;
  r.set_request_id("req");
  r.set_prompt_tokens(prompt);
  r.set_max_tokens(max_tokens);
  r.set_replay_on(replay_on);
  return r;
}

class RouterServiceTest : public ::testing::Test {
 protected:
  void StartRouter(RouterServerOptions options = {}) {
    options.listen_address = "127.0.0.1:0";
    options.metrics_address = "127.0.0.1:0";
    auto server = RouterServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = ced::internal::Router::NewStub(services::MakeChannel(server_->grpc_address()));
  }

  void SetUp() override {
    RouterServerOptions options;
    options.heartbeat_timeout = absl::Seconds(60);
    StartRouter(options);
  }

  grpc::Status Register(const WorkerInfo& worker) {
    grpc::ClientContext ctx;
    ced::internal::RegisterRequest request;
    *request.mutable_worker() = worker;
    ced::internal::RegisterResponse response;
    return stub_->Register(&ctx, request, &response);
  }

  grpc::Status Heartbeat(const LoadReport& report, bool* reregister = nullptr,
                         bool* report_freed_room = nullptr) {
    grpc::ClientContext ctx;
    ced::internal::HeartbeatResponse response;
    grpc::Status status = stub_->Heartbeat(&ctx, report, &response);
    if (reregister != nullptr) *reregister = response.reregister();
    if (report_freed_room != nullptr) *report_freed_room = response.report_freed_room();
    return status;
  }

  grpc::Status DoRoute(const RouteRequest& request, RouteResponse* response) {
    grpc::ClientContext ctx;
    return stub_->Route(&ctx, request, response);
  }

  ced::internal::ListWorkersResponse List() {
    grpc::ClientContext ctx;
    ced::internal::ListWorkersResponse response;
    EXPECT_TRUE(stub_->ListWorkers(&ctx, {}, &response).ok());
    return response;
  }

  bool IsLive(const std::string& id) {
    const ced::internal::ListWorkersResponse list = List();
    for (const auto& w : list.workers()) {
      if (w.info().worker_id() == id) return w.live();
    }
    return false;
  }

  std::string ScrapeMetrics() {
    const std::string& address = server_->metrics_address();
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
    auto result = metrics::testing::HttpGet(port, "/metrics");
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return "";
    EXPECT_EQ(result->status, 200);
    return result->body;
  }

  std::unique_ptr<RouterServer> server_;
  std::unique_ptr<ced::internal::Router::Stub> stub_;
};

TEST_F(RouterServiceTest, RoutesToRegisteredWorkers) {
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(100, 10, ced::internal::REPLAY_ON_PREFILL), &response).ok());
  EXPECT_FALSE(response.local_prefill());
  EXPECT_EQ(response.prefill().worker_id(), "p0");
  EXPECT_EQ(response.prefill().grpc_address(), "127.0.0.1:80");
  EXPECT_EQ(response.decode().worker_id(), "d0");
  EXPECT_EQ(response.decode().grpc_address(), "127.0.0.1:70");
  EXPECT_EQ(response.decode().kv_address(), "ucx://d0");
  EXPECT_EQ(response.replay_on(), ced::internal::REPLAY_ON_PREFILL);
  EXPECT_EQ(response.replay_mode(), ced::internal::REPLAY_MODE_BOUNDED);
  EXPECT_EQ(response.kv_blocks(), 7);  // ceil(110 / 16)

  RouteRequest exact = Route(100, 10, ced::internal::REPLAY_ON_DECODE);
  exact.set_replay_mode(ced::internal::REPLAY_MODE_EXACT);
  ASSERT_TRUE(DoRoute(exact, &response).ok());
  EXPECT_EQ(response.replay_on(), ced::internal::REPLAY_ON_DECODE);
  EXPECT_EQ(response.replay_mode(), ced::internal::REPLAY_MODE_EXACT);
}

TEST_F(RouterServiceTest, RegisterResponseCarriesHeartbeatTiming) {
  grpc::ClientContext ctx;
  ced::internal::RegisterRequest request;
  *request.mutable_worker() = Decode("d0");
  ced::internal::RegisterResponse response;
  ASSERT_TRUE(stub_->Register(&ctx, request, &response).ok());
  EXPECT_EQ(response.heartbeat_timeout_ms(), 60000);
  EXPECT_EQ(response.heartbeat_interval_ms(), 20000);
}

TEST_F(RouterServiceTest, EncoderOnlyPrefillNeverReplays) {
  ASSERT_TRUE(Register(Prefill("p0", ced::internal::WEIGHTS_HELD_ENCODER_ONLY)).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(100, 10, ced::internal::REPLAY_ON_PREFILL), &response).ok());
  EXPECT_EQ(response.replay_on(), ced::internal::REPLAY_ON_DECODE);
}

TEST_F(RouterServiceTest, DecoderOnlyModelReportsPrefillPlacement) {
  RouterServerOptions options;
  options.heartbeat_timeout = absl::Seconds(60);
  options.policy.decoder_only = true;
  StartRouter(options);
  ASSERT_TRUE(Register(Prefill("p0", ced::internal::WEIGHTS_HELD_FULL)).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(100, 10, ced::internal::REPLAY_ON_DECODE), &response).ok());
  EXPECT_EQ(response.replay_on(), ced::internal::REPLAY_ON_PREFILL);
}

TEST_F(RouterServiceTest, LocalPrefillWithoutPrefillWorkers) {
  RouterServerOptions options;
  options.heartbeat_timeout = absl::Seconds(60);
  options.policy.local_prefill_fallback = true;
  StartRouter(options);
  ASSERT_TRUE(Register(Decode("d0")).ok());
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(100, 10), &response).ok());
  EXPECT_TRUE(response.local_prefill());
  EXPECT_FALSE(response.has_prefill());
  EXPECT_EQ(response.decode().worker_id(), "d0");
  EXPECT_EQ(response.replay_on(), ced::internal::REPLAY_ON_DECODE);
}

TEST_F(RouterServiceTest, NoWorkerIsUnavailableAndNoRoomIsResourceExhausted) {
  RouteResponse response;
  EXPECT_EQ(DoRoute(Route(10, 10), &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Register(Decode("d0", /*blocks=*/4)).ok());
  EXPECT_EQ(DoRoute(Route(10, 10), &response).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no prefill worker";
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  EXPECT_EQ(DoRoute(Route(1000, 10), &response).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(DoRoute(Route(10, 10), &response).ok());
}

// A request refused for room that an empty cache could hold makes the next
// heartbeats ask for freed room to be reported at once; one no cache could
// ever hold does not.
TEST_F(RouterServiceTest, RefusalForRoomAsksWorkersToReportFreedRoom) {
  ASSERT_TRUE(Register(Decode("d0", /*blocks=*/100)).ok());
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  LoadReport full;
  full.set_worker_id("d0");
  full.set_free_kv_blocks(0);
  bool ask = true;
  ASSERT_TRUE(Heartbeat(full, nullptr, &ask).ok());
  EXPECT_FALSE(ask);
  RouteResponse response;
  // 100 blocks of 16 tokens hold 1,600: never.
  EXPECT_EQ(DoRoute(Route(5000, 10), &response).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(Heartbeat(full, nullptr, &ask).ok());
  EXPECT_FALSE(ask) << "a request no cache can hold waits for nothing";
  EXPECT_EQ(DoRoute(Route(100, 10), &response).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(Heartbeat(full, nullptr, &ask).ok());
  EXPECT_TRUE(ask);
}

TEST_F(RouterServiceTest, HeartbeatFromUnknownWorkerAsksToReregister) {
  LoadReport report;
  report.set_worker_id("ghost");
  bool reregister = false;
  ASSERT_TRUE(Heartbeat(report, &reregister).ok());
  EXPECT_TRUE(reregister);
  ASSERT_TRUE(Register(Decode("d0")).ok());
  report.set_worker_id("d0");
  report.set_free_kv_blocks(50);
  report.set_total_kv_blocks(100);
  ASSERT_TRUE(Heartbeat(report, &reregister).ok());
  EXPECT_FALSE(reregister);
  const auto list = List();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).load().free_kv_blocks(), 50);
  EXPECT_TRUE(list.workers(0).live());
}

TEST_F(RouterServiceTest, DeregisterRemovesTheWorker) {
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  grpc::ClientContext ctx;
  ced::internal::DeregisterRequest request;
  request.set_worker_id("p0");
  ced::internal::DeregisterResponse response;
  ASSERT_TRUE(stub_->Deregister(&ctx, request, &response).ok());
  RouteResponse route;
  EXPECT_EQ(DoRoute(Route(10, 10), &route).error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext again;
  EXPECT_EQ(stub_->Deregister(&again, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(List().workers_size(), 1);
}

TEST_F(RouterServiceTest, FingerprintMismatchIsFailedPrecondition) {
  ASSERT_TRUE(Register(Decode("d0")).ok());
  WorkerInfo other = Prefill("p0");
  other.set_model_fingerprint("fp-b");
  grpc::Status status = Register(other);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("model_fingerprint"), std::string::npos);
  EXPECT_NE(status.error_message().find("fp-b"), std::string::npos);
  // A worker re-registering under its own id may change model when alone.
  WorkerInfo restarted = Decode("d0");
  restarted.set_model_fingerprint("fp-b");
  EXPECT_TRUE(Register(restarted).ok());
  EXPECT_TRUE(Register(other).ok());
}

struct BadField {
  std::string name;
  std::string field;  // expected in the message
  std::function<void(WorkerInfo*)> mutate;
};

TEST_F(RouterServiceTest, BadRegistrationsNameTheField) {
  const std::vector<BadField> cases = {
      {"empty id", "worker.worker_id", [](WorkerInfo* w) { w->set_worker_id(""); }},
      {"id with space", "worker.worker_id", [](WorkerInfo* w) { w->set_worker_id("a b"); }},
      {"long id", "worker.worker_id",
       [](WorkerInfo* w) { w->set_worker_id(std::string(200, 'x')); }},
      {"unknown role", "worker.role",
       [](WorkerInfo* w) { w->set_role(static_cast<ced::internal::Role>(7)); }},
      {"unspecified role", "worker.role",
       [](WorkerInfo* w) { w->set_role(ced::internal::ROLE_UNSPECIFIED); }},
      {"no grpc address", "worker.grpc_address", [](WorkerInfo* w) { w->set_grpc_address(""); }},
      {"no kv address", "worker.kv_address", [](WorkerInfo* w) { w->set_kv_address(""); }},
      {"partial weights", "worker.weights",
       [](WorkerInfo* w) { w->set_weights(ced::internal::WEIGHTS_HELD_ENCODER_ONLY); }},
      {"unknown weights", "worker.weights",
       [](WorkerInfo* w) { w->set_weights(static_cast<ced::internal::WeightsHeld>(9)); }},
      {"zero block size", "worker.block_size", [](WorkerInfo* w) { w->set_block_size(0); }},
      {"negative block size", "worker.block_size", [](WorkerInfo* w) { w->set_block_size(-16); }},
      {"no blocks", "worker.total_kv_blocks", [](WorkerInfo* w) { w->set_total_kv_blocks(0); }},
      {"negative blocks", "worker.total_kv_blocks",
       [](WorkerInfo* w) { w->set_total_kv_blocks(-1); }},
      {"no fingerprint", "worker.model_fingerprint",
       [](WorkerInfo* w) { w->set_model_fingerprint(""); }},
      {"bad format", "worker.kv_format", [](WorkerInfo* w) { w->set_kv_format("int3"); }},
      {"no format", "worker.kv_format", [](WorkerInfo* w) { w->set_kv_format(""); }},
      {"bad transport", "worker.kv_transport", [](WorkerInfo* w) { w->set_kv_transport("u c x"); }},
  };
  for (const BadField& c : cases) {
    WorkerInfo worker = Decode("d0");
    c.mutate(&worker);
    grpc::Status status = Register(worker);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_NE(status.error_message().find(c.field), std::string::npos)
        << c.name << ": " << status.error_message();
  }
  grpc::ClientContext ctx;
  ced::internal::RegisterResponse response;
  grpc::Status missing = stub_->Register(&ctx, {}, &response);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(missing.error_message().find("worker"), std::string::npos);
  EXPECT_EQ(List().workers_size(), 0);
}

TEST_F(RouterServiceTest, BadLoadReportsNameTheField) {
  ASSERT_TRUE(Register(Decode("d0")).ok());
  struct Case {
    std::string field;
    std::function<void(LoadReport*)> mutate;
  };
  const std::vector<Case> cases = {
      {"worker_id", [](LoadReport* r) { r->set_worker_id(""); }},
      {"queued_prefill_tokens", [](LoadReport* r) { r->set_queued_prefill_tokens(-1); }},
      {"inflight_prefill_tokens", [](LoadReport* r) { r->set_inflight_prefill_tokens(-1); }},
      {"running_sequences", [](LoadReport* r) { r->set_running_sequences(-1); }},
      {"waiting_sequences", [](LoadReport* r) { r->set_waiting_sequences(-1); }},
      {"free_kv_blocks", [](LoadReport* r) { r->set_free_kv_blocks(-1); }},
      {"free_kv_blocks", [](LoadReport* r) { r->set_free_kv_blocks(101); }},
      {"total_kv_blocks", [](LoadReport* r) { r->set_total_kv_blocks(-1); }},
  };
  for (const Case& c : cases) {
    LoadReport report;
    report.set_worker_id("d0");
    report.set_total_kv_blocks(100);
    c.mutate(&report);
    grpc::Status status = Heartbeat(report);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(status.error_message().find(c.field), std::string::npos) << status.error_message();
  }
}

TEST_F(RouterServiceTest, BadRouteRequestsNameTheField) {
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  struct Case {
    std::string field;
    std::function<void(RouteRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"prompt_tokens", [](RouteRequest* r) { r->set_prompt_tokens(0); }},
      {"prompt_tokens", [](RouteRequest* r) { r->set_prompt_tokens(-5); }},
      {"max_tokens", [](RouteRequest* r) { r->set_max_tokens(0); }},
      {"replay_on",
       [](RouteRequest* r) { r->set_replay_on(static_cast<ced::internal::ReplayOn>(8)); }},
      {"replay_mode",
       [](RouteRequest* r) { r->set_replay_mode(static_cast<ced::internal::ReplayMode>(-1)); }},
      {"request_id", [](RouteRequest* r) { r->set_request_id("a\nb"); }},
  };
  for (const Case& c : cases) {
    RouteRequest request = Route(10, 10);
    c.mutate(&request);
    RouteResponse response;
    grpc::Status status = DoRoute(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(status.error_message().find(c.field), std::string::npos) << status.error_message();
  }
  EXPECT_NE(ScrapeMetrics().find("ced_router_route_errors_total{code=\"invalid_argument\"} 6"),
            std::string::npos);
}

TEST_F(RouterServiceTest, StaleWorkerGetsNoWorkAndRejoins) {
  RouterServerOptions options;
  options.heartbeat_timeout = absl::Milliseconds(1500);
  StartRouter(options);
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  ASSERT_TRUE(Register(Prefill("p1")).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  // p1 and d0 keep reporting; p0 goes silent.
  struct Reporter {
    std::atomic<bool> stop{false};
    std::thread thread;
    ~Reporter() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } reporter;
  std::atomic<bool>& stop = reporter.stop;
  reporter.thread = std::thread([&] {
    while (!stop) {
      for (const char* id : {"p1", "d0"}) {
        LoadReport report;
        report.set_worker_id(id);
        if (id[0] == 'd') {
          report.set_free_kv_blocks(100);
          report.set_total_kv_blocks(100);
        }
        (void)Heartbeat(report);
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (IsLive("p0") && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_FALSE(IsLive("p0"));
  for (int i = 0; i < 3; ++i) {
    RouteResponse response;
    ASSERT_TRUE(DoRoute(Route(100, 10), &response).ok());
    EXPECT_EQ(response.prefill().worker_id(), "p1");
  }
  EXPECT_NE(ScrapeMetrics().find("ced_router_workers{role=\"prefill\",state=\"stale\"} 1"),
            std::string::npos);

  // p0 reports again: it is live and, with the least outstanding work (ties
  // to the smaller id), gets the next request.
  LoadReport report;
  report.set_worker_id("p0");
  bool reregister = true;
  ASSERT_TRUE(Heartbeat(report, &reregister).ok());
  EXPECT_FALSE(reregister);
  EXPECT_TRUE(IsLive("p0"));
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(100, 10), &response).ok());
  EXPECT_EQ(response.prefill().worker_id(), "p0");
}

TEST_F(RouterServiceTest, MetricsCountDecisionsAndRegistrations) {
  ASSERT_TRUE(Register(Prefill("p0")).ok());
  ASSERT_TRUE(Register(Decode("d0")).ok());
  RouteResponse response;
  ASSERT_TRUE(DoRoute(Route(10, 10, ced::internal::REPLAY_ON_PREFILL), &response).ok());
  ASSERT_TRUE(DoRoute(Route(10, 10, ced::internal::REPLAY_ON_DECODE), &response).ok());
  ASSERT_TRUE(DoRoute(Route(10, 10, ced::internal::REPLAY_ON_DECODE), &response).ok());
  ASSERT_TRUE(DoRoute(Route(100000, 10), &response).error_code() ==
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  const std::string text = ScrapeMetrics();
  for (const char* line : {
           "ced_router_decisions_total{replay_on=\"prefill\",local_prefill=\"false\"} 1",
           "ced_router_decisions_total{replay_on=\"decode\",local_prefill=\"false\"} 2",
           "ced_router_decisions_total{replay_on=\"decode\",local_prefill=\"true\"} 0",
           "ced_router_route_errors_total{code=\"resource_exhausted\"} 1",
           "ced_router_registrations_total 2",
           "ced_router_workers{role=\"decode\",state=\"live\"} 1",
           "ced_router_workers{role=\"prefill\",state=\"live\"} 1",
           "# TYPE ced_router_decisions_total counter",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_NE(server_->MetricsText().find("ced_router_registrations_total 2"), std::string::npos);
}

TEST(RouterCommandTest, UsageErrorsAndHelp) {
  EXPECT_EQ(RunRouterCommand({"--help"}), 0);
  EXPECT_EQ(RunRouterCommand({"--bogus"}), 2);
  EXPECT_EQ(RunRouterCommand({"--replay-on=sideways"}), 2);
  EXPECT_EQ(RunRouterCommand({"--replay-mode=approximate"}), 2);
  EXPECT_EQ(RunRouterCommand({"--heartbeat-timeout-ms=0"}), 2);
  EXPECT_EQ(RunRouterCommand({"extra"}), 2);
  EXPECT_EQ(RunRouterCommand({"--model=/nonexistent/model"}), 1);
}

}  // namespace
}  // namespace ced::router
