// Admission control and KV exhaustion (reliability items 8 and 9). Each test
// starts router, prefill, decode and gateway processes with small bounds,
// pushes more work than they admit, and checks that the excess gets
// RESOURCE_EXHAUSTED without reaching the workers behind the bound, that
// admitted requests still get exactly the colocated engine's greedy tokens,
// and that afterwards no KV block is left in use and a normal request works.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "tests/overload/topology.h"

namespace ced::testing {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One Generate stream read by hand (the first token shows it was admitted).
class Stream {
 public:
  Stream(const std::string& gateway, const ced::v1::GenerateRequest& req)
      : stub_(ced::v1::Gateway::NewStub(
            grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    reader_ = stub_->Generate(&ctx_, req);
  }
  // Reads until at least `n` tokens arrived; false when the stream ended first.
  bool ReadTokens(int n) {
    ced::v1::GenerateResponse resp;
    while (static_cast<int>(tokens_.size()) < n) {
      if (!reader_->Read(&resp)) return false;
      tokens_.insert(tokens_.end(), resp.token_ids().begin(), resp.token_ids().end());
    }
    return true;
  }
  grpc::Status Finish() {
    ced::v1::GenerateResponse resp;
    while (reader_->Read(&resp)) {
      tokens_.insert(tokens_.end(), resp.token_ids().begin(), resp.token_ids().end());
    }
    return reader_->Finish();
  }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void Cancel() { ctx_.TryCancel(); }

 private:
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<ced::v1::GenerateResponse>> reader_;
  std::vector<int32_t> tokens_;
};

// Extra flags for one role ("gateway", "prefill" or "decode").
TopologyFlags Flags(const std::string& role, std::vector<std::string> flags) {
  TopologyFlags f;
  (role == "gateway"   ? f.gateway_flags
   : role == "prefill" ? f.prefill_flags
                       : f.decode_flags) = std::move(flags);
  return f;
}

// The decode worker sleeps this long before each step (test-only flag), so a
// stream of N tokens lasts at least N x this whatever the machine: the long
// requests the bounds are checked against are still running by construction
// (tiny alone decodes 1,000 tokens in well under a second).
constexpr int kStepDelayMs = 3;
TopologyFlags SlowDecode(TopologyFlags f) {
  f.decode_flags.insert(f.decode_flags.end(),
                        {"--step-delay-ms-for-testing", std::to_string(kStepDelayMs)});
  return f;
}

class OverloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    colocated_ = std::make_unique<ColocatedEngine>(model_);
    normal_prompt_ = Prompt(40, 7);
    normal_expected_ = colocated_->Run(normal_prompt_, 8);
  }
  void Start(const TopologyFlags& flags) {
    topo_ = std::make_unique<Topology>(model_, flags);
    ASSERT_TRUE(topo_->ready()) << topo_->Logs();
  }
  void TearDown() override { topo_.reset(); }

  ced::v1::GenerateRequest Req(int prompt_tokens, int salt, int max_tokens) {
    return Request(Prompt(prompt_tokens, salt), max_tokens, ced::v1::REPLAY_ON_AUTO);
  }
  std::vector<int32_t> Expected(int prompt_tokens, int salt, int max_tokens) {
    return colocated_->Run(Prompt(prompt_tokens, salt), max_tokens);
  }
  // The checks every test ends with.
  void ExpectHealthyAfterwards() {
    topo_->ExpectNoKvLeak();
    const GenResult r =
        Generate(topo_->gateway().grpc(), Request(normal_prompt_, 8, ced::v1::REPLAY_ON_AUTO));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << topo_->Logs();
    EXPECT_EQ(r.tokens, normal_expected_);
    topo_->ExpectNoKvLeak();
  }
  double DecodeRequests() {
    double sum = 0;
    for (const char* o : {"ok", "cancelled", "error"}) {
      sum += std::max(0.0, topo_->Metric(topo_->decode(),
                                         std::string("ced_requests_total{outcome=\"") + o + "\"}"));
    }
    return sum;
  }

  std::string model_;
  std::unique_ptr<ColocatedEngine> colocated_;
  std::vector<int32_t> normal_prompt_, normal_expected_;
  std::unique_ptr<Topology> topo_;
};

