#include "services/router_policy/policy.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ced::router {
namespace {

constexpr int kBlockSize = 16;

class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest() : table_(WorkerTable::Options{absl::Seconds(5)}) {}

  std::unique_ptr<CedRoutingPolicy> MakePolicy(CedRoutingPolicy::Options options = {}) {
    options.clock = [this] { return now_; };
    auto policy = CedRoutingPolicy::Create(&table_, options);
    EXPECT_TRUE(policy.ok()) << policy.status();
    return policy.ok() ? std::move(*policy) : nullptr;
  }

  void AddPrefill(const std::string& id, WeightsHeld weights = WeightsHeld::kEncoderReplay) {
    ASSERT_TRUE(table_.Register(WorkerInfo{id, Role::kPrefill, weights, 0, 0}, now_).ok());
  }
  void AddDecode(const std::string& id, int64_t total_blocks = 1000) {
    ASSERT_TRUE(
        table_
            .Register(WorkerInfo{id, Role::kDecode, WeightsHeld::kFull, total_blocks, kBlockSize},
                      now_)
            .ok());
  }
  void ReportPrefill(const std::string& id, int64_t queued, int64_t inflight) {
    WorkerLoad load;
    load.queued_prefill_tokens = queued;
    load.inflight_prefill_tokens = inflight;
    load.last_heartbeat = now_;
    ASSERT_TRUE(table_.Update(id, load).ok());
  }
  void ReportDecode(const std::string& id, int64_t free_blocks, int64_t running) {
    WorkerLoad load;
    load.free_kv_blocks = free_blocks;
    load.running_sequences = running;
    load.last_heartbeat = now_;
    ASSERT_TRUE(table_.Update(id, load).ok());
  }

  static RouteRequest Request(int64_t prompt, int64_t max_tokens = 16,
                              ReplayOnChoice replay_on = ReplayOnChoice::kUnspecified) {
    RouteRequest r;
    r.prompt_tokens = prompt;
    r.max_tokens = max_tokens;
    r.replay_on = replay_on;
    return r;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  WorkerTable table_;
};

// Two equally loaded prefill workers, one decode worker with room.
class TwoPrefillTest : public PolicyTest {
 protected:
  void SetUp() override {
    AddPrefill("p0");
    AddPrefill("p1");
    AddDecode("d0", 100000);
  }
  std::map<std::string, int> Burst(RoutingPolicy& policy, int n) {
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) {
      auto decision = policy.Select(Request(512));
      EXPECT_TRUE(decision.ok()) << decision.status();
      if (decision.ok()) ++counts[decision->prefill_id];
    }
    return counts;
  }
};

TEST_F(TwoPrefillTest, BurstBetweenHeartbeatsSpreads) {
  auto policy = MakePolicy();
  auto counts = Burst(*policy, 10);
  EXPECT_EQ(counts["p0"], 5);
  EXPECT_EQ(counts["p1"], 5);
}

TEST_F(TwoPrefillTest, NaivePolicySendsBurstToOneWorker) {
  CedRoutingPolicy::Options options;
  options.count_inflight = false;
  auto policy = MakePolicy(options);
  auto counts = Burst(*policy, 10);
  EXPECT_EQ(counts["p0"], 10);
  EXPECT_EQ(counts.count("p1"), 0u);
}

TEST_F(TwoPrefillTest, CountsReportedInflightTokens) {
  ReportPrefill("p0", /*queued=*/0, /*inflight=*/5000);
  ReportPrefill("p1", /*queued=*/1000, /*inflight=*/0);
  auto decision = MakePolicy()->Select(Request(100));
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->prefill_id, "p1");
  EXPECT_EQ(decision->est_prefill_wait_tokens, 1000);

  CedRoutingPolicy::Options naive;
  naive.count_inflight = false;
  decision = MakePolicy(naive)->Select(Request(100));
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->prefill_id, "p0");
}

TEST_F(TwoPrefillTest, ReportReplacesOwnAssignments) {
  auto policy = MakePolicy();
  ASSERT_EQ(policy->Select(Request(3000))->prefill_id, "p0");
  // p0 now reports it finished everything: it is the smaller id again.
  ReportPrefill("p0", 0, 0);
  ASSERT_EQ(policy->Select(Request(100))->prefill_id, "p0");
  // Its pending 100 tokens make p1 the choice now.
  EXPECT_EQ(policy->Select(Request(100))->prefill_id, "p1");
}

TEST_F(TwoPrefillTest, ConcurrentSelectsKeepEveryAssignment) {
  auto policy = MakePolicy();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&policy] {
      for (int i = 0; i < 25; ++i) EXPECT_TRUE(policy->Select(Request(10)).ok());
    });
  }
  for (auto& thread : threads) thread.join();
  auto states = table_.Snapshot(now_);
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[1].pending.prefill_tokens, 500);  // p0
  EXPECT_EQ(states[2].pending.prefill_tokens, 500);  // p1
  EXPECT_EQ(states[0].pending.sequences, 100);       // d0
}

