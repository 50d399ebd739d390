// Host and disk tiers on their own and chained by KvTiers: LRU by bytes,
// spill from host to disk, blocks that survive a restart (disk), and every
// block that fails its checks dropped, counted and never served.
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <fstream>

#include "engine/kv/disk_tier.h"
#include "engine/kv/host_tier.h"
#include "engine/kv/kv_tiers.h"
#include "gtest/gtest.h"
#include "tests/kv_tiers/tier_test_util.h"

namespace ced::testing {
namespace {

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/kv_tiers_" + std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  return d;
}

TEST(HostTierTest, LruByBytesAndEvictionsGoDown) {
  const KvBlockLayout l = TestLayout(1000);
  const size_t block = kKvBlockHeaderBytes + 1000;
  std::vector<BlockHash> evicted;
  HostBlockStore::Options o;
  o.capacity_bytes = static_cast<int64_t>(3 * block);
  o.on_evict = [&](const KvStoredBlock& b) { evicted.push_back(b.hash); };
  HostBlockStore host(o);
  const auto hs = Chain(l, 5, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[i], i)}).ok());
  EXPECT_EQ(host.resident_blocks(), 3);
  EXPECT_EQ(host.resident_bytes(), static_cast<int64_t>(3 * block));
  EXPECT_EQ(host.GetPrefix(l.root, hs).size(), 3u);  // touches 0, 1, 2 in order
  ASSERT_EQ(host.GetPrefix(l.root, {hs[0]}).size(), 1u);  // 0 most recent: 1 is the oldest
  ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[3], 3)}).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], hs[1]);
  EXPECT_EQ(host.Contains(l.root, hs), 1) << "0 held, 1 gone";
  EXPECT_EQ(host.Contains(l.root, {hs[2], hs[3], hs[0]}), 3);
  EXPECT_EQ(host.resident_blocks(), 3);
  // Bigger than the whole tier: dropped, counted, nothing evicted.
  KvBlockLayout big = TestLayout(4 * block);
  ASSERT_TRUE(host.Put(l.root, {Stored(big, hs[4], 4)}).ok());
  EXPECT_EQ(host.counters().dropped_writes.load(), 1);
  EXPECT_EQ(evicted.size(), 1u);
  host.Erase(l.root, hs[0]);
  EXPECT_EQ(host.Contains(l.root, {hs[0]}), 0);
}

TEST(DiskTierTest, LruFilesAndBlocksOutliveTheStore) {
  const KvBlockLayout l = TestLayout(1000);
  const size_t block = kKvBlockHeaderBytes + 1000;
  const std::string dir = TempDir("lru");
  const auto hs = Chain(l, 4, 2);
  {
    auto disk = DiskBlockStore::Create({dir, static_cast<int64_t>(3 * block)});
    ASSERT_TRUE(disk.ok()) << disk.status();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*disk)->Put(l.root, {Stored(l, hs[i], i)}).ok());
    EXPECT_EQ((*disk)->resident_blocks(), 3);
    EXPECT_FALSE(std::filesystem::exists((*disk)->PathOf(hs[0]))) << "the oldest file is removed";
    EXPECT_EQ((*disk)->Contains(l.root, {hs[1], hs[2], hs[3]}), 3);
    const auto got = (*disk)->GetPrefix(l.root, {hs[1], hs[2]});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(*Stored(l, hs[2], 2).bytes, got[1]);
    EXPECT_EQ((*disk)->counters().written_bytes.load(), static_cast<int64_t>(4 * block));
  }
  // A new process indexes what is there.
  auto again = DiskBlockStore::Create({dir, static_cast<int64_t>(3 * block)});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->resident_blocks(), 3);
  EXPECT_EQ((*again)->resident_bytes(), static_cast<int64_t>(3 * block));
  EXPECT_EQ((*again)->GetPrefix(l.root, {hs[3]}).size(), 1u);
  // A smaller capacity trims the oldest at start.
  auto small = DiskBlockStore::Create({dir, static_cast<int64_t>(block)});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->resident_blocks(), 1);
  EXPECT_FALSE(DiskBlockStore::Create({"", 100}).ok());
  EXPECT_FALSE(DiskBlockStore::Create({dir, 0}).ok());
  std::filesystem::remove_all(dir);
}