// --max-inflight 2: with two long requests streaming (>= 1.8 s each), every
// further request is refused at once by the gateway, before any worker sees
// it; the two admitted requests finish with the right tokens.
TEST_F(OverloadTest, GatewayRequestBoundRefusesExcessAtOnce) {
  Start(SlowDecode(Flags("gateway", {"--max-inflight", "2"})));
  constexpr int kLong = 600, kExcess = 8;
  Stream a(topo_->gateway().grpc(), Req(40, 1, kLong));
  Stream b(topo_->gateway().grpc(), Req(40, 2, kLong));
  ASSERT_TRUE(a.ReadTokens(1));
  ASSERT_TRUE(b.ReadTokens(1));
  std::vector<ced::v1::GenerateRequest> excess;
  for (int i = 0; i < kExcess; ++i) excess.push_back(Req(40, 10 + i, 8));
  const auto t0 = Clock::now();
  const std::vector<GenResult> refused = GenerateConcurrently(topo_->gateway().grpc(), excess);
  const double refuse_ms = MsSince(t0);
  for (const GenResult& r : refused) {
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("--max-inflight"), std::string::npos)
        << r.status.error_message();
    EXPECT_TRUE(r.tokens.empty());
  }
  ASSERT_TRUE(a.Finish().ok());
  ASSERT_TRUE(b.Finish().ok());
  EXPECT_EQ(a.tokens(), Expected(40, 1, kLong));
  EXPECT_EQ(b.tokens(), Expected(40, 2, kLong));
  EXPECT_EQ(
      topo_->Metric(topo_->gateway(), "ced_gateway_admission_rejected_total{bound=\"requests\"}"),
      kExcess);
  EXPECT_EQ(
      topo_->Metric(topo_->gateway(),
                    "ced_gateway_requests_total{api=\"grpc\",outcome=\"resource_exhausted\"}"),
      kExcess);
  // Refused requests never reached a worker: the decode worker saw only the two.
  EXPECT_EQ(DecodeRequests(), 2);
  EXPECT_EQ(topo_->Metric(topo_->gateway(), "ced_gateway_inflight_requests"), 0);
  EXPECT_EQ(topo_->Metric(topo_->gateway(), "ced_gateway_inflight_tokens"), 0);
  std::printf("[figures] %d refusals answered in %.1f ms together\n", kExcess, refuse_ms);
  ExpectHealthyAfterwards();
}

