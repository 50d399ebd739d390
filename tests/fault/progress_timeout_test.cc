// Issue 15 point 8: the decode worker's reservation timeout follows K/V
// progress. A reservation ends when no K/V message of its request (chunk,
// tail, or the prefill worker's progress notice) has landed for
// --reservation-timeout-ms, not at a fixed time from the reservation; the
// client's deadline still bounds the request as a whole.
//
// Every duration that decides an outcome is built in by the prefill worker's
// fault injection (sleeps, a stall), with wide margins against the timeout:
// a slow prompt sleeps 10 x 500 ms in all (> the 3,000 ms timeout) but never
// more than 500 ms between two chunks, and a queued request is told at least
// every 1,000 ms + one chunk.
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "services/prefill/fault_injection.h"
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kReservationTimeoutMs = 3000;
constexpr int kChunk = 64;
constexpr int kChunkDelayMs = 500;
constexpr int kSlowChunks = 10;
constexpr int kSlowPromptTokens = kSlowChunks * kChunk;  // sleeps kSlowChunks x kChunkDelayMs
static_assert(kSlowChunks * kChunkDelayMs > kReservationTimeoutMs + 1000,
              "the slow prefill must outlast the reservation timeout by far");
static_assert(3 * kChunkDelayMs < kReservationTimeoutMs,
              "each chunk must arrive well within the reservation timeout");

class FaultProgressTimeoutTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(MakeModelDir("tiny"));
    FaultClusterOptions o = Topology(*model_, 1, 1);
    o.prefill_flags = {"--chunk", std::to_string(kChunk), "--fault-injection-for-testing",
                       "match=slow,chunk_delay_ms=" + std::to_string(kChunkDelayMs) +
                           ";match=stall,stall_after_chunks=1"};
    o.decode_flags = {"--reservation-timeout-ms", std::to_string(kReservationTimeoutMs)};
    cluster_ = new FaultCluster(o);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }
  void TearDown() override {
    std::string why;
    EXPECT_TRUE(cluster_->WaitNoKvInUse(Ms(15000), nullptr, &why)) << why;
  }
  FaultCluster& c() { return *cluster_; }

  static std::string* model_;
  static FaultCluster* cluster_;
};

std::string* FaultProgressTimeoutTest::model_ = nullptr;
FaultCluster* FaultProgressTimeoutTest::cluster_ = nullptr;

TEST(FaultProgressSpecTest, ParsesStallAfterChunks) {
  auto f = services::ParsePrefillFaults("match=x,stall_after_chunks=2");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->rules.size(), 1u);
  EXPECT_EQ(f->rules[0].stall_after_chunks, 2);
  EXPECT_FALSE(services::ParsePrefillFaults("stall_after_chunks=0").ok());
  EXPECT_FALSE(services::ParsePrefillFaults("stall_after_chunks=x").ok());
}

// The prefill takes longer than the reservation timeout in all, but each
// chunk lands well within it: the request completes with the right tokens.
TEST_F(FaultProgressTimeoutTest, SlowButProgressingPrefillSucceeds) {
  ColocatedEngine ref(*model_);
  const auto prompt = Prompt(kSlowPromptTokens, 1);
  const auto want = ref.Run(prompt, 12);
  const auto t0 = SteadyClock::now();
  const GenResult r =
      Generate(c().gateway().grpc(), FaultRequest(prompt, 12, "slow-1", ced::v1::REPLAY_ON_DECODE));
  const double took_ms = MsSince(t0);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, want);
  EXPECT_GT(took_ms, kReservationTimeoutMs) << "the prefill was not slow: the test proves nothing";
  Figure("progress_timeout_slow_prefill", "request_ms", took_ms);
}