// Blocks are content-addressed: a tier that holds a hash already keeps its
// copy (no second write: a session's prefix is evicted from the hot cache
// again every turn) and only marks it used.
TEST(HostTierTest, AHeldBlockIsKeptAndMarkedUsed) {
  const KvBlockLayout l = TestLayout(1000);
  const size_t block = kKvBlockHeaderBytes + 1000;
  std::vector<BlockHash> evicted;
  HostBlockStore::Options o;
  o.capacity_bytes = static_cast<int64_t>(2 * block);
  o.on_evict = [&](const KvStoredBlock& b) { evicted.push_back(b.hash); };
  HostBlockStore host(o);
  const auto hs = Chain(l, 3, 11);
  ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[0], 0)}).ok());
  ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[1], 1)}).ok());
  ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[0], 0)}).ok());  // 0 again: now the newest
  EXPECT_EQ(host.counters().written_blocks.load(), 2);
  EXPECT_EQ(host.resident_blocks(), 2);
  ASSERT_TRUE(host.Put(l.root, {Stored(l, hs[2], 2)}).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], hs[1]) << "1 was the least recently used";
}

TEST(DiskTierTest, AHeldBlockIsNotWrittenAgain) {
  const KvBlockLayout l = TestLayout(1000);
  const size_t block = kKvBlockHeaderBytes + 1000;
  const std::string dir = TempDir("held");
  auto disk = DiskBlockStore::Create({dir, static_cast<int64_t>(2 * block)});
  ASSERT_TRUE(disk.ok()) << disk.status();
  const auto hs = Chain(l, 3, 12);
  ASSERT_TRUE((*disk)->Put(l.root, {Stored(l, hs[0], 0)}).ok());
  ASSERT_TRUE((*disk)->Put(l.root, {Stored(l, hs[1], 1)}).ok());
  const auto written = std::filesystem::last_write_time((*disk)->PathOf(hs[0]));
  ASSERT_TRUE((*disk)->Put(l.root, {Stored(l, hs[0], 0)}).ok());
  EXPECT_EQ((*disk)->counters().written_blocks.load(), 2);
  EXPECT_EQ(std::filesystem::last_write_time((*disk)->PathOf(hs[0])), written)
      << "the file was not rewritten";
  ASSERT_TRUE((*disk)->Put(l.root, {Stored(l, hs[2], 2)}).ok());
  EXPECT_EQ((*disk)->Contains(l.root, {hs[0]}), 1) << "0 was marked used: 1 went";
  EXPECT_EQ((*disk)->Contains(l.root, {hs[1]}), 0);
  const auto back = (*disk)->GetPrefix(l.root, {hs[0]});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0], *Stored(l, hs[0], 0).bytes);
  std::filesystem::remove_all(dir);
}

KvTiersOptions ChainOptions(const KvBlockLayout& l, int64_t host_blocks, const std::string& dir,
                            int64_t disk_blocks) {
  KvTiersOptions o;
  o.layout = l;
  const int64_t block = static_cast<int64_t>(kKvBlockHeaderBytes + l.payload_bytes);
  o.host_bytes = host_blocks * block;
  o.disk_dir = dir;
  o.disk_bytes = disk_blocks * block;
  return o;
}