// One Generate call on an existing stub (one connection per client).
GenResult GenerateOn(ced::v1::Gateway::Stub* stub, const ced::v1::GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub->Generate(&ctx, req);
  GenResult r;
  ced::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    r.tokens.insert(r.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
  }
  r.status = reader->Finish();
  return r;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// Sustained overload: clients send back to back into a gateway that admits
// 4 at once, first 4 clients (at capacity), then 16. Every answer is either
// the right tokens or RESOURCE_EXHAUSTED; nothing is left in flight
// afterwards. Admitted requests last >= 32 x kStepDelayMs, so 16 clients
// always find the 4 slots taken. Prints the latency of admitted requests
// unloaded, at capacity and at 4x overload, and of the refusals (figures for
// bench/results/reliability.md; no speed is asserted).
TEST_F(OverloadTest, SustainedOverloadAnswersRightTokensOrResourceExhausted) {
  Start(SlowDecode(Flags("gateway", {"--max-inflight", "4"})));
  constexpr int kPrompts = 4, kMaxTokens = 32, kClients = 16;
  std::vector<ced::v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < kPrompts; ++i) {
    reqs.push_back(Req(64, 30 + i, kMaxTokens));
    expected.push_back(Expected(64, 30 + i, kMaxTokens));
  }
  std::vector<double> unloaded;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = Clock::now();
    const GenResult r = Generate(topo_->gateway().grpc(), reqs[i % kPrompts]);
    unloaded.push_back(MsSince(t0));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected[i % kPrompts]);
  }
  struct Phase {
    std::vector<double> admitted_ms, refused_ms;
    int wrong = 0, bad_code = 0;
  };
  // `clients` threads, one connection each, send back to back for 3 s.
  auto run = [&](int clients) {
    Phase phase;
    std::mutex mu;
    const auto until = Clock::now() + std::chrono::seconds(3);
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        auto stub = ced::v1::Gateway::NewStub(
            grpc::CreateChannel(topo_->gateway().grpc(), grpc::InsecureChannelCredentials()));
        for (int i = 0; Clock::now() < until; ++i) {
          const int k = (c + i) % kPrompts;
          const auto t0 = Clock::now();
          const GenResult r = GenerateOn(stub.get(), reqs[k]);
          const double ms = MsSince(t0);
          std::lock_guard<std::mutex> lock(mu);
          if (r.status.ok()) {
            phase.admitted_ms.push_back(ms);
            phase.wrong += r.tokens != expected[k];
          } else {
            phase.refused_ms.push_back(ms);
            phase.bad_code += r.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(phase.wrong, 0) << clients << " clients";
    EXPECT_EQ(phase.bad_code, 0) << clients << " clients";
    EXPECT_GT(phase.admitted_ms.size(), 0u) << clients << " clients";
    return phase;
  };
  const Phase at_capacity = run(4);  // as many clients as --max-inflight
  const Phase overload = run(kClients);
  EXPECT_GT(overload.refused_ms.size(), 0u);
  EXPECT_EQ(
      topo_->Metric(topo_->gateway(), "ced_gateway_admission_rejected_total{bound=\"requests\"}"),
      static_cast<double>(at_capacity.refused_ms.size() + overload.refused_ms.size()));
  std::printf(
      "[figures] --max-inflight 4: unloaded (1 client) e2e p50 %.1f ms p90 %.1f ms\n"
      "[figures] 4 clients: admitted %zu, e2e p50 %.1f ms p90 %.1f ms p99 %.1f ms; refused %zu\n"
      "[figures] %d clients: admitted %zu, e2e p50 %.1f ms p90 %.1f ms p99 %.1f ms; refused "
      "%zu, refusal p50 %.2f ms p99 %.2f ms\n",
      Percentile(unloaded, 0.5), Percentile(unloaded, 0.9), at_capacity.admitted_ms.size(),
      Percentile(at_capacity.admitted_ms, 0.5), Percentile(at_capacity.admitted_ms, 0.9),
      Percentile(at_capacity.admitted_ms, 0.99), at_capacity.refused_ms.size(), kClients,
      overload.admitted_ms.size(), Percentile(overload.admitted_ms, 0.5),
      Percentile(overload.admitted_ms, 0.9), Percentile(overload.admitted_ms, 0.99),
      overload.refused_ms.size(), Percentile(overload.refused_ms, 0.5),
      Percentile(overload.refused_ms, 0.99));
  ExpectHealthyAfterwards();
}

// --max-inflight-tokens 1500 (prompt + max_tokens): a request larger than the
// whole budget is refused; one that does not fit beside a running request
// (>= 3 s long) is refused; one that fits is served correctly beside it.
TEST_F(OverloadTest, GatewayTokenBoundRefusesWhatDoesNotFit) {
  Start(SlowDecode(Flags("gateway", {"--max-inflight-tokens", "1500"})));
  const GenResult too_big = Generate(topo_->gateway().grpc(), Req(10, 3, 1600));
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(too_big.status.error_message().find("whole admission budget"), std::string::npos)
      << too_big.status.error_message();

  Stream running(topo_->gateway().grpc(), Req(40, 4, 1000));  // 1040 tokens
  ASSERT_TRUE(running.ReadTokens(1));
  const GenResult no_room = Generate(topo_->gateway().grpc(), Req(40, 5, 500));  // 540
  EXPECT_EQ(no_room.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(no_room.status.error_message().find("--max-inflight-tokens"), std::string::npos)
      << no_room.status.error_message();
  const GenResult fits = Generate(topo_->gateway().grpc(), Req(40, 6, 400));  // 440
  ASSERT_TRUE(fits.status.ok()) << fits.status.error_message();
  EXPECT_EQ(fits.tokens, Expected(40, 6, 400));
  ASSERT_TRUE(running.Finish().ok());
  EXPECT_EQ(running.tokens(), Expected(40, 4, 1000));
  EXPECT_EQ(
      topo_->Metric(topo_->gateway(), "ced_gateway_admission_rejected_total{bound=\"tokens\"}"), 2);
  EXPECT_EQ(DecodeRequests(), 2);
  EXPECT_EQ(topo_->Metric(topo_->gateway(), "ced_gateway_inflight_tokens"), 0);
  ExpectHealthyAfterwards();
}

// The decode worker's queue (reservations not yet decoding): --max-queued 2
// and --max-queued-tokens 250. Reservations made directly (the test acting
// as the gateway) fill it; the next one, and a gateway request, get
// RESOURCE_EXHAUSTED; cancelling frees room.
TEST_F(OverloadTest, DecodeQueueBoundsInRequestsAndTokens) {
  TopologyFlags flags = Flags("decode", {"--max-queued", "2", "--max-queued-tokens", "250"});
  flags.gateway_flags = {"--kv-wait-ms", "0"};  // the default waits for decode room
  Start(flags);
  DirectClient direct(topo_->decode().grpc(), topo_->prefill().grpc());
  ced::internal::ReserveResponse resp;
  ASSERT_TRUE(direct.Reserve("held-1", Prompt(100, 1), 8, &resp).ok());
  // Tokens: 100 waiting + 200 > 250.
  grpc::Status s = direct.Reserve("held-2", Prompt(200, 2), 8, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-queued-tokens"), std::string::npos) << s.error_message();
  ASSERT_TRUE(direct.Reserve("held-2", Prompt(100, 2), 8, &resp).ok());
  // Requests: two wait already.
  s = direct.Reserve("held-3", Prompt(10, 3), 8, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-queued 2"), std::string::npos) << s.error_message();
  // Through the gateway: the decode worker's refusal reaches the client.
  const GenResult via_gateway =
      Generate(topo_->gateway().grpc(), Request(normal_prompt_, 8, ced::v1::REPLAY_ON_AUTO));
  EXPECT_EQ(via_gateway.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << via_gateway.status.error_message();
  EXPECT_EQ(topo_->Metric(topo_->decode(),
                          "ced_decode_admission_rejected_total{reason=\"queue_tokens\"}"),
            1);
  EXPECT_EQ(topo_->Metric(topo_->decode(),
                          "ced_decode_admission_rejected_total{reason=\"queue_requests\"}"),
            2);
  // A cancelled reservation leaves the queue at once.
  EXPECT_TRUE(direct.Cancel("held-1"));
  EXPECT_TRUE(direct.Reserve("held-3", Prompt(10, 3), 8, &resp).ok());
  EXPECT_TRUE(direct.Cancel("held-2"));
  EXPECT_TRUE(direct.Cancel("held-3"));
  ExpectHealthyAfterwards();
}

// The prefill worker's queue: --max-queued 2 --max-queued-tokens 300. A slow
// request (test-only chunk delay) holds the compute thread while the queue
// fills: a request whose prompt does not fit the token bound is refused, a
// small one is queued, then the next is refused by count. The decode
// reservations of refused requests are freed; the admitted three get the
// right tokens. The refusals reach the client at once under the gateway's
// default --kv-wait-ms: only the decode side's refusals wait for room.
TEST_F(OverloadTest, PrefillQueueBoundsInRequestsAndTokens) {
  Start(Flags("prefill", {"--max-queued", "2", "--max-queued-tokens", "300",
                          "--fault-injection-for-testing", "match=slow-,chunk_delay_ms=2500"}));
  auto depth = [&] { return topo_->Metric(topo_->prefill(), "ced_prefill_queue_depth"); };
  ced::v1::GenerateRequest slow = Req(300, 1, 6);
  slow.set_request_id("slow-1");
  Stream first(topo_->gateway().grpc(), slow);
  ASSERT_TRUE(WaitUntil(
      [&] { return topo_->Metric(topo_->prefill(), "ced_prefill_outstanding_tokens") > 0; },
      std::chrono::seconds(30), std::chrono::milliseconds(20)));
  Stream second(topo_->gateway().grpc(), Req(200, 2, 6));
  ASSERT_TRUE(WaitUntil([&] { return depth() == 1; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(20)));
  // 200 queued + 150 > 300 tokens.
  const GenResult by_tokens = Generate(topo_->gateway().grpc(), Req(150, 4, 6));
  EXPECT_EQ(by_tokens.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << by_tokens.status.error_message();
  EXPECT_NE(by_tokens.status.error_message().find("--max-queued-tokens"), std::string::npos)
      << by_tokens.status.error_message();
  Stream third(topo_->gateway().grpc(), Req(20, 3, 6));
  ASSERT_TRUE(WaitUntil([&] { return depth() == 2; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(20)));
  const GenResult by_count = Generate(topo_->gateway().grpc(), Req(20, 5, 6));
  EXPECT_EQ(by_count.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << by_count.status.error_message();
  EXPECT_NE(by_count.status.error_message().find("prefill queue is full (2 requests)"),
            std::string::npos)
      << by_count.status.error_message();
  EXPECT_EQ(topo_->Metric(topo_->prefill(),
                          "ced_prefill_admission_rejected_total{reason=\"queue_tokens\"}"),
            1);
  EXPECT_EQ(topo_->Metric(topo_->prefill(),
                          "ced_prefill_admission_rejected_total{reason=\"queue_requests\"}"),
            1);
  for (Stream* s : {&first, &second, &third}) ASSERT_TRUE(s->Finish().ok()) << topo_->Logs();
  EXPECT_EQ(first.tokens(), Expected(300, 1, 6));
  EXPECT_EQ(second.tokens(), Expected(200, 2, 6));
  EXPECT_EQ(third.tokens(), Expected(20, 3, 6));
  ExpectHealthyAfterwards();
}

// The gateway's default --kv-wait-ms (30 s): with a request holding 59 of
// the decode worker's 64 blocks (>= 2.7 s long), one needing 7 more waits in
// the gateway instead of being refused, and runs with the right tokens once
// the holder's blocks are free; a request larger than the whole cache is
// refused at once all the same.
TEST_F(OverloadTest, KvWaitQueuesARequestUntilRoomFrees) {
  Start(SlowDecode(Flags("decode", {"--kv-cache-mb", "4"})));
  ASSERT_EQ(topo_->Metric(topo_->decode(), "ced_kv_blocks_free"), 64);
  // Larger than the whole cache: no wait helps, so it is the request's
  // fault (INVALID_ARGUMENT naming max_tokens, HTTP 400), not a busy server's.
  const GenResult never = Generate(topo_->gateway().grpc(), Req(40, 9, 1100));  // 72 blocks
  EXPECT_EQ(never.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << never.status.error_message();
  EXPECT_EQ(never.status.error_message().rfind(
                "max_tokens: 1140 tokens (prompt + max_tokens) are larger than the whole K/V "
                "cache of every decode worker (the largest has 64 blocks)",
                0),
            0u)
      << never.status.error_message();
  EXPECT_EQ(topo_->Metric(topo_->gateway(), "ced_gateway_kv_waits_total"), 0);

  Stream holder(topo_->gateway().grpc(), Req(40, 1, 900));  // 940 tokens: 59 blocks
  ASSERT_TRUE(holder.ReadTokens(1));
  const GenResult waited = Generate(topo_->gateway().grpc(), Req(40, 2, 60));  // 7 blocks
  ASSERT_TRUE(waited.status.ok()) << waited.status.error_message() << "\n" << topo_->Logs();
  EXPECT_EQ(waited.tokens, Expected(40, 2, 60));
  EXPECT_GE(topo_->Metric(topo_->gateway(), "ced_gateway_kv_waits_total"), 1);
  ASSERT_TRUE(holder.Finish().ok()) << topo_->Logs();
  EXPECT_EQ(holder.tokens(), Expected(40, 1, 900));
  ExpectHealthyAfterwards();
}

// Requests waiting for K/V room are served first come first served: with a
// request holding 59 of the 64 blocks, three requests of 40 blocks each
// (only one fits at a time) sent one after the other all wait in the
// gateway (ced_gateway_kv_waiting_requests counts them), then run one at a
// time in the order they came, with the right tokens. A fourth request, of
// 4 blocks, would fit at once beside the holder; arriving behind the
// waiting three, it waits its turn after them instead of overtaking them.
TEST_F(OverloadTest, KvWaitersAreServedInArrivalOrder) {
  Start(SlowDecode(Flags("decode", {"--kv-cache-mb", "4"})));
  auto waiting = [&] { return topo_->Metric(topo_->gateway(), "ced_gateway_kv_waiting_requests"); };
  Stream holder(topo_->gateway().grpc(), Req(40, 1, 900));  // 940 tokens: 59 blocks
  ASSERT_TRUE(holder.ReadTokens(1));
  constexpr int kWaiters = 4;
  // Prompt tokens and max_tokens: 640 tokens (40 blocks) each, then 60 (4).
  const int prompt[kWaiters] = {340, 340, 340, 20};
  const int max_tokens[kWaiters] = {300, 300, 300, 40};
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::thread> readers;
  std::mutex mu;
  std::vector<int> order;  // by first token
  for (int i = 0; i < kWaiters; ++i) {
    streams.push_back(
        std::make_unique<Stream>(topo_->gateway().grpc(), Req(prompt[i], 10 + i, max_tokens[i])));
    readers.emplace_back([&, i] {
      if (!streams[static_cast<size_t>(i)]->ReadTokens(1)) return;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
    ASSERT_TRUE(WaitUntil([&] { return waiting() == i + 1; }, std::chrono::seconds(30),
                          std::chrono::milliseconds(5)))
        << "request " << i << " is not waiting: " << waiting() << "\n"
        << topo_->Logs();
  }
  ASSERT_TRUE(holder.Finish().ok()) << topo_->Logs();
  for (auto& t : readers) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(streams[static_cast<size_t>(i)]->Finish().ok()) << i << "\n" << topo_->Logs();
    EXPECT_EQ(streams[static_cast<size_t>(i)]->tokens(), Expected(prompt[i], 10 + i, max_tokens[i]))
        << i;
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(waiting(), 0);
  ExpectHealthyAfterwards();
}

// A request the client cancels while it waits for K/V room leaves the queue
// at once (the one behind it becomes the head) and nothing of it runs; the
// request behind it is served when the holder ends.
TEST_F(OverloadTest, CancelledWaiterLeavesTheKvQueue) {
  Start(SlowDecode(Flags("decode", {"--kv-cache-mb", "4"})));
  auto waiting = [&] { return topo_->Metric(topo_->gateway(), "ced_gateway_kv_waiting_requests"); };
  Stream holder(topo_->gateway().grpc(), Req(40, 1, 900));  // 940 tokens: 59 blocks
  ASSERT_TRUE(holder.ReadTokens(1));
  Stream first(topo_->gateway().grpc(), Req(340, 10, 300));  // 40 blocks each
  ASSERT_TRUE(WaitUntil([&] { return waiting() == 1; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(5)));
  Stream second(topo_->gateway().grpc(), Req(340, 11, 300));
  ASSERT_TRUE(WaitUntil([&] { return waiting() == 2; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(5)));
  first.Cancel();
  EXPECT_TRUE(WaitUntil([&] { return waiting() == 1; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(5)))
      << waiting();
  EXPECT_EQ(first.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(first.tokens().empty());
  ASSERT_TRUE(holder.Finish().ok()) << topo_->Logs();
  ASSERT_TRUE(second.Finish().ok()) << topo_->Logs();
  EXPECT_EQ(second.tokens(), Expected(340, 11, 300));
  EXPECT_EQ(waiting(), 0);
  ExpectHealthyAfterwards();
}

// KV exhaustion on the decode pool: 64 blocks of 16 tokens (--kv-cache-mb 4
// with tiny's 64 KiB blocks). A long request holds 59 of them; a request
// needing 7 more is refused (by the router or the decode worker), one
// needing 5 is served; then a burst of requests that cannot all fit: each
// one either gets the right tokens or RESOURCE_EXHAUSTED, the worker stays
// up, and the running request (>= 2.7 s long) never loses its blocks.
TEST_F(OverloadTest, KvExhaustionRefusesWithoutHurtingAdmittedRequests) {
  TopologyFlags flags = SlowDecode(Flags("decode", {"--kv-cache-mb", "4"}));
  flags.gateway_flags = {"--kv-wait-ms", "0"};  // refuse at once (the default waits)
  Start(flags);
  ASSERT_EQ(topo_->Metric(topo_->decode(), "ced_kv_blocks_free"), 64);
  Stream holder(topo_->gateway().grpc(), Req(40, 1, 900));  // 940 tokens: 59 blocks
  ASSERT_TRUE(holder.ReadTokens(1));
  const GenResult too_big = Generate(topo_->gateway().grpc(), Req(40, 2, 60));  // 7 blocks
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << too_big.status.error_message();
  const GenResult fits = Generate(topo_->gateway().grpc(), Req(40, 3, 30));  // 5 blocks
  ASSERT_TRUE(fits.status.ok()) << fits.status.error_message();
  EXPECT_EQ(fits.tokens, Expected(40, 3, 30));

  std::vector<ced::v1::GenerateRequest> burst;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 10; ++i) {
    burst.push_back(Req(30 + 5 * i, 20 + i, 30));  // 4..7 blocks each
    expected.push_back(Expected(30 + 5 * i, 20 + i, 30));
  }
  const std::vector<GenResult> got = GenerateConcurrently(topo_->gateway().grpc(), burst);
  int served = 0, refused = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].status.ok()) {
      ++served;
      EXPECT_EQ(got[i].tokens, expected[i]) << i;
    } else {
      ++refused;
      EXPECT_EQ(got[i].status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << i << ": " << got[i].status.error_message();
    }
  }
  ASSERT_TRUE(holder.Finish().ok()) << topo_->Logs();
  EXPECT_EQ(holder.tokens(), Expected(40, 1, 900));
  EXPECT_GE(refused, 1);  // 10 x 4..7 blocks never fit in the 5 left at once
  std::printf("[figures] KV burst: %d served, %d refused\n", served, refused);
  ExpectHealthyAfterwards();
}

}  // namespace
}  // namespace ced::testing