// A request queued at the prefill worker behind a slow prompt waits longer
// than the reservation timeout before its own compute starts: the progress
// notices the prefill worker sends while the queue moves keep it alive.
TEST_F(FaultProgressTimeoutTest, RequestQueuedBehindASlowPrefillSucceeds) {
  ColocatedEngine ref(*model_);
  const auto slow_prompt = Prompt(kSlowPromptTokens, 2);
  const auto queued_prompt = Prompt(100, 3);
  const auto want_slow = ref.Run(slow_prompt, 8);
  const auto want_queued = ref.Run(queued_prompt, 8);
  const double bytes_before =
      ScrapeMetric(c().decode(0).metrics(), "ced_kv_transfer_bytes_total{direction=\"in\"}")
          .value_or(0);
  Stream slow(c().gateway().grpc(),
              FaultRequest(slow_prompt, 8, "slow-2", ced::v1::REPLAY_ON_DECODE), Ms(120000));
  // The slow prompt computes (its first chunk landed): what comes next queues.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ScrapeMetric(c().decode(0).metrics(),
                            "ced_kv_transfer_bytes_total{direction=\"in\"}")
                   .value_or(0) > bytes_before;
      },
      Ms(30000), Ms(10)));
  const auto t0 = SteadyClock::now();
  const GenResult queued = Generate(
      c().gateway().grpc(), FaultRequest(queued_prompt, 8, "queued-2", ced::v1::REPLAY_ON_DECODE));
  const double took_ms = MsSince(t0);
  EXPECT_TRUE(queued.status.ok()) << queued.status.error_message();
  EXPECT_EQ(queued.tokens, want_queued);
  // 9 of the slow prompt's 10 sleeps (4,500 ms) were still ahead of it.
  EXPECT_GT(took_ms, kReservationTimeoutMs) << "it did not wait: the test proves nothing";
  const grpc::Status s = slow.Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(slow.tokens(), want_slow);
  Figure("progress_timeout_queued", "queued_request_ms", took_ms);
}

// The prefill sends its first chunk, then stops making progress (connections
// still open, nothing sent): the reservation ends with the progress error,
// long before the client's deadline, and nothing stays reserved.
TEST_F(FaultProgressTimeoutTest, StalledPrefillExpiresWithProgressError) {
  const auto prompt = Prompt(5 * kChunk, 4);
  const auto t0 = SteadyClock::now();
  GenerateOptions go;
  go.deadline = Ms(120000);
  const GenResult r = Generate(c().gateway().grpc(),
                               FaultRequest(prompt, 12, "stall-1", ced::v1::REPLAY_ON_DECODE), go);
  const double took_ms = MsSince(t0);
  std::printf("stalled prefill ended with %d: %s\n", r.status.error_code(),
              r.status.error_message().c_str());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no K/V progress"));
  EXPECT_THAT(r.status.error_message(), HasSubstr(c().prefill_id(0)));
  EXPECT_TRUE(r.tokens.empty());
  // Counted from the last landed message, which came after the reservation.
  EXPECT_GE(took_ms, kReservationTimeoutMs);
  EXPECT_LT(took_ms, 60000) << "not ended by the reservation timeout";
  Figure("progress_timeout_stall", "request_ms", took_ms);
}

// The client's deadline still ends a request whose prefill progresses but
// would take longer than the deadline allows.
TEST_F(FaultProgressTimeoutTest, ClientDeadlineStillEndsASlowPrefill) {
  constexpr int kDeadlineMs = 1200;
  const auto prompt = Prompt(kSlowPromptTokens, 5);
  const auto t0 = SteadyClock::now();
  GenerateOptions go;
  go.deadline = Ms(kDeadlineMs);
  const GenResult r =
      Generate(c().gateway().grpc(),
               FaultRequest(prompt, 12, "slow-deadline", ced::v1::REPLAY_ON_DECODE), go);
  const double took_ms = MsSince(t0);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(r.status.error_message(), Not(HasSubstr("no K/V progress")));
  EXPECT_TRUE(r.tokens.empty());
  Figure("progress_timeout_client_deadline", "request_ms", took_ms);
  // The workers gave the request up too (TearDown: nothing stays reserved),
  // and they serve the next one.
  ColocatedEngine ref(*model_);
  const auto p = Prompt(50, 6);
  const GenResult after = Generate(c().gateway().grpc(), FaultRequest(p, 8, "after-deadline"));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, ref.Run(p, 8));
}

}  // namespace
}  // namespace ced::testing