TEST(KvTiersTest, SpillsToHostThenDiskAndFetchesTheLongestPrefix) {
  const KvBlockLayout l = TestLayout(1000);
  const std::string dir = TempDir("chain");
  auto tiers = KvTiers::Create(ChainOptions(l, 2, dir, 10));
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  KvTiers& t = **tiers;
  EXPECT_TRUE(t.spills());
  const auto hs = Chain(l, 6, 3);
  for (int i = 0; i < 5; ++i) t.Spill(hs[i], Payload(l.payload_bytes, i));
  t.Flush();
  const auto stats = t.stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].tier, "host");
  EXPECT_EQ(stats[0].resident_blocks, 2);  // 3, 4
  EXPECT_EQ(stats[1].tier, "disk");
  EXPECT_EQ(stats[1].resident_blocks, 3);  // 0, 1, 2 went down
  const auto got = t.FetchPrefix(hs);  // 0..4 found across both tiers, 5 never stored
  ASSERT_EQ(got.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], Payload(l.payload_bytes, i)) << i;
  const auto after = t.stats();
  EXPECT_EQ(after[0].hit_blocks + after[1].hit_blocks, 5);
  EXPECT_EQ(after[1].hit_blocks, 3);
  EXPECT_EQ(after[1].miss_blocks, 1) << "block 5, asked of both tiers";
  // Garbage in a wrong-length payload is not accepted into the tiers.
  t.Spill(hs[5], "short");
  t.Flush();
  EXPECT_EQ(t.FetchPrefix({hs[5]}).size(), 0u);
  std::filesystem::remove_all(dir);
}

// The read that loads the hot cache: each checked payload handed over in
// order from whichever tier holds it (queued spill, host, disk, shared), and
// a sink that takes no more (no room in the cache) ends the run there
// without counting the refused block as served.
TEST(KvTiersTest, FetchIntoHandsEachPayloadOverAndStopsWhenRefused) {
  const KvBlockLayout l = TestLayout(1000);
  const std::string dir = TempDir("into");
  auto tiers = KvTiers::Create(ChainOptions(l, 2, dir, 10));
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  KvTiers& t = **tiers;
  const auto hs = Chain(l, 6, 4);
  for (int i = 0; i < 5; ++i) t.Spill(hs[i], Payload(l.payload_bytes, i));
  t.Flush();
  std::vector<std::string> got;
  std::vector<size_t> order;
  const auto keep = [&](size_t i, const uint8_t* p) {
    order.push_back(i);
    got.emplace_back(reinterpret_cast<const char*>(p), l.payload_bytes);
    return true;
  };
  EXPECT_EQ(t.FetchPrefixInto(hs, keep), 5u);  // 0-2 from disk, 3-4 from host
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(got[i], Payload(l.payload_bytes, static_cast<int>(i))) << i;
  }
  const auto before = t.stats();
  const int64_t hits = before[0].hit_blocks + before[1].hit_blocks;
  EXPECT_EQ(hits, 5);
  // Room for two blocks only: the third is refused, and not counted.
  int room = 2;
  const size_t taken = t.FetchPrefixInto(hs, [&](size_t, const uint8_t*) { return room-- > 0; });
  EXPECT_EQ(taken, 2u);
  const auto after = t.stats();
  EXPECT_EQ(after[0].hit_blocks + after[1].hit_blocks, hits + 2);
  EXPECT_EQ(after[0].miss_blocks + after[1].miss_blocks,
            before[0].miss_blocks + before[1].miss_blocks + 3)
      << "blocks 0-2 are on disk: the host tier missed each, the disk none";
  // The same run through FetchPrefix (copies).
  const auto copies = t.FetchPrefix(hs);
  ASSERT_EQ(copies.size(), 5u);
  EXPECT_EQ(copies[4], Payload(l.payload_bytes, 4));
  std::filesystem::remove_all(dir);
}

// The buffers the spill and write-behind paths copy into are recycled: one
// whose last reference is dropped is handed out again (already mapped), the
// free list stays within its bound, and a buffer may outlive the pool.
TEST(KvBlockBuffersTest, ReleasedBuffersAreHandedOutAgainUpToTheBound) {
  KvBlockBuffers pool(4096, 2);
  std::shared_ptr<std::string> a = pool.Get();
  ASSERT_EQ(a->size(), 4096u);
  const char* where = a->data();
  a.reset();
  EXPECT_EQ(pool.free_buffers(), 1u);
  std::shared_ptr<std::string> b = pool.Get();
  EXPECT_EQ(b->data(), where) << "the released buffer, not a new one";
  EXPECT_EQ(pool.made(), 1u);
  std::vector<std::shared_ptr<std::string>> many;
  for (int i = 0; i < 4; ++i) many.push_back(pool.Get());
  EXPECT_EQ(pool.made(), 5u);
  many.clear();
  EXPECT_EQ(pool.free_buffers(), 2u) << "the rest were freed";
  std::shared_ptr<std::string> survivor;
  {
    KvBlockBuffers gone(64, 1);
    survivor = gone.Get();
  }
  survivor->assign(64, 'x');
  survivor.reset();  // returned to the state the deleter keeps alive
}

