// PrefixCache's event log (routing reports, DESIGN.md 1.6): publishes and
// evictions numbered in order, deltas from a sequence number, and a full list
// when the log no longer reaches back that far.
#include "engine/kv/prefix_cache.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

BlockHash H(uint64_t i) { return BlockHash{i, ~i}; }

TEST(PrefixCacheEventsTest, DeltasThenFullListWhenTheLogOverflows) {
  BlockAllocator alloc(4);
  PrefixCache cache(&alloc);
  cache.EnableEventLog(3);
  PrefixCacheEventLog log = cache.EventsSince(0, 100);  // 0: always a full list
  EXPECT_FALSE(log.complete);
  EXPECT_TRUE(log.published.empty());
  const uint64_t start = log.end_seq;

  auto a = cache.Allocate(2);
  ASSERT_TRUE(a.ok());
  cache.Publish((*a)[0], H(1));
  cache.Publish((*a)[1], H(2));
  cache.Publish((*a)[1], H(3));  // already published: no event
  log = cache.EventsSince(start, 100);
  ASSERT_TRUE(log.complete);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].hash, H(1));
  EXPECT_TRUE(log.events[0].published);
  EXPECT_EQ(log.end_seq, start + 2);
  // Capped: end_seq stops after the last event returned.
  log = cache.EventsSince(start, 1);
  ASSERT_TRUE(log.complete);
  EXPECT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.end_seq, start + 1);
  // Nothing new.
  log = cache.EventsSince(start + 2, 100);
  EXPECT_TRUE(log.complete);
  EXPECT_TRUE(log.events.empty());

  // Evictions are events too.
  ASSERT_TRUE(cache.Release(*a).ok());
  EXPECT_EQ(cache.EvictAll(), 2);
  log = cache.EventsSince(start + 2, 100);
  ASSERT_TRUE(log.complete);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_FALSE(log.events[0].published);
  EXPECT_EQ(log.events[0].hash, H(2));  // a released chain goes from its tail
  EXPECT_EQ(log.events[1].hash, H(1));

  // Four events since `start`, the log holds three: a full list instead.
  auto b = cache.Allocate(1);
  ASSERT_TRUE(b.ok());
  cache.Publish((*b)[0], H(9));
  log = cache.EventsSince(start, 100);
  EXPECT_FALSE(log.complete);
  ASSERT_EQ(log.published.size(), 1u);
  EXPECT_EQ(log.published[0], H(9));
  EXPECT_EQ(log.end_seq, start + 5);
  // A number from the future (another cache, a restart) gets the full list.
  EXPECT_FALSE(cache.EventsSince(start + 100, 100).complete);
}

TEST(PrefixCacheEventsTest, WithoutALogEveryChangeAsksForAFullList) {
  BlockAllocator alloc(2);
  PrefixCache cache(&alloc);
  const uint64_t start = cache.EventsSince(0, 10).end_seq;
  EXPECT_TRUE(cache.EventsSince(start, 10).complete);
  auto a = cache.Allocate(1);
  ASSERT_TRUE(a.ok());
  cache.Publish((*a)[0], H(1));
  const PrefixCacheEventLog log = cache.EventsSince(start, 10);
  EXPECT_FALSE(log.complete);
  EXPECT_EQ(log.published.size(), 1u);
}

}  // namespace
}  // namespace ced
