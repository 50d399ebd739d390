// PrefixCache on its own: references, publishing, LRU eviction, hash chains.
#include "engine/kv/prefix_cache.h"

#include "gtest/gtest.h"

namespace ced {
namespace {

TEST(BlockHashTest, ChainDependsOnEveryTokenAndTheRoot) {
  const BlockHash r1 = RootBlockHash("model-a/bf16", 16), r2 = RootBlockHash("model-b/bf16", 16);
  EXPECT_NE(r1, r2);
  EXPECT_NE(r1, RootBlockHash("model-a/bf16", 32));
  std::vector<int32_t> t(48);
  for (int i = 0; i < 48; ++i) t[i] = i;
  const auto h1 = ChainBlockHashes(r1, 16, t);
  ASSERT_EQ(h1.size(), 3u);
  EXPECT_EQ(ChainBlockHashes(r1, 16, absl::MakeConstSpan(t).first(40)).size(), 2u);
  EXPECT_NE(ChainBlockHashes(r2, 16, t)[0], h1[0]);
  auto u = t;
  u[5] = 1000;  // block 0 changes: every later hash changes
  const auto h2 = ChainBlockHashes(r1, 16, u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(h1[i], h2[i]) << i;
  auto v = t;
  v[40] = 7;  // only block 2 changes
  const auto h3 = ChainBlockHashes(r1, 16, v);
  EXPECT_EQ(h1[0], h3[0]);
  EXPECT_EQ(h1[1], h3[1]);
  EXPECT_NE(h1[2], h3[2]);
  EXPECT_EQ(h1[0].Hex().size(), 32u);
}

BlockHash H(uint64_t i) { return BlockHash{i, ~i}; }

TEST(PrefixCacheUnitTest, PublishedBlocksAreSharedAndOutliveTheirUsers) {
  BlockAllocator alloc(8);
  PrefixCache cache(&alloc);
  auto a = cache.Allocate(3);
  ASSERT_TRUE(a.ok());
  cache.Publish((*a)[0], H(1));
  cache.Publish((*a)[1], H(2));
  EXPECT_EQ(cache.referenced_blocks(), 3);
  // Another user takes the first two by hash.
  const std::vector<BlockHash> chain = {H(1), H(2), H(3)};
  EXPECT_EQ(cache.Lookup(chain), 2);
  auto shared = cache.Acquire(chain, 10);
  EXPECT_EQ(shared, std::vector<int>({(*a)[0], (*a)[1]}));
  EXPECT_EQ(cache.Acquire(chain, 1).size(), 1u);  // capped
  ASSERT_TRUE(cache.Release({(*a)[0]}).ok());
  ASSERT_TRUE(cache.Release(*a).ok());
  EXPECT_EQ(cache.referenced_blocks(), 2);  // shared + the capped one's block 0
  ASSERT_TRUE(cache.Release(shared).ok());
  EXPECT_EQ(cache.referenced_blocks(), 0);
  // Published blocks stay cached; the private one went back to the pool.
  EXPECT_EQ(cache.stats().cached_blocks, 2);
  EXPECT_EQ(cache.stats().evictable_blocks, 2);
  EXPECT_EQ(alloc.num_free(), 6);
  EXPECT_EQ(cache.available_blocks(), 8);
  EXPECT_EQ(cache.Lookup(chain), 2);
  // Over-release is an error and changes nothing.
  EXPECT_FALSE(cache.Release({(*a)[2]}).ok());
}

TEST(PrefixCacheUnitTest, AllocationEvictsLeastRecentlyUsedFirst) {
  BlockAllocator alloc(4);
  PrefixCache cache(&alloc);
  auto a = cache.Allocate(4);
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 4; ++i) cache.Publish((*a)[i], H(10 + i));
  ASSERT_TRUE(cache.Release({(*a)[2]}).ok());
  ASSERT_TRUE(cache.Release({(*a)[0]}).ok());
  ASSERT_TRUE(cache.Release({(*a)[3]}).ok());
  EXPECT_EQ(cache.Allocate(2).status().code(), absl::StatusCode::kOk);  // evicts 2 then 0
  EXPECT_EQ(cache.stats().evicted_total, 2);
  EXPECT_EQ(cache.Lookup(std::vector<BlockHash>{H(12)}), 0);
  EXPECT_EQ(cache.Lookup(std::vector<BlockHash>{H(10)}), 0);
  EXPECT_EQ(cache.Lookup(std::vector<BlockHash>{H(13)}), 1);
  EXPECT_EQ(cache.Allocate(2).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.Lookup(std::vector<BlockHash>{H(13)}), 1);  // a failed allocation evicts nothing
}

// A released sequence is evicted from its tail: the blocks left still match
// from block 0 (a match cannot start past an evicted head).
TEST(PrefixCacheUnitTest, EvictionTakesAReleasedChainFromItsTail) {
  BlockAllocator alloc(4);
  PrefixCache cache(&alloc);
  auto a = cache.Allocate(4);
  ASSERT_TRUE(a.ok());
  const std::vector<BlockHash> chain = {H(20), H(21), H(22), H(23)};
  for (int i = 0; i < 4; ++i) cache.Publish((*a)[i], chain[i]);
  ASSERT_TRUE(cache.Release(*a).ok());
  EXPECT_EQ(cache.Lookup(chain), 4);
  auto b = cache.Allocate(1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(cache.Lookup(chain), 3);  // block 3 went, 0..2 still match
  auto c = cache.Allocate(2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cache.Lookup(chain), 1);
  EXPECT_EQ(cache.stats().evicted_total, 3);
}

TEST(PrefixCacheUnitTest, ADuplicateHashLeavesTheSecondBlockPrivate) {
  BlockAllocator alloc(4);
  PrefixCache cache(&alloc);
  auto a = cache.Allocate(2);
  ASSERT_TRUE(a.ok());
  cache.Publish((*a)[0], H(5));
  cache.Publish((*a)[1], H(5));  // computed twice by concurrent sequences
  EXPECT_EQ(cache.stats().cached_blocks, 1);
  ASSERT_TRUE(cache.Release(*a).ok());
  EXPECT_EQ(alloc.num_free(), 3);  // the duplicate went back to the pool
}

}  // namespace
}  // namespace ced
