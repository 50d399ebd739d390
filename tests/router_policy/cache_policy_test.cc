// Cache-aware placement (DESIGN.md 1.6): tokens left to compute plus load,
// the decode worker holding the prompt's blocks, session stickiness,
// conditional local prefill, and load-only routing for comparison.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "services/router_policy/block_index.h"
#include "services/router_policy/policy.h"

namespace ced::router {
namespace {

constexpr int kBlockSize = 16;
const BlockKey kRoot{42, 43};

// A prompt's chain: block i of conversation `conv` (prompts of one
// conversation share their leading blocks).
std::vector<BlockKey> Chain(uint64_t conv, int64_t blocks) {
  std::vector<BlockKey> out;
  for (int64_t i = 0; i < blocks; ++i) out.push_back(BlockKey{conv, static_cast<uint64_t>(i)});
  return out;
}

class CachePolicyTest : public ::testing::Test {
 protected:
  CachePolicyTest()
      : table_(WorkerTable::Options{absl::Seconds(5)}), index_(BlockIndex::Options{}) {}

  std::unique_ptr<CedRoutingPolicy> MakePolicy(Routing routing = Routing::kCacheAware,
                                               int64_t max_uncached = 256) {
    CedRoutingPolicy::Options options;
    options.clock = [this] { return now_; };
    options.routing = routing;
    options.block_index = &index_;
    options.local_prefill_max_uncached_tokens = max_uncached;
    auto policy = CedRoutingPolicy::Create(&table_, options);
    EXPECT_TRUE(policy.ok()) << policy.status();
    return policy.ok() ? std::move(*policy) : nullptr;
  }

  void AddPrefill(const std::string& id) {
    ASSERT_TRUE(
        table_
            .Register(WorkerInfo{id, Role::kPrefill, WeightsHeld::kEncoderReplay, 1000, kBlockSize},
                      now_)
            .ok());
    index_.ResetWorker(id, kRoot, kBlockSize);
    ASSERT_TRUE(index_.Apply(id, BlockReport{0, 1, true, {}, {}}).ok());
  }
  void AddDecode(const std::string& id) {
    ASSERT_TRUE(
        table_.Register(WorkerInfo{id, Role::kDecode, WeightsHeld::kFull, 10000, kBlockSize}, now_)
            .ok());
    index_.ResetWorker(id, kRoot, kBlockSize);
    ASSERT_TRUE(index_.Apply(id, BlockReport{0, 1, true, {}, {}}).ok());
  }
  // A fresh load report (clears the policy's pending work for the worker).
  void ReportPrefill(const std::string& id, int64_t outstanding) {
    WorkerLoad load;
    load.queued_prefill_tokens = outstanding;
    load.last_heartbeat = now_;
    ASSERT_TRUE(table_.Update(id, load).ok());
  }
  void ReportDecode(const std::string& id, int64_t running) {
    WorkerLoad load;
    load.free_kv_blocks = 10000;
    load.running_sequences = running;
    load.last_heartbeat = now_;
    ASSERT_TRUE(table_.Update(id, load).ok());
  }
  // The worker reports holding the first `blocks` blocks of conversation `conv`.
  void Holds(const std::string& id, uint64_t conv, int64_t blocks) {
    ASSERT_TRUE(index_.Apply(id, BlockReport{0, 2, true, Chain(conv, blocks), {}}).ok());
  }

  static RouteRequest Request(uint64_t conv, int64_t prompt, const std::string& session = "") {
    RouteRequest r;
    r.prompt_tokens = prompt;
    r.max_tokens = 16;
    r.session_id = session;
    r.block_hashes = Chain(conv, prompt / kBlockSize);
    r.hash_root = kRoot;
    r.hash_block_size = kBlockSize;
    return r;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  WorkerTable table_;
  BlockIndex index_;
};

class TwoByTwoTest : public CachePolicyTest {
 protected:
  void SetUp() override {
    AddPrefill("p0");
    AddPrefill("p1");
    AddDecode("d0");
    AddDecode("d1");
  }
};

TEST_F(TwoByTwoTest, PrefillHitWinsUntilTheLoadGapExceedsTheCachedWork) {
  auto policy = MakePolicy();
  Holds("p1", 1, 64);  // 1024 of the prompt's 2048 tokens
  // cost(p1) = 1000 + (2048 - 1024) = 2024 < cost(p0) = 0 + 2048.
  ReportPrefill("p0", 0);
  ReportPrefill("p1", 1000);
  auto d = policy->Select(Request(1, 2048));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->prefill_id, "p1");
  EXPECT_EQ(d->prefill_cached_tokens, 1024);
  EXPECT_EQ(d->reason, PlacementReason::kCache);
  EXPECT_FALSE(d->local_prefill);
  // cost(p1) = 1100 + 1024 = 2124 > 2048: the idle worker recomputes.
  // Forget what the router predicted from the first placement.
  for (const char* id : {"p0", "d0", "d1"}) Holds(id, 99, 1);
  Holds("p1", 1, 64);
  ReportPrefill("p0", 0);
  ReportPrefill("p1", 1100);
  d = policy->Select(Request(1, 2048));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefill_id, "p0");
  EXPECT_EQ(d->prefill_cached_tokens, 0);
}

TEST_F(TwoByTwoTest, EqualCostsGoToTheSmallerId) {
  auto policy = MakePolicy();
  Holds("p1", 1, 32);  // 512 tokens cached, 512 more outstanding: a tie
  ReportPrefill("p0", 0);
  ReportPrefill("p1", 512);
  auto d = policy->Select(Request(1, 2048));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefill_id, "p0");
}