TEST_F(PolicyTest, DecodeNeedsKvRoomIncludingOwnReservations) {
  AddPrefill("p0");
  AddDecode("d0", 100);
  AddDecode("d1", 100);
  ReportDecode("d0", /*free=*/40, /*running=*/0);
  ReportDecode("d1", /*free=*/30, /*running=*/0);
  auto policy = MakePolicy();
  // 200 + 100 tokens = 19 blocks of 16.
  auto first = policy->Select(Request(200, 100));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->decode_id, "d0");
  EXPECT_EQ(first->kv_blocks, 19);
  // d0 has 21 left after its pending 19, d1 has 30: d1.
  EXPECT_EQ(policy->Select(Request(200, 100))->decode_id, "d1");
  // d1 has 11 left (too few), d0 still 21.
  EXPECT_EQ(policy->Select(Request(200, 100))->decode_id, "d0");
  // Nobody has 19 blocks beyond its pending work any more, but the pending
  // requests may have ended since the reports: the worker with the most room
  // after its pending work (d1: 11, d0: 2) is asked; it refuses the
  // reservation if it is really full.
  auto unconfirmed = policy->Select(Request(200, 100));
  ASSERT_TRUE(unconfirmed.ok()) << unconfirmed.status();
  EXPECT_EQ(unconfirmed->decode_id, "d1");
  // A fresh report frees the room again: d1 fits with its pending work.
  ReportDecode("d1", 100, 3);
  EXPECT_EQ(policy->Select(Request(200, 100))->decode_id, "d1");
  // Room that no report shows is never assumed.
  ReportDecode("d0", 10, 0);
  ReportDecode("d1", 10, 0);
  auto full = policy->Select(Request(200, 100));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("largest free: 10 blocks"), std::string::npos)
      << full.status();
}

