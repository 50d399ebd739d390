// The router service's cache-aware path in process, over real gRPC stubs:
// workers' prefix-cache reports (full, delta, resync), placement by the
// prompt's block chain, session ids, exclude_worker_ids, validation, metrics.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "ced/internal/router.grpc.pb.h"
#include "services/common/block_hash_wire.h"
#include "services/common/grpc_util.h"
#include "services/router/router_command.h"
#include "services/router/router_server.h"
#include "tests/metrics/test_util.h"

namespace ced::router {
namespace {

using ced::internal::HeartbeatResponse;
using ced::internal::LoadReport;
using ced::internal::RouteRequest;
using ced::internal::RouteResponse;
using ced::internal::WorkerInfo;

constexpr int kBlockSize = 16;

std::string Hashes(uint64_t conv, int64_t from, int64_t n) {
  std::string out;
  for (int64_t i = from; i < from + n; ++i) {
    services::AppendBlockHashWire(conv, static_cast<uint64_t>(i), &out);
  }
  return out;
}

const std::string& Root() {
  static const std::string* root = new std::string(Hashes(0xabc, 0, 1));
  return *root;
}

WorkerInfo Worker(const std::string& id, bool decode) {
  WorkerInfo w;
  w.set_worker_id(id);
  w.set_role(decode ? ced::internal::ROLE_DECODE : ced::internal::ROLE_PREFILL);
  w.set_grpc_address("127.0.0.1:1" + std::to_string(id.size()) + id.substr(1));
  if (decode) w.set_kv_address("ucx://" + id);
  w.set_weights(decode ? ced::internal::WEIGHTS_HELD_FULL
                       : ced::internal::WEIGHTS_HELD_ENCODER_REPLAY);
  w.set_total_kv_blocks(1000);
  w.set_block_size(kBlockSize);
  w.set_model_fingerprint("fp-a");
  w.set_kv_format("f32");
  w.set_prefix_root_hash(Root());
  return w;
}

RouteRequest Route(uint64_t conv, int64_t prompt, const std::string& session = "") {
  RouteRequest r;
  r.set_request_id("req");
  r.set_prompt_tokens(prompt);
  r.set_max_tokens(16);
  r.set_session_id(session);
  r.set_prompt_block_hashes(Hashes(conv, 0, prompt / kBlockSize));
  r.set_prompt_root_hash(Root());
  r.set_prompt_block_size(kBlockSize);
  return r;
}

class RouterCacheServiceTest : public ::testing::Test {
 protected:
  void Start(Routing routing) {
    RouterServerOptions options;
    options.heartbeat_timeout = absl::Seconds(60);
    options.listen_address = "127.0.0.1:0";
    options.metrics_address = "127.0.0.1:0";
    options.policy.routing = routing;
    auto server = RouterServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = ced::internal::Router::NewStub(services::MakeChannel(server_->grpc_address()));
    for (const char* id : {"p0", "p1"}) ASSERT_TRUE(Register(Worker(id, false)).ok());
    for (const char* id : {"d0", "d1"}) ASSERT_TRUE(Register(Worker(id, true)).ok());
  }
  void SetUp() override { Start(Routing::kCacheAware); }

  grpc::Status Register(const WorkerInfo& worker) {
    grpc::ClientContext ctx;
    ced::internal::RegisterRequest request;
    *request.mutable_worker() = worker;
    ced::internal::RegisterResponse response;
    return stub_->Register(&ctx, request, &response);
  }

  // A load report of `id` (idle, all blocks free) with a prefix-cache report.
  grpc::Status Report(const std::string& id, uint64_t base, uint64_t end, bool full,
                      const std::string& added, const std::string& evicted,
                      HeartbeatResponse* response, int running = 0) {
    LoadReport report;
    report.set_worker_id(id);
    report.set_free_kv_blocks(1000);
    report.set_total_kv_blocks(1000);
    report.set_running_sequences(running);
    ced::internal::PrefixCacheReport* p = report.mutable_prefix_cache();
    p->set_base_seq(base);
    p->set_end_seq(end);
    p->set_full(full);
    p->set_added(added);
    p->set_evicted(evicted);
    grpc::ClientContext ctx;
    return stub_->Heartbeat(&ctx, report, response);
  }