TEST_F(TwoByTwoTest, DecodeWorkerHoldingThePrefixWinsUnlessItsBatchIsMuchFuller) {
  auto policy = MakePolicy();
  Holds("d1", 1, 100);
  ReportDecode("d0", 0);
  ReportDecode("d1", 10);
  auto d = policy->Select(Request(1, 2048));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->decode_id, "d1");
  EXPECT_EQ(d->decode_cached_tokens, 1600);
  // 200 more sequences: batch pressure 0.5 * 200 / 64 > the cache bonus.
  Holds("d0", 99, 1);
  ReportDecode("d0", 0);
  ReportDecode("d1", 200);
  d = policy->Select(Request(1, 2048));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->decode_id, "d0");
}

TEST_F(TwoByTwoTest, ShortUncachedSuffixPrefillsOnTheDecodeWorker) {
  auto policy = MakePolicy(Routing::kCacheAware, /*max_uncached=*/256);
  Holds("d1", 1, 64);  // 1024 tokens
  // 1024 + 200: 200 uncached on d1 <= 256.
  auto d = policy->Select(Request(1, 1224));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->local_prefill);
  EXPECT_EQ(d->local_reason, LocalPrefillReason::kShortSuffix);
  EXPECT_EQ(d->decode_id, "d1");
  EXPECT_TRUE(d->prefill_id.empty());
  EXPECT_EQ(d->prefill_cached_tokens, 1024);
  EXPECT_EQ(d->replay_on, ReplayOn::kDecode);
  // 1024 + 300: too long for the decode worker; the pool prefills it.
  Holds("d1", 1, 64);
  ReportDecode("d1", 0);
  d = policy->Select(Request(1, 1324));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->local_prefill);
  EXPECT_EQ(d->decode_id, "d1");
  EXPECT_FALSE(d->prefill_id.empty());
  // A request naming its replay placement gets the disaggregated path.
  for (ReplayOnChoice on : {ReplayOnChoice::kPrefill, ReplayOnChoice::kDecode}) {
    Holds("d1", 1, 64);
    ReportDecode("d1", 0);
    RouteRequest r = Request(1, 1224);
    r.replay_on = on;
    d = policy->Select(r);
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->local_prefill);
    EXPECT_EQ(d->decode_id, "d1");
  }
  // Threshold 0: never.
  auto never = MakePolicy(Routing::kCacheAware, /*max_uncached=*/0);
  Holds("d1", 1, 64);
  ReportDecode("d1", 0);
  d = never->Select(Request(1, 1030));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->local_prefill);
}

TEST_F(TwoByTwoTest, LoadOnlyRoutingIgnoresCachesAndSessions) {
  auto policy = MakePolicy(Routing::kLoad);
  Holds("p1", 1, 120);
  Holds("d1", 1, 120);
  ReportPrefill("p0", 0);
  ReportPrefill("p1", 10);
  ReportDecode("d0", 0);
  ReportDecode("d1", 1);
  auto d = policy->Select(Request(1, 2048, "s"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefill_id, "p0");
  EXPECT_EQ(d->decode_id, "d0");
  EXPECT_FALSE(d->local_prefill);
  EXPECT_EQ(d->reason, PlacementReason::kLoad);
  EXPECT_EQ(d->prefill_cached_tokens, 0);  // what the chosen workers hold
  // The same session again: still by load.
  ReportPrefill("p0", 20);
  ReportDecode("d0", 2);
  d = policy->Select(Request(1, 2048, "s"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefill_id, "p1");
  EXPECT_EQ(d->decode_id, "d1");
  EXPECT_EQ(d->prefill_cached_tokens, 1920);  // a lucky hit is still reported
}

TEST_F(TwoByTwoTest, PlacedPromptsArePredictedBeforeAnyReport) {
  auto policy = MakePolicy();
  auto first = policy->Select(Request(5, 1024));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->reason, PlacementReason::kLoad);
  // The next turn extends the prompt: the same workers, by prediction alone,
  // although the other pair is now less loaded.
  ReportPrefill(first->prefill_id == "p0" ? "p1" : "p0", 0);
  auto next = policy->Select(Request(5, 2048));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->decode_id, first->decode_id);
  EXPECT_EQ(next->prefill_id, first->prefill_id);
  EXPECT_EQ(next->prefill_cached_tokens, 1024);
  EXPECT_EQ(next->decode_cached_tokens, 1024);
  EXPECT_EQ(next->reason, PlacementReason::kCache);
}