// Spilled blocks go host -> disk in the very buffer the caller filled (the
// header written in place), and come back to the pool when the host tier
// pushes them down: a long run of spills makes only as many buffers as are
// held at once, and every block still reads back exactly.
TEST(KvTiersTest, SpillBuffersAreRecycledThroughTheHostTier) {
  const KvBlockLayout l = TestLayout(1000);
  const std::string dir = TempDir("recycle");
  auto tiers = KvTiers::Create(ChainOptions(l, 2, dir, 40));
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  KvTiers& t = **tiers;
  const auto hs = Chain(l, 30, 9);
  for (int i = 0; i < 30; ++i) {
    std::shared_ptr<std::string> b = t.SpillBuffer();
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(b->size(), kKvBlockHeaderBytes + l.payload_bytes);
    const std::string p = Payload(l.payload_bytes, i);
    std::memcpy(b->data() + kKvBlockHeaderBytes, p.data(), p.size());
    t.Spill(hs[i], std::move(b));
    t.Flush();
  }
  EXPECT_LE(t.buffers().made(), 4u) << "2 held by the host tier, the rest reused";
  const auto got = t.FetchPrefix(hs);
  ASSERT_EQ(got.size(), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(got[i], Payload(l.payload_bytes, i)) << i;
  const auto stats = t.stats();
  EXPECT_EQ(stats[0].resident_blocks, 2);
  EXPECT_EQ(stats[1].resident_blocks, 28);
  // A buffer of the wrong size is not queued.
  t.Spill(hs[0], std::make_shared<std::string>(10, 'x'));
  t.Flush();
  EXPECT_EQ(t.stats()[0].written_blocks, stats[0].written_blocks);
  std::filesystem::remove_all(dir);
}

// A full write queue refuses a spill buffer up front (the caller skips the
// copy) and counts the dropped write.
TEST(KvTiersTest, SpillBufferIsRefusedWhenTheQueueIsFull) {
  const KvBlockLayout l = TestLayout(1000);
  KvTiersOptions o;
  o.layout = l;
  o.host_bytes = 100 * static_cast<int64_t>(kKvBlockHeaderBytes + l.payload_bytes);
  o.write_queue_bytes = 1;  // less than one block: every spill is refused
  auto tiers = KvTiers::Create(o);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_EQ((*tiers)->SpillBuffer(), nullptr);
  EXPECT_EQ((*tiers)->stats()[0].dropped_writes, 1);
}

TEST(KvTiersTest, CorruptOrForeignBlocksAreDroppedAndCounted) {
  const KvBlockLayout l = TestLayout(1000);
  const std::string dir = TempDir("corrupt");
  const auto hs = Chain(l, 3, 4);
  {
    auto tiers = KvTiers::Create(ChainOptions(l, 0, dir, 10));  // disk only
    ASSERT_TRUE(tiers.ok());
    for (int i = 0; i < 3; ++i) (*tiers)->Spill(hs[i], Payload(l.payload_bytes, i));
    (*tiers)->Flush();
  }
  // Flip one payload byte of block 1 on disk.
  auto disk = DiskBlockStore::Create({dir, 1 << 20});
  ASSERT_TRUE(disk.ok());
  {
    std::fstream f((*disk)->PathOf(hs[1]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kKvBlockHeaderBytes + 77);
    f.put('\x5a');
  }
  disk->reset();
  {
    auto tiers = KvTiers::Create(ChainOptions(l, 0, dir, 10));
    ASSERT_TRUE(tiers.ok());
    const auto got = (*tiers)->FetchPrefix(hs);
    ASSERT_EQ(got.size(), 1u) << "block 1 fails its checksum: the run ends before it";
    const auto s = (*tiers)->stats()[0];
    EXPECT_EQ(s.rejected.at("checksum"), 1);
    EXPECT_EQ(s.resident_blocks, 2) << "the corrupt block is dropped from the tier";
    EXPECT_EQ((*tiers)->FetchPrefix(hs).size(), 1u);
  }
  {
    // Another model (or format, or block size) reading the same directory.
    KvBlockLayout other = l;
    other.root = RootBlockHash("another-model", 16);
    auto tiers = KvTiers::Create(ChainOptions(other, 0, dir, 10));
    ASSERT_TRUE(tiers.ok());
    EXPECT_EQ((*tiers)->FetchPrefix({hs[0]}).size(), 0u);
    EXPECT_EQ((*tiers)->stats()[0].rejected.at("model"), 1);
  }
  {
    KvBlockLayout fp8 = l;
    fp8.format = KvFormat::kFP8E4M3;
    auto tiers = KvTiers::Create(ChainOptions(fp8, 0, dir, 10));
    ASSERT_TRUE(tiers.ok());
    EXPECT_EQ((*tiers)->FetchPrefix({hs[2]}).size(), 0u);
    EXPECT_EQ((*tiers)->stats()[0].rejected.at("format"), 1);
  }
  std::filesystem::remove_all(dir);
}

// A shared store whose Put waits for a gate: holds the writer thread.
class GatedStore final : public KvBlockStore {
 public:
  std::string_view name() const override { return "gated"; }
  absl::Status Put(const BlockHash&, absl::Span<const KvStoredBlock> blocks) override {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    puts_ += static_cast<int>(blocks.size());
    return absl::OkStatus();
  }
  std::vector<std::string> GetPrefix(const BlockHash&, absl::Span<const BlockHash>) override {
    return {};
  }
  int Contains(const BlockHash&, absl::Span<const BlockHash>) override { return 0; }
  void Erase(const BlockHash&, const BlockHash&) override {}
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, open_ = false;
  int puts_ = 0;
};

TEST(KvTiersTest, AFullWriteQueueDropsAndCounts) {
  const KvBlockLayout l = TestLayout(1000);
  auto gated = std::make_shared<GatedStore>();
  KvTiersOptions o = ChainOptions(l, 100, "", 0);
  o.shared = gated;
  o.write_queue_bytes = 2500;  // two payloads
  auto tiers = KvTiers::Create(o);
  ASSERT_TRUE(tiers.ok());
  const auto hs = Chain(l, 12, 5);
  (*tiers)->WriteShared(hs[0], Payload(l.payload_bytes, 0));
  gated->WaitEntered();  // the writer holds block 0 (its bytes still count)
  for (int i = 1; i < 11; ++i) (*tiers)->WriteShared(hs[i], Payload(l.payload_bytes, i));
  gated->Open();
  (*tiers)->Flush();
  EXPECT_EQ(gated->puts(), 2);
  EXPECT_EQ(gated->stats().dropped_writes, 9);
  EXPECT_FALSE((*tiers)->WantsShared(hs[0])) << "written: not written again";
  EXPECT_TRUE((*tiers)->WantsShared(hs[5])) << "dropped: may be written later";
}

TEST(KvTiersTest, QueuedSpillsAreServedBeforeTheyAreWritten) {
  const KvBlockLayout l = TestLayout(1000);
  auto gated = std::make_shared<GatedStore>();
  KvTiersOptions o = ChainOptions(l, 100, "", 0);
  o.shared = gated;
  auto tiers = KvTiers::Create(o);
  ASSERT_TRUE(tiers.ok());
  const auto hs = Chain(l, 3, 6);
  (*tiers)->WriteShared(hs[2], Payload(l.payload_bytes, 2));
  gated->WaitEntered();  // the writer is busy: spills wait in the queue
  (*tiers)->Spill(hs[0], Payload(l.payload_bytes, 0));
  (*tiers)->Spill(hs[1], Payload(l.payload_bytes, 1));
  const auto got = (*tiers)->FetchPrefix(hs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1], Payload(l.payload_bytes, 1));
  gated->Open();
  (*tiers)->Flush();
  EXPECT_EQ((*tiers)->stats()[0].resident_blocks, 2);
}

}  // namespace
}  // namespace ced::testing
