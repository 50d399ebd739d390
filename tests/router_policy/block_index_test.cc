// BlockIndex: the router's view of which prefix-cache blocks each worker
// holds: full and delta reports, resync on a gap, predictions, chain roots,
// bounded memory. SessionTable: bounded, expiring sticky placements.
#include "services/router_policy/block_index.h"

#include <gtest/gtest.h>

#include <vector>

#include "services/router_policy/session_table.h"

namespace ced::router {
namespace {

const BlockKey kRoot{7, 7};

BlockKey K(uint64_t i) { return BlockKey{i, i * 31 + 1}; }

std::vector<BlockKey> Chain(uint64_t from, uint64_t n) {
  std::vector<BlockKey> out;
  for (uint64_t i = 0; i < n; ++i) out.push_back(K(from + i));
  return out;
}

BlockReport Full(uint64_t end, std::vector<BlockKey> added) {
  BlockReport r;
  r.full = true;
  r.end_seq = end;
  r.added = std::move(added);
  return r;
}

BlockReport Delta(uint64_t base, uint64_t end, std::vector<BlockKey> added,
                  std::vector<BlockKey> evicted = {}) {
  BlockReport r;
  r.base_seq = base;
  r.end_seq = end;
  r.added = std::move(added);
  r.evicted = std::move(evicted);
  return r;
}

TEST(BlockIndexTest, FullThenDeltasMatchTheLongestPrefix) {
  BlockIndex index(BlockIndex::Options{});
  index.ResetWorker("w", kRoot, 16);
  const std::vector<BlockKey> chain = Chain(1, 8);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, chain), 0);
  // A delta before the first full report does not fit: resync.
  EXPECT_EQ(*index.Apply("w", Delta(5, 6, {K(1)})), 0u);
  EXPECT_EQ(*index.Apply("w", Full(10, Chain(1, 3))), 10u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, chain), 3);
  EXPECT_EQ(*index.Apply("w", Delta(10, 12, {K(4), K(5)})), 12u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, chain), 5);
  // Block 2 evicted: the run stops before it.
  EXPECT_EQ(*index.Apply("w", Delta(12, 13, {}, {K(2)})), 13u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, chain), 1);
  EXPECT_EQ(index.WorkerBlocks("w"), 4);
}

TEST(BlockIndexTest, OverlapsApplyGapsAskForResyncAndOldDuplicatesAreIgnored) {
  BlockIndex index(BlockIndex::Options{});
  index.ResetWorker("w", kRoot, 16);
  ASSERT_EQ(*index.Apply("w", Full(10, {})), 10u);
  ASSERT_EQ(*index.Apply("w", Delta(10, 12, {K(1), K(2)})), 12u);
  // The worker missed our answer and resends from 10 with more: the net
  // effect over the overlap is the same.
  EXPECT_EQ(*index.Apply("w", Delta(10, 14, {K(1), K(3)}, {K(2)})), 14u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1, 3)), 1);
  // A late duplicate of an older report changes nothing.
  EXPECT_EQ(*index.Apply("w", Delta(10, 12, {K(1), K(2)})), 14u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1, 3)), 1);
  // Events 14..20 never arrived: resync, and the full report replaces all.
  EXPECT_EQ(*index.Apply("w", Delta(20, 21, {K(9)})), 0u);
  EXPECT_EQ(*index.Apply("w", Full(30, {K(9)})), 30u);
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1, 3)), 0);
  EXPECT_EQ(index.WorkerBlocks("w"), 1);
}

TEST(BlockIndexTest, UntrackedWorkersAndOtherChainsNeverMatch) {
  BlockIndex index(BlockIndex::Options{});
  EXPECT_TRUE(absl::IsNotFound(index.Apply("nobody", Full(1, {})).status()));
  index.ResetWorker("w", kRoot, 16);
  ASSERT_TRUE(index.Apply("w", Full(2, Chain(1, 4))).ok());
  EXPECT_EQ(index.MatchBlocks("w", BlockKey{8, 8}, 16, Chain(1, 4)), 0);  // another model
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 32, Chain(1, 4)), 0);           // another block size
  index.Predict("w", BlockKey{8, 8}, 16, Chain(100, 4));                  // ignored
  EXPECT_EQ(index.WorkerBlocks("w"), 4);
  // A worker without a prefix cache (block size 0) keeps nothing.
  index.ResetWorker("plain", BlockKey{}, 0);
  ASSERT_TRUE(index.Apply("plain", Full(5, Chain(1, 4))).ok());
  EXPECT_EQ(index.WorkerBlocks("plain"), 0);
  BlockKey root;
  int block_size = 0;
  EXPECT_FALSE(index.ChainOf("plain", &root, &block_size));
  ASSERT_TRUE(index.ChainOf("w", &root, &block_size));
  EXPECT_EQ(root, kRoot);
  EXPECT_EQ(block_size, 16);
  // Re-registration forgets; removal forgets.
  index.ResetWorker("w", kRoot, 16);
  EXPECT_EQ(index.WorkerBlocks("w"), 0);
  index.Predict("w", kRoot, 16, Chain(1, 2));
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1, 4)), 2);
  index.RemoveWorker("w");
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1, 4)), 0);
  EXPECT_EQ(index.TotalBlocks(), 0);
}

TEST(BlockIndexTest, MemoryIsBoundedAndKeepsTheRecentBlocks) {
  BlockIndex index(BlockIndex::Options{/*max_blocks_per_worker=*/64});
  index.ResetWorker("w", kRoot, 16);
  ASSERT_TRUE(index.Apply("w", Full(1, Chain(0, 1000))).ok());
  EXPECT_LE(index.WorkerBlocks("w"), 64);
  EXPECT_GE(index.WorkerBlocks("w"), 32);
  // The last 32 reported are all there.
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(1000 - 32, 32)), 32);
  for (uint64_t i = 0; i < 50; ++i) {
    index.Predict("w", kRoot, 16, Chain(5000 + 10 * i, 10));
    ASSERT_LE(index.WorkerBlocks("w"), 64);
  }
  EXPECT_EQ(index.MatchBlocks("w", kRoot, 16, Chain(5490, 10)), 10);
}

SessionPlacement Placed(const std::string& decode, int64_t prompt, absl::Time at) {
  SessionPlacement p;
  p.decode_id = decode;
  p.prefill_id = "p0";
  p.prompt_tokens = prompt;
  p.last_used = at;
  return p;
}

TEST(SessionTableTest, RemembersBoundedAndExpires) {
  SessionTable table(SessionTable::Options{/*max_sessions=*/4, absl::Minutes(1)});
  const absl::Time t0 = absl::FromUnixSeconds(100);
  EXPECT_FALSE(table.Find("s", t0).has_value());
  table.Record("s", Placed("d1", 100, t0));
  auto found = table.Find("s", t0 + absl::Seconds(59));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->decode_id, "d1");
  EXPECT_EQ(found->prompt_tokens, 100);
  EXPECT_FALSE(table.Find("s", t0 + absl::Seconds(61)).has_value());  // expired
  table.Record("s", Placed("d0", 200, t0));                           // replaced
  EXPECT_EQ(table.Find("s", t0)->decode_id, "d0");
  for (int i = 0; i < 100; ++i) {
    table.Record("x" + std::to_string(i), Placed("d0", 1, t0));
    ASSERT_LE(table.size(), 4);
  }
  EXPECT_TRUE(table.Find("x99", t0).has_value());
  EXPECT_FALSE(table.Find("x0", t0).has_value());
}

}  // namespace
}  // namespace ced::router