TEST_F(TwoByTwoTest, SessionSticksWithoutAChainAndUnknownSessionsRouteByLoad) {
  auto policy = MakePolicy();
  RouteRequest r = Request(0, 1000, "conv-a");
  r.block_hashes.clear();  // the gateway has not learned the chain yet
  auto first = policy->Select(r);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->decode_id, "d0");
  EXPECT_EQ(first->reason, PlacementReason::kLoad);
  // d0 is now busier than d1, p0 than p1: the session still goes back.
  ReportDecode("d0", 8);
  ReportDecode("d1", 0);
  ReportPrefill("p0", 500);
  ReportPrefill("p1", 0);
  r.prompt_tokens = 1200;
  auto again = policy->Select(r);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->decode_id, "d0");
  EXPECT_EQ(again->prefill_id, "p0");
  EXPECT_EQ(again->reason, PlacementReason::kSession);
  EXPECT_EQ(again->decode_cached_tokens, 992);  // the last prompt, whole blocks
  // The hint alone never triggers a local prefill (it is not verified).
  EXPECT_FALSE(again->local_prefill);
  // An unknown session id is no error: by load.
  r.session_id = "never-seen";
  ReportDecode("d0", 8);
  ReportPrefill("p0", 500);
  auto other = policy->Select(r);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->decode_id, "d1");
  EXPECT_EQ(other->prefill_id, "p1");
}

TEST_F(TwoByTwoTest, ASessionsFinishedTurnNoLongerCountsAsItsWorkersLoad) {
  auto policy = MakePolicy();
  RouteRequest r = Request(3, 1024, "agent");
  auto first = policy->Select(r);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->prefill_id, "p0");
  // No report since: p0's pending work is that turn's 1024 tokens, which the
  // session's next turn says are done. cost(p0) = 0 + 1300 - 1024 < 1300.
  now_ += absl::Milliseconds(100);
  r = Request(3, 1300, "agent");
  auto next = policy->Select(r);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->prefill_id, "p0");
  EXPECT_EQ(next->prefill_cached_tokens, 1024);
  // Other sessions' pending work still counts: p0 keeps turn 1's 1024 tokens
  // (only the session's last turn is done) and gets 2000 more.
  auto other = policy->Select(Request(4, 2000, "someone-else"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->prefill_id, "p1");  // 1300 + 2000 on p0 > 2000 on p1
  now_ += absl::Milliseconds(100);
  auto third = policy->Select(Request(5, 2000, "third"));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->prefill_id, "p0");  // 1300 + 2000 < 2000 + 2000
  auto last = policy->Select(Request(3, 1600, "agent"));
  ASSERT_TRUE(last.ok());
  // p0: 1024 + 276 + 2000 pending, less the session's last 276 = 3024;
  // 3024 + (1600 - 1296) < p1's 2000 + 1600.
  EXPECT_EQ(last->prefill_id, "p0");
  EXPECT_EQ(last->est_prefill_wait_tokens, 3024);
}

TEST_F(TwoByTwoTest, ExcludedWorkersAreSkippedEvenWhenTheyHoldThePrefix) {
  auto policy = MakePolicy();
  Holds("d1", 1, 120);
  Holds("p1", 1, 120);
  RouteRequest r = Request(1, 2048);
  r.exclude_ids = {"d1", "p1"};
  auto d = policy->Select(r);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->decode_id, "d0");
  EXPECT_EQ(d->prefill_id, "p0");
  EXPECT_EQ(d->prefill_cached_tokens, 0);
}

TEST_F(TwoByTwoTest, AnotherModelsChainNeverMatches) {
  auto policy = MakePolicy();
  Holds("d1", 1, 120);
  Holds("p1", 1, 120);
  ReportDecode("d0", 0);
  ReportDecode("d1", 1);
  RouteRequest r = Request(1, 2048);
  r.hash_root = BlockKey{1, 1};
  auto d = policy->Select(r);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->decode_id, "d0");
  EXPECT_EQ(d->decode_cached_tokens, 0);
}

TEST_F(TwoByTwoTest, AtMostNMinusOneTokensCount) {
  auto policy = MakePolicy(Routing::kCacheAware, /*max_uncached=*/0);
  Holds("d1", 1, 64);
  Holds("p1", 1, 64);
  // A prompt of exactly 64 blocks: the last token is always computed, so at
  // most 63 blocks are reusable.
  auto d = policy->Select(Request(1, 1024));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->prefill_cached_tokens, 1008);
  EXPECT_EQ(d->decode_cached_tokens, 1008);
}

TEST(CachePolicyOptionsTest, BadOptionsAreRejected) {
  WorkerTable table(WorkerTable::Options{});
  CedRoutingPolicy::Options o;
  o.local_prefill_max_uncached_tokens = -1;
  EXPECT_FALSE(CedRoutingPolicy::Create(&table, o).ok());
  o = CedRoutingPolicy::Options();
  o.decode_cache_weight = -1;
  EXPECT_FALSE(CedRoutingPolicy::Create(&table, o).ok());
  o = CedRoutingPolicy::Options();
  o.sessions.max_sessions = 0;
  EXPECT_FALSE(CedRoutingPolicy::Create(&table, o).ok());
}

}  // namespace
}  // namespace ced::router
