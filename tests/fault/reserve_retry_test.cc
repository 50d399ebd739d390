// A decode worker refuses a Reserve with RESOURCE_EXHAUSTED (its K/V cache
// cannot hold prompt + max_tokens): the gateway places the request on another
// decode worker (--reserve-retries), and when every one refuses, the client
// gets RESOURCE_EXHAUSTED naming them.
//
// Deterministic: the router never picks a decode worker whose last load
// report leaves too little room, so the test makes the router's view stale on
// purpose, as another gateway's reservations do between two reports. The
// router asks for a report every --heartbeat-timeout-ms / 3 (here 100 s, far
// longer than a test), and the test fills a decode worker's K/V with
// reservations of its own made directly on the worker: the router still sees
// it empty (checked before each request). Both decode workers have the same
// cache, so the router's scores tie and the first by id, decode-0, wins: the
// request's first Reserve lands on the full worker.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kHeartbeatTimeoutMs = 300000;
constexpr int kPromptTokens = 64;
constexpr int kMaxTokens = 64;

double GatewayMetric(FaultCluster& c, const std::string& series) {
  return ScrapeMetric(c.gateway().metrics(), series).value_or(-1);
}

double KvRefusals(Proc& decode) {
  return ScrapeMetric(decode.metrics(), "ced_decode_admission_rejected_total{reason=\"kv_blocks\"}")
      .value_or(-1);
}

FaultClusterOptions Options(const std::string& model, int decode,
                            std::vector<std::string> gateway_flags) {
  FaultClusterOptions o = Topology(model, 1, decode);
  o.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
  // The test's own reservations receive no K/V: they must outlive the test.
  o.decode_flags = {"--reservation-timeout-ms", "600000"};
  // A refusal on every decode worker ends the request at once (the
  // gateway's default waits for room first: tested in OverloadTest).
  o.gateway_flags = std::move(gateway_flags);
  o.gateway_flags.insert(o.gateway_flags.end(), {"--kv-wait-ms", "0"});
  return o;
}

// The router's view of a worker: {free, total} global KV blocks and the
// block size; nullopt when it is not listed.
struct View {
  int64_t free = 0, total = 0;
  int block_size = 0;
};
std::optional<View> RouterView(FaultCluster& c, const std::string& worker_id) {
  const auto workers = ListWorkers(c.router_address());
  if (!workers) return std::nullopt;
  for (const auto& w : workers->workers()) {
    if (w.info().worker_id() != worker_id) continue;
    return View{w.load().free_kv_blocks() - w.pending_kv_blocks(), w.info().total_kv_blocks(),
                w.info().block_size()};
  }
  return std::nullopt;
}

// Reservations made on a decode worker behind the router's back; cancelled
// when destroyed.
class KvFiller {
 public:
  KvFiller(FaultCluster& c, int decode)
      : c_(c),
        decode_(decode),
        stub_(ced::internal::DecodeWorker::NewStub(
            grpc::CreateChannel(c.decode(decode).grpc(), grpc::InsecureChannelCredentials()))) {}
  ~KvFiller() {
    for (const std::string& id : ids_) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      ced::internal::CancelRequest req;
      req.set_request_id(id);
      ced::internal::CancelResponse resp;
      (void)stub_->Cancel(&ctx, req, &resp);
    }
  }

  // Reserves until fewer than `keep_below` blocks are free; false on error.
  bool FillUntilFreeBelow(int64_t keep_below, int max_position) {
    const std::optional<View> view = RouterView(c_, c_.decode_id(decode_));
    if (!view || view->block_size <= 0) {
      ADD_FAILURE() << "the router does not list " << c_.decode_id(decode_);
      return false;
    }
    int64_t free = view->total;
    const int bs = view->block_size;
    while (free >= keep_below) {
      // Whole blocks, so that the worker's count matches ours.
      const int64_t blocks = std::min<int64_t>(free, (max_position - bs) / bs);
      ced::internal::ReserveRequest req;
      req.set_request_id("filler-" + std::to_string(decode_) + "-" + std::to_string(ids_.size()));
      for (int i = 0; i < bs; ++i) req.add_prompt_token_ids((i * 7 + 3) % 256);
      req.set_max_tokens(static_cast<int32_t>(blocks * bs - bs));
      req.set_ignore_eos(true);
      req.mutable_replay()->set_replay_on(ced::internal::REPLAY_ON_PREFILL);
      req.mutable_replay()->set_mode(ced::internal::REPLAY_MODE_BOUNDED);
      req.set_prefill_worker_id(c_.prefill_id(0));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      ced::internal::ReserveResponse resp;
      const grpc::Status s = stub_->Reserve(&ctx, req, &resp);
      if (!s.ok()) {
        ADD_FAILURE() << "filler Reserve on " << c_.decode_id(decode_) << ": " << s.error_code()
                      << ": " << s.error_message();
        return false;
      }
      ids_.push_back(req.request_id());
      free -= resp.num_blocks();
    }
    return true;
  }

 private:
  FaultCluster& c_;
  const int decode_;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> stub_;
  std::vector<std::string> ids_;
};

// The blocks the gateway's request needs on a decode worker.
int64_t NeedBlocks(int block_size) {
  return (kPromptTokens + kMaxTokens + block_size - 1) / block_size;
}