// A migrated request names the workers that failed under it.
TEST_F(PolicyTest, ExcludedWorkersAreNotChosen) {
  AddPrefill("p0");
  AddPrefill("p1");
  AddDecode("d0", 1000);
  AddDecode("d1", 1000);
  ReportDecode("d0", 1000, /*running=*/0);
  ReportDecode("d1", 500, /*running=*/10);
  auto policy = MakePolicy();
  RouteRequest request = Request(64);
  ASSERT_EQ(policy->Select(request)->decode_id, "d0");
  request.exclude_ids = {"d0", "p0"};
  auto decision = policy->Select(request);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_EQ(decision->decode_id, "d1");
  EXPECT_EQ(decision->prefill_id, "p1");
  request.exclude_ids = {"d0", "d1"};
  EXPECT_EQ(policy->Select(request).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PolicyTest, ResourceExhaustedWhenNoDecodeWorkerFits) {
  AddPrefill("p0");
  AddDecode("d0", 10);
  auto decision = MakePolicy()->Select(Request(10 * kBlockSize, 1));
  EXPECT_EQ(decision.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(MakePolicy()->Select(Request(10 * kBlockSize - 1, 1)).ok());
}

TEST_F(PolicyTest, BatchLoadBreaksEqualKvRoom) {
  AddPrefill("p0");
  AddDecode("d0", 1000);
  AddDecode("d1", 1000);
  ReportDecode("d0", 500, /*running=*/60);
  ReportDecode("d1", 500, /*running=*/0);
  EXPECT_EQ(MakePolicy()->Select(Request(64))->decode_id, "d1");
}

TEST_F(PolicyTest, NoDecodeWorkerIsUnavailable) {
  AddPrefill("p0");
  auto decision = MakePolicy()->Select(Request(64));
  EXPECT_EQ(decision.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(decision.status().message(), "no decode worker available");
}

TEST_F(PolicyTest, NoPrefillWorkerIsUnavailableUnlessLocalAllowed) {
  AddDecode("d0");
  EXPECT_EQ(MakePolicy()->Select(Request(64)).status().code(), absl::StatusCode::kUnavailable);

  CedRoutingPolicy::Options options;
  options.local_prefill_max_prompt_tokens = 128;
  auto policy = MakePolicy(options);
  auto short_prompt = policy->Select(Request(64));
  ASSERT_TRUE(short_prompt.ok());
  EXPECT_TRUE(short_prompt->local_prefill);
  EXPECT_EQ(policy->Select(Request(1000)).status().code(), absl::StatusCode::kUnavailable);

  options.local_prefill_fallback = true;
  auto fallback = MakePolicy(options)->Select(Request(1000));
  ASSERT_TRUE(fallback.ok());
  EXPECT_TRUE(fallback->local_prefill);
  EXPECT_TRUE(fallback->prefill_id.empty());
}

TEST_F(PolicyTest, StaleWorkersGetNoWorkAndRejoin) {
  AddPrefill("p0");
  AddPrefill("p1");
  AddDecode("d0");
  auto policy = MakePolicy();
  now_ += absl::Seconds(4);
  ReportPrefill("p1", 100000, 0);
  ReportDecode("d0", 1000, 0);
  now_ += absl::Seconds(2);  // p0 silent for 6 s > 5 s
  auto decision = policy->Select(Request(64));
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->prefill_id, "p1");

  ReportPrefill("p0", 0, 0);
  EXPECT_EQ(policy->Select(Request(64))->prefill_id, "p0");

  now_ += absl::Seconds(10);  // everyone silent
  EXPECT_EQ(policy->Select(Request(64)).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PolicyTest, ReplayOnForcedByRequestOrPolicy) {
  AddPrefill("p0");
  AddDecode("d0");
  auto policy = MakePolicy();
  EXPECT_EQ(policy->Select(Request(64, 16, ReplayOnChoice::kDecode))->replay_on, ReplayOn::kDecode);
  EXPECT_EQ(policy->Select(Request(64, 16, ReplayOnChoice::kPrefill))->replay_on,
            ReplayOn::kPrefill);

  CedRoutingPolicy::Options on_decode;
  on_decode.replay_on = ReplayOnChoice::kDecode;
  auto forced = MakePolicy(on_decode);
  EXPECT_EQ(forced->Select(Request(64))->replay_on, ReplayOn::kDecode);
  EXPECT_EQ(forced->Select(Request(64, 16, ReplayOnChoice::kPrefill))->replay_on,
            ReplayOn::kPrefill);
}

TEST_F(PolicyTest, ReplayOnAutoMovesToDecodeWhenPrefillIsBusyAndDecodeIdle) {
  AddPrefill("p0");
  AddDecode("d0");
  CedRoutingPolicy::Options options;
  options.auto_prefill_busy_tokens = 1000;
  options.auto_decode_idle_sequences = 4;
  auto policy = MakePolicy(options);
  ReportPrefill("p0", 500, 0);
  ReportDecode("d0", 1000, 0);
  EXPECT_EQ(policy->Select(Request(64))->replay_on, ReplayOn::kPrefill);  // prefill not busy

  ReportPrefill("p0", 800, 400);
  ReportDecode("d0", 1000, 0);
  EXPECT_EQ(policy->Select(Request(64))->replay_on, ReplayOn::kDecode);  // busy + idle decode

  ReportPrefill("p0", 800, 400);
  ReportDecode("d0", 1000, 10);
  EXPECT_EQ(policy->Select(Request(64))->replay_on, ReplayOn::kPrefill);  // decode busy too
}

TEST_F(PolicyTest, NeverReplaysOnEncoderOnlyPrefill) {
  AddPrefill("p0", WeightsHeld::kEncoderOnly);
  AddDecode("d0");
  auto policy = MakePolicy();
  EXPECT_EQ(policy->Select(Request(64, 16, ReplayOnChoice::kPrefill))->replay_on,
            ReplayOn::kDecode);
  EXPECT_EQ(policy->Select(Request(64))->replay_on, ReplayOn::kDecode);
}

TEST_F(PolicyTest, DecoderOnlyReportsPrefill) {
  AddPrefill("p0", WeightsHeld::kEncoderOnly);
  AddDecode("d0");
  CedRoutingPolicy::Options options;
  options.decoder_only = true;
  auto decision = MakePolicy(options)->Select(Request(64, 16, ReplayOnChoice::kDecode));
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->replay_on, ReplayOn::kPrefill);
}

TEST_F(PolicyTest, ShortPromptPrefillsLocallyWhenPrefillPoolIsBusy) {
  AddPrefill("p0");
  AddDecode("d0");
  CedRoutingPolicy::Options options;
  options.local_prefill_max_prompt_tokens = 128;
  options.local_prefill_threshold_tokens = 2000;
  auto policy = MakePolicy(options);

  ReportPrefill("p0", 1500, 0);
  auto idle = policy->Select(Request(64));
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->local_prefill);  // 1500 <= 2000
  EXPECT_EQ(idle->prefill_id, "p0");

  ReportPrefill("p0", 3000, 0);
  auto busy = policy->Select(Request(64));
  ASSERT_TRUE(busy.ok());
  EXPECT_TRUE(busy->local_prefill);
  EXPECT_TRUE(busy->prefill_id.empty());
  EXPECT_EQ(busy->decode_id, "d0");
  EXPECT_EQ(busy->replay_on, ReplayOn::kDecode);

  auto long_prompt = policy->Select(Request(129));
  ASSERT_TRUE(long_prompt.ok());
  EXPECT_FALSE(long_prompt->local_prefill);
  EXPECT_EQ(long_prompt->prefill_id, "p0");
}

TEST_F(PolicyTest, TiesGoToSmallerId) {
  // Registered in reverse order: the choice must not depend on it.
  AddPrefill("p-b");
  AddPrefill("p-a");
  AddDecode("d-b");
  AddDecode("d-a");
  auto decision = MakePolicy()->Select(Request(64));
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->prefill_id, "p-a");
  EXPECT_EQ(decision->decode_id, "d-a");
}

TEST_F(PolicyTest, RejectsBadRequestsAndOptions) {
  AddPrefill("p0");
  AddDecode("d0");
  auto policy = MakePolicy();
  EXPECT_EQ(policy->Select(Request(0)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy->Select(Request(64, 0)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy->Select(Request(int64_t{1} << 50)).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(CedRoutingPolicy::Create(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  CedRoutingPolicy::Options bad;
  bad.decode_batch_reference = 0;
  EXPECT_EQ(CedRoutingPolicy::Create(&table_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced::router