  grpc::Status DoRoute(const RouteRequest& request, RouteResponse* response) {
    grpc::ClientContext ctx;
    return stub_->Route(&ctx, request, response);
  }

  std::string ScrapeMetrics() {
    const std::string& address = server_->metrics_address();
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
    auto result = metrics::testing::HttpGet(port, "/metrics");
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->body : "";
  }

  std::unique_ptr<RouterServer> server_;
  std::unique_ptr<ced::internal::Router::Stub> stub_;
};

TEST_F(RouterCacheServiceTest, ReportsPlaceThePromptWhereItsBlocksAre) {
  HeartbeatResponse hb;
  // d1 and p1 hold the first 64 blocks of conversation 7 (a full report).
  ASSERT_TRUE(Report("d1", 0, 40, true, Hashes(7, 0, 64), "", &hb).ok());
  EXPECT_EQ(hb.prefix_cache_seq(), 40u);
  ASSERT_TRUE(Report("p1", 0, 9, true, Hashes(7, 0, 64), "", &hb).ok());
  EXPECT_EQ(hb.prefix_cache_seq(), 9u);
  // d0 is a little less loaded, yet d1 holds the prompt.
  ASSERT_TRUE(Report("d1", 40, 40, false, "", "", &hb, /*running=*/2).ok());
  RouteResponse route;
  ASSERT_TRUE(DoRoute(Route(7, 2048), &route).ok());
  EXPECT_EQ(route.decode().worker_id(), "d1");
  EXPECT_EQ(route.prefill().worker_id(), "p1");
  EXPECT_FALSE(route.local_prefill());
  EXPECT_EQ(route.predicted_decode_cached_tokens(), 1024);
  EXPECT_EQ(route.predicted_prefill_cached_tokens(), 1024);
  // The chain to hash the next prompts with.
  EXPECT_EQ(route.prefix_root_hash(), Root());
  EXPECT_EQ(route.prefix_block_size(), kBlockSize);

  // d1 evicts block 10 (a delta): its run now stops there; a short suffix
  // after conversation 8's blocks on d0 prefills locally.
  ASSERT_TRUE(Report("d1", 40, 41, false, "", Hashes(7, 10, 1), &hb).ok());
  EXPECT_EQ(hb.prefix_cache_seq(), 41u);
  ASSERT_TRUE(Report("d0", 0, 3, true, Hashes(8, 0, 100), "", &hb).ok());
  ASSERT_TRUE(DoRoute(Route(8, 1700), &route).ok());
  EXPECT_EQ(route.decode().worker_id(), "d0");
  EXPECT_TRUE(route.local_prefill());
  EXPECT_FALSE(route.has_prefill());
  EXPECT_EQ(route.predicted_prefill_cached_tokens(), 1600);

  const std::string text = ScrapeMetrics();
  for (const char* line : {
           "ced_router_prefix_reports_total{outcome=\"full\"} 3",
           "ced_router_prefix_reports_total{outcome=\"delta\"} 2",
           "ced_router_cache_hit_tokens_total 2624",
           "ced_router_prompt_tokens_total 3748",
           "ced_router_route_reasons_total{placement=\"cache\",prefill=\"pool\"} 1",
           "ced_router_route_reasons_total{placement=\"cache\",prefill=\"short_suffix\"} 1",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_NE(text.find("ced_router_indexed_blocks "), std::string::npos);
}

TEST_F(RouterCacheServiceTest, GapsAskForAFullReportAndReregistrationForgets) {
  HeartbeatResponse hb;
  ASSERT_TRUE(Report("d1", 0, 10, true, Hashes(7, 0, 64), "", &hb).ok());
  // Events 10..20 are missing: 0 asks for a full report; the view stands.
  ASSERT_TRUE(Report("d1", 20, 25, false, Hashes(7, 64, 1), "", &hb).ok());
  EXPECT_EQ(hb.prefix_cache_seq(), 0u);
  EXPECT_NE(ScrapeMetrics().find("ced_router_prefix_reports_total{outcome=\"resync\"} 1"),
            std::string::npos);
  RouteResponse route;
  ASSERT_TRUE(DoRoute(Route(7, 2048), &route).ok());
  EXPECT_EQ(route.decode().worker_id(), "d1");
  // A restarted d1 registers again: the router forgets its blocks, and a
  // delta before its first full report asks for one.
  ASSERT_TRUE(Register(Worker("d1", true)).ok());
  ASSERT_TRUE(Report("d1", 5, 6, false, Hashes(7, 0, 1), "", &hb).ok());
  EXPECT_EQ(hb.prefix_cache_seq(), 0u);
  ASSERT_TRUE(DoRoute(Route(7, 2048), &route).ok());
  EXPECT_EQ(route.predicted_decode_cached_tokens(), 0);
}

TEST_F(RouterCacheServiceTest, ExcludedWorkersAreNeverChosen) {
  HeartbeatResponse hb;
  ASSERT_TRUE(Report("d0", 0, 2, true, Hashes(7, 0, 64), "", &hb).ok());
  ASSERT_TRUE(Report("p0", 0, 2, true, Hashes(7, 0, 64), "", &hb).ok());
  RouteRequest request = Route(7, 2048);
  request.add_exclude_worker_ids("d0");
  request.add_exclude_worker_ids("p0");
  request.add_exclude_worker_ids("unknown-worker");  // not an error
  RouteResponse route;
  ASSERT_TRUE(DoRoute(request, &route).ok());
  EXPECT_EQ(route.decode().worker_id(), "d1");
  EXPECT_EQ(route.prefill().worker_id(), "p1");
  EXPECT_EQ(route.predicted_decode_cached_tokens(), 0);
  // Every decode worker excluded: UNAVAILABLE.
  request.add_exclude_worker_ids("d1");
  EXPECT_EQ(DoRoute(request, &route).error_code(), grpc::StatusCode::UNAVAILABLE);
  // Every prefill worker excluded: a long uncached prompt has nowhere to go.
  request = Route(9, 2048);
  request.add_exclude_worker_ids("p0");
  request.add_exclude_worker_ids("p1");
  EXPECT_EQ(DoRoute(request, &route).error_code(), grpc::StatusCode::UNAVAILABLE);
  // ... but one whose blocks are on a decode worker prefills there.
  request = Route(7, 1030);
  request.add_exclude_worker_ids("p0");
  request.add_exclude_worker_ids("p1");
  ASSERT_TRUE(DoRoute(request, &route).ok());
  EXPECT_TRUE(route.local_prefill());
}

TEST_F(RouterCacheServiceTest, SessionIdsAreOnlyHints) {
  RouteRequest request = Route(7, 500, "session-1");
  request.clear_prompt_block_hashes();  // a gateway that has not learned the chain
  RouteResponse first;
  ASSERT_TRUE(DoRoute(request, &first).ok());
  HeartbeatResponse hb;
  // The other decode worker becomes less loaded; the session stays.
  const std::string other = first.decode().worker_id() == "d0" ? "d1" : "d0";
  ASSERT_TRUE(Report(first.decode().worker_id(), 0, 1, true, "", "", &hb, /*running=*/3).ok());
  ASSERT_TRUE(Report(other, 0, 1, true, "", "", &hb).ok());
  request.set_prompt_tokens(700);
  RouteResponse again;
  ASSERT_TRUE(DoRoute(request, &again).ok());
  EXPECT_EQ(again.decode().worker_id(), first.decode().worker_id());
  EXPECT_EQ(again.predicted_decode_cached_tokens(), 496);
  // Unknown ids route by load.
  request.set_session_id("never-seen-before");
  ASSERT_TRUE(DoRoute(request, &again).ok());
  EXPECT_EQ(again.decode().worker_id(), other);
  EXPECT_NE(ScrapeMetrics().find(
                "ced_router_route_reasons_total{placement=\"session\",prefill=\"pool\"} 1"),
            std::string::npos);
}

TEST_F(RouterCacheServiceTest, BadChainsSessionsAndReportsNameTheField) {
  struct Case {
    std::string field;
    std::function<void(RouteRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"session_id", [](RouteRequest* r) { r->set_session_id(std::string(257, 's')); }},
      {"session_id", [](RouteRequest* r) { r->set_session_id("a b"); }},
      {"prompt_block_hashes",
       [](RouteRequest* r) { r->mutable_prompt_block_hashes()->pop_back(); }},
      {"prompt_block_hashes", [](RouteRequest* r) { r->set_prompt_tokens(100); }},
      {"prompt_root_hash", [](RouteRequest* r) { r->clear_prompt_root_hash(); }},
      {"prompt_block_size", [](RouteRequest* r) { r->set_prompt_block_size(0); }},
  };
  for (const Case& c : cases) {
    RouteRequest request = Route(7, 2048, "s");
    c.mutate(&request);
    RouteResponse response;
    grpc::Status status = DoRoute(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(status.error_message().find(c.field), std::string::npos) << status.error_message();
  }
  RouteRequest ok = Route(7, 2048, std::string(256, 's'));
  RouteResponse response;
  EXPECT_TRUE(DoRoute(ok, &response).ok());

  HeartbeatResponse hb;
  grpc::Status status = Report("d0", 0, 1, true, Hashes(7, 0, 2).substr(1), "", &hb);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("prefix_cache.added"), std::string::npos);
  status = Report("d0", 0, 1, false, "", "xyz", &hb);
  EXPECT_NE(status.error_message().find("prefix_cache.evicted"), std::string::npos);
  status = Report("d0", 5, 4, false, "", "", &hb);
  EXPECT_NE(status.error_message().find("prefix_cache.end_seq"), std::string::npos);
  WorkerInfo bad = Worker("d9", true);
  bad.set_prefix_root_hash("abc");
  status = Register(bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("worker.prefix_root_hash"), std::string::npos);
}

class RouterLoadRoutingTest : public RouterCacheServiceTest {
 protected:
  void SetUp() override { Start(Routing::kLoad); }
};

TEST_F(RouterLoadRoutingTest, LoadRoutingIgnoresCachesButCountsLuckyHits) {
  HeartbeatResponse hb;
  ASSERT_TRUE(Report("d1", 0, 1, true, Hashes(7, 0, 64), "", &hb, /*running=*/2).ok());
  ASSERT_TRUE(Report("p1", 0, 1, true, Hashes(7, 0, 64), "", &hb).ok());
  RouteResponse route;
  ASSERT_TRUE(DoRoute(Route(7, 1030, "s"), &route).ok());
  EXPECT_EQ(route.decode().worker_id(), "d0");
  EXPECT_EQ(route.prefill().worker_id(), "p0");
  EXPECT_FALSE(route.local_prefill());
  EXPECT_EQ(route.predicted_prefill_cached_tokens(), 0);
  EXPECT_NE(
      ScrapeMetrics().find("ced_router_route_reasons_total{placement=\"load\",prefill=\"pool\"} 1"),
      std::string::npos);
}

TEST(RouterCacheCommandTest, NewFlagsAreChecked) {
  EXPECT_EQ(RunRouterCommand({"--routing=sideways"}), 2);
  EXPECT_EQ(RunRouterCommand({"--local-prefill-max-uncached-tokens=-1"}), 2);
  EXPECT_EQ(RunRouterCommand({"--max-blocks-per-worker=1"}), 2);
  EXPECT_EQ(RunRouterCommand({"--max-sessions=0"}), 2);
  EXPECT_EQ(RunRouterCommand({"--decode-cache-weight=-1"}), 2);
  EXPECT_EQ(RunRouterCommand({"--decode-cache-weight=lots"}), 2);
}

}  // namespace
}  // namespace ced::router