// The router still believes `decode` has room for the request (its report
// predates the filler's reservations): the premise of every test here.
void ExpectRouterSeesRoom(FaultCluster& c, int decode) {
  const std::optional<View> v = RouterView(c, c.decode_id(decode));
  ASSERT_TRUE(v.has_value());
  ASSERT_EQ(v->free, v->total) << c.decode_id(decode)
                               << ": the router heard of the filler's reservations; the test "
                                  "cannot force its choice";
}

int MaxPosition(const std::string& model_dir) {
  ColocatedEngine ref(model_dir);
  return ref.engine().config().max_position;
}

TEST(FaultReserveRetryTest, RefusedReserveIsPlacedOnAnotherDecodeWorker) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Options(model, 2, {}));
  ASSERT_TRUE(c.ok());
  const std::optional<View> view = RouterView(c, c.decode_id(0));
  ASSERT_TRUE(view.has_value());
  ASSERT_EQ(view->total, RouterView(c, c.decode_id(1))->total) << "the scores must tie";
  KvFiller filler(c, 0);
  ASSERT_TRUE(filler.FillUntilFreeBelow(NeedBlocks(view->block_size), MaxPosition(model)));
  ExpectRouterSeesRoom(c, 0);
  ExpectRouterSeesRoom(c, 1);

  ColocatedEngine ref(model);
  const auto prompt = Prompt(kPromptTokens, 21);
  Stream stream(c.gateway().grpc(), FaultRequest(prompt, kMaxTokens, "reserve-retry-1"), Ms(60000));
  const grpc::Status s = stream.Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message() << "\ngateway log:\n"
                      << c.gateway().Log();
  EXPECT_EQ(stream.tokens(), ref.Run(prompt, kMaxTokens));
  EXPECT_EQ(stream.last().finish_reason(), ced::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(stream.last().placement().decode_worker_id(), c.decode_id(1));
  EXPECT_EQ(stream.last().placement().migrations(), 0);
  EXPECT_EQ(KvRefusals(c.decode(0)), 1) << "the router did not pick the full worker first";
  EXPECT_EQ(KvRefusals(c.decode(1)), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"ok\"}"), 1);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"failed\"}"), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_requests_total{api=\"grpc\",outcome=\"length\"}"), 1);
  EXPECT_NE(c.gateway().Log().find("decode worker decode-0 refused the reservation"),
            std::string::npos)
      << c.gateway().Log();
}

// Every decode worker refuses: the client gets RESOURCE_EXHAUSTED naming both.
TEST(FaultReserveRetryTest, EveryDecodeWorkerRefusesResourceExhaustedNamesThem) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Options(model, 2, {}));
  ASSERT_TRUE(c.ok());
  const int max_position = MaxPosition(model);
  const std::optional<View> view = RouterView(c, c.decode_id(0));
  ASSERT_TRUE(view.has_value());
  KvFiller filler0(c, 0), filler1(c, 1);
  ASSERT_TRUE(filler0.FillUntilFreeBelow(NeedBlocks(view->block_size), max_position));
  ASSERT_TRUE(filler1.FillUntilFreeBelow(NeedBlocks(view->block_size), max_position));
  ExpectRouterSeesRoom(c, 0);
  ExpectRouterSeesRoom(c, 1);

  Stream stream(c.gateway().grpc(),
                FaultRequest(Prompt(kPromptTokens, 22), kMaxTokens, "reserve-retry-2"), Ms(60000));
  const grpc::Status s = stream.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("decode workers decode-0, decode-1 refused the reservation"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("(last: decode worker decode-1: "), std::string::npos)
      << "the last worker's own reason is kept: " << s.error_message();
  EXPECT_TRUE(stream.tokens().empty());
  EXPECT_EQ(KvRefusals(c.decode(0)), 1);
  EXPECT_EQ(KvRefusals(c.decode(1)), 1);
  // The second placement was refused, the third found no decode worker left.
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"ok\"}"), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"failed\"}"), 2);
  EXPECT_EQ(
      GatewayMetric(c, "ced_gateway_requests_total{api=\"grpc\",outcome=\"resource_exhausted\"}"),
      1);
}

// --reserve-retries 0: the worker's refusal reaches the client as it is.
TEST(FaultReserveRetryTest, RetriesOffRefusalReachesTheClient) {
  const std::string model = MakeModelDir("tiny");
  FaultCluster c(Options(model, 2, {"--reserve-retries", "0"}));
  ASSERT_TRUE(c.ok());
  const std::optional<View> view = RouterView(c, c.decode_id(0));
  ASSERT_TRUE(view.has_value());
  KvFiller filler(c, 0);
  ASSERT_TRUE(filler.FillUntilFreeBelow(NeedBlocks(view->block_size), MaxPosition(model)));
  ExpectRouterSeesRoom(c, 0);

  Stream stream(c.gateway().grpc(),
                FaultRequest(Prompt(kPromptTokens, 23), kMaxTokens, "reserve-retry-3"), Ms(60000));
  const grpc::Status s = stream.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("decode worker decode-0"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(KvRefusals(c.decode(0)), 1);
  EXPECT_EQ(KvRefusals(c.decode(1)), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"ok\"}"), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_gateway_reserve_retries_total{outcome=\"failed\"}"), 0);
}

}  // namespace
}  // namespace ced::testing
