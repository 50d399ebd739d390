// The Redis tier against a real redis-server (started here on a free port):
// URLs, the longest stored prefix in one round trip, AUTH, bad values dropped
// and counted, an engine resuming another engine's session through Redis,
// and Redis killed mid-run: requests still succeed (recomputed), quickly, and
// the error counter moves. Skipped without redis-server (failed under CI=true).
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/kv/kv_tiers.h"
#include "services/kv_store/local_redis.h"
#include "services/kv_store/redis_store.h"
#include "tests/common/missing_tool.h"
#include "tests/engine/test_util.h"
#include "tests/kv_tiers/tier_test_util.h"

namespace ced::testing {
namespace {

using services::LocalRedis;
using services::ParseRedisUrl;
using services::RedisBlockStore;
using services::RedisStoreOptions;

TEST(RedisUrlTest, ParsesAndRefuses) {
  auto a = ParseRedisUrl("redis://10.0.0.5:6380/2");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  EXPECT_TRUE(a->password.empty());
  auto b = ParseRedisUrl("redis://ced:p%40ss%3Aw@redis.ns.svc");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->user, "ced");
  EXPECT_EQ(b->password, "p@ss:w");
  EXPECT_EQ(b->host, "redis.ns.svc");
  EXPECT_EQ(b->port, 6379);
  auto c = ParseRedisUrl("redis://:secret@[::1]:7000");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 7000);
  EXPECT_TRUE(c->user.empty());
  EXPECT_EQ(c->password, "secret");
  EXPECT_TRUE(ParseRedisUrl("rediss://h:6379")->tls);  // redis_tls_test.cc
  EXPECT_FALSE(c->tls);
  for (const char* bad : {"http://h", "redis://", "redis://h:0", "redis://h:99999", "redis://h:x",
                          "redis://h/-1", "redis://user@h", "redis://a:%zz@h"}) {
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  }
  EXPECT_EQ(services::RedisBlockKey("ced:kv:", BlockHash{1, 2}, BlockHash{3, 4}),
            "ced:kv:00000000000000010000000000000002:00000000000000030000000000000004");
}

// A store whose peer hangs up while a pipelined write of many blocks is on
// its way: the write fails (an error, counted), and no SIGPIPE ends the
// process (the default action is kept here on purpose). No redis-server
// needed: the peer is a socket that accepts and closes.
TEST(RedisStoreTest, APeerThatHangsUpMidWriteIsAnErrorNotASignal) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGPIPE, &dfl, &before), 0);
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread peer([listener] {
    const int c = accept(listener, nullptr, nullptr);
    if (c >= 0) close(c);  // hangs up at once: the client's writes meet a reset
  });
  RedisStoreOptions o;
  o.host = "127.0.0.1";
  o.port = ntohs(addr.sin_port);
  o.keys_per_command = 32;  // one pipelined round of 12 MiB, far past the socket buffers
  o.io_timeout_ms = 2000;
  auto store = RedisBlockStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  const KvBlockLayout l = TestLayout(393216);
  const auto hs = Chain(l, 32, 81);
  std::vector<KvStoredBlock> blocks;
  for (int i = 0; i < 32; ++i) blocks.push_back(Stored(l, hs[i], i));
  EXPECT_FALSE((*store)->Put(l.root, blocks).ok());
  peer.join();
  EXPECT_GE((*store)->counters().errors.load(), 1);
  EXPECT_EQ((*store)->counters().written_blocks.load(), 0);
  close(listener);
  ASSERT_EQ(sigaction(SIGPIPE, &before, nullptr), 0);
}

class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (services::FindRedisServer().empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
    auto r = LocalRedis::Start(64);
    ASSERT_TRUE(r.ok()) << r.status();
    redis_ = std::move(*r);
  }
  std::shared_ptr<RedisBlockStore> Store(RedisStoreOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = redis_->port();
    auto s = RedisBlockStore::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  // A raw command on a fresh connection (the test acting as an operator).
  void Raw(const std::vector<std::string>& args) {
    redisContext* c = redisConnect("127.0.0.1", redis_->port());
    ASSERT_TRUE(c != nullptr && c->err == 0);
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    freeReplyObject(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    redisFree(c);
  }
  std::unique_ptr<LocalRedis> redis_;
};

TEST_F(RedisTest, StoresAndFetchesTheLongestPrefix) {
  auto store = Store();
  const KvBlockLayout l = TestLayout(5000);
  const auto hs = Chain(l, 6, 1);
  std::vector<KvStoredBlock> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(Stored(l, hs[i], i));
  ASSERT_TRUE(store->Put(l.root, blocks).ok());
  EXPECT_EQ(store->Contains(l.root, hs), 4);
  const auto got = store->GetPrefix(l.root, hs);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3], *blocks[3].bytes);
  EXPECT_EQ(store->GetPrefix(l.root, {hs[4], hs[0]}).size(), 0u);
  // Visiting: the same bytes in order, straight from the reply; a visitor
  // that refuses ends the run there.
  std::vector<std::string> seen;
  EXPECT_EQ(store->VisitPrefix(l.root, hs,
                               [&](size_t i, std::string_view b) {
                                 EXPECT_EQ(i, seen.size());
                                 seen.emplace_back(b);
                                 return i < 2;
                               }),
            2u);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2], *blocks[2].bytes);
  // Another model's chain never sees these keys.
  EXPECT_EQ(store->Contains(TestLayout(5000, "other").root, hs), 0);
  store->Erase(l.root, hs[1]);
  EXPECT_EQ(store->Contains(l.root, hs), 1);
  EXPECT_EQ(store->stats().errors, 0);
  EXPECT_EQ(store->stats().written_bytes, 4 * static_cast<int64_t>(kKvBlockHeaderBytes + 5000));
}

// A long prefix is read in MGETs of keys_per_command blocks, one after the
// other, up to the first missing block: the same blocks as one MGET. A write
// of many blocks goes in rounds of keys_per_command SETs: all of them land.
TEST_F(RedisTest, LongPrefixesAreReadInBatchesUpToTheFirstMissingBlock) {
  RedisStoreOptions o;
  o.keys_per_command = 3;
  auto store = Store(o);
  const KvBlockLayout l = TestLayout(4096);
  const auto hs = Chain(l, 12, 1);
  std::vector<KvStoredBlock> blocks;
  int64_t bytes = 0;
  for (int i = 0; i < 10; ++i) {
    blocks.push_back(Stored(l, hs[i], i));
    bytes += static_cast<int64_t>(blocks.back().bytes->size());
  }
  ASSERT_TRUE(store->Put(l.root, blocks).ok());  // rounds of 3 + 3 + 3 + 1
  EXPECT_EQ(store->stats().written_bytes, bytes);
  EXPECT_EQ(store->Contains(l.root, hs), 10);
  auto got = store->GetPrefix(l.root, hs);  // 10 stored of 12: batches 3 + 3 + 3 + 1(of 3)
  ASSERT_EQ(got.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got[i], *blocks[i].bytes) << i;
  store->Erase(l.root, hs[4]);  // a gap in the second batch ends the prefix there
  got = store->GetPrefix(l.root, hs);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(store->GetPrefix(l.root, absl::MakeConstSpan(hs).first(3)).size(), 3u);
  EXPECT_EQ(store->stats().errors, 0);
  o.keys_per_command = 0;
  o.host = "127.0.0.1";
  o.port = redis_->port();
  EXPECT_EQ(RedisBlockStore::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisTest, BadValuesAreDroppedCountedAndDeleted) {
  auto store = Store();
  KvTiersOptions o;
  o.layout = TestLayout(3000);
  o.shared = store;
  auto tiers = KvTiers::Create(o);
  ASSERT_TRUE(tiers.ok());
  const KvBlockLayout& l = o.layout;
  const auto hs = Chain(l, 3, 2);
  for (int i = 0; i < 3; ++i) (*tiers)->WriteShared(hs[i], Payload(l.payload_bytes, i));
  (*tiers)->Flush();
  ASSERT_EQ(store->Contains(l.root, hs), 3);
  // Someone overwrites block 1 with other bytes (a bug, an attack, a bit flip).
  std::string bad = *Stored(l, hs[1], 9).bytes;
  bad[kKvBlockHeaderBytes + 1] ^= 0x40;
  Raw({"SET", services::RedisBlockKey("ced:kv:", l.root, hs[1]), bad});
  const auto got = (*tiers)->FetchPrefix(hs);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(store->stats().rejected.at("checksum"), 1);
  EXPECT_EQ(store->Contains(l.root, hs), 1) << "the bad block is deleted";
  // Block 0 under block 2's key: the header names its own hash.
  Raw({"SET", services::RedisBlockKey("ced:kv:", l.root, hs[1]), *Stored(l, hs[0], 0).bytes});
  EXPECT_EQ((*tiers)->FetchPrefix(hs).size(), 1u);
  EXPECT_EQ(store->stats().rejected.at("key"), 1);
  Raw({"SET", services::RedisBlockKey("ced:kv:", l.root, hs[1]), "not a block"});
  EXPECT_EQ((*tiers)->FetchPrefix(hs).size(), 1u);
  EXPECT_EQ(store->stats().rejected.at("length"), 1);
}

// A running sequence's blocks reach Redis as soon as their K/V is final, not
// when it ends (what a migrated stream or a long turn resumes from): engine A
// prefills 2 blocks and decodes past the end of a third, all of generated
// tokens, and keeps the sequence; engine B finds all three in Redis and
// resumes from them (equal to the full forward). A's release then writes
// none of them again.
TEST_F(RedisTest, RunningSequenceWritesEachFinalBlockOnce) {
  EngineOptions o;
  o.kv_shared_store = Store();
  auto a = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(a.ok());
  const int bs = (*a)->cache_stats().block_size;
  const size_t block_bytes = kKvBlockHeaderBytes + Engine::GlobalRangeBytes((*a)->config(), 0, bs);
  const auto prompt = RandomPrompt(2 * bs, 53);
  const int steps = bs + 4;  // K/V of positions [0, 3 bs + 3): block 2 is generated tokens
  int cached_a = -1;
  auto seq = (*a)->CreateSequenceForPrompt(prompt, 2 * bs + steps, &cached_a);
  ASSERT_TRUE(seq.ok());
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  auto pre = (*a)->Prefill(*seq, prompt, po);
  ASSERT_TRUE(pre.ok());
  (*a)->FlushKvTiers();
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_blocks, 2) << "the prompt's blocks, at prefill";
  const GreedyRun run = DecodeGreedy(**a, *seq, std::move(pre->logits), steps);
  ASSERT_EQ(run.tokens.size(), static_cast<size_t>(steps));
  (*a)->FlushKvTiers();
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_blocks, 3) << "block 2, the sequence still running";
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_bytes, static_cast<int64_t>(3 * block_bytes));

  o.kv_shared_store = Store();  // B's own connection
  auto b = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(b.ok());
  std::vector<int32_t> resumed = prompt;
  resumed.insert(resumed.end(), run.tokens.begin(), run.tokens.end());
  int cached = -1;
  auto sb = (*b)->CreateSequenceForPrompt(resumed, static_cast<int>(resumed.size()) + 4, &cached);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(cached, 3 * bs) << "the prompt's blocks and the generated one, from Redis";
  EXPECT_EQ((*b)->kv_tier_stats()[0].hit_blocks, 3);
  auto preb = (*b)->Prefill(*sb, resumed, po);
  ASSERT_TRUE(preb.ok());
  const GreedyRun rb = DecodeGreedy(**b, *sb, std::move(preb->logits), 4);
  ASSERT_TRUE((*b)->ReleaseSequence(*sb).ok());
  ExpectMatchesFullForward(**b, resumed, rb, 1e-5);

  ASSERT_TRUE((*a)->ReleaseSequence(*seq).ok());
  (*a)->FlushKvTiers();
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_blocks, 3) << "the release wrote a block twice";
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_bytes, static_cast<int64_t>(3 * block_bytes));
}

// A decode worker whose prompt K/V comes from a prefill worker leaves the
// prompt's blocks to that worker (it computed them and writes them itself)
// and writes only the blocks of the tokens it generates.
TEST_F(RedisTest, BlocksLeftToThePeerAreNotWrittenAgain) {
  EngineOptions o;
  o.kv_shared_store = Store();
  auto a = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(a.ok());
  const int bs = (*a)->cache_stats().block_size;
  const auto prompt = RandomPrompt(2 * bs, 57);
  const int steps = bs + 4;
  int cached = -1;
  auto seq = (*a)->CreateSequenceForPrompt(prompt, 2 * bs + steps, &cached);
  ASSERT_TRUE(seq.ok());
  EXPECT_FALSE((*a)->LeaveSharedWritesToPeer(*seq, -1).ok());
  EXPECT_FALSE((*a)->LeaveSharedWritesToPeer(*seq + 1000, bs).ok()) << "no such sequence";
  ASSERT_TRUE((*a)->LeaveSharedWritesToPeer(*seq, 2 * bs).ok());
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  auto pre = (*a)->Prefill(*seq, prompt, po);
  ASSERT_TRUE(pre.ok());
  const GreedyRun run = DecodeGreedy(**a, *seq, std::move(pre->logits), steps);
  ASSERT_EQ(run.tokens.size(), static_cast<size_t>(steps));
  ASSERT_TRUE((*a)->ReleaseSequence(*seq).ok());
  (*a)->FlushKvTiers();
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_blocks, 1) << "block 2 only: 0 and 1 are the peer's";
}

// Redis evicts its least recently used keys (allkeys-lru): a prefix read
// from the hot cache must stay recent in Redis too, or its first blocks are
// evicted first and the whole prefix becomes unreadable from Redis.
TEST_F(RedisTest, APrefixServedFromTheHotCacheIsTouchedInRedis) {
  EngineOptions o;
  o.kv_shared_store = Store();
  auto e = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(e.ok());
  const int bs = (*e)->cache_stats().block_size;
  const auto p = RandomPrompt(2 * bs, 61), q = RandomPrompt(bs, 62);
  for (const auto& prompt : {p, q}) {
    int cached = -1;
    auto seq = (*e)->CreateSequenceForPrompt(prompt, static_cast<int>(prompt.size()) + 1, &cached);
    ASSERT_TRUE(seq.ok());
    ASSERT_TRUE((*e)->Prefill(*seq, prompt, PrefillOptions{}).ok());
    ASSERT_TRUE((*e)->ReleaseSequence(*seq).ok());
  }
  (*e)->FlushKvTiers();
  // Seconds since each stored block was last used, as Redis counts them.
  auto idle = [&] {
    redisContext* c = redisConnect("127.0.0.1", redis_->port());
    EXPECT_TRUE(c != nullptr && c->err == 0);
    std::vector<long long> out;
    auto* keys = static_cast<redisReply*>(redisCommand(c, "KEYS ced:kv:*"));
    for (size_t i = 0; keys != nullptr && i < keys->elements; ++i) {
      auto* r = static_cast<redisReply*>(
          redisCommand(c, "OBJECT IDLETIME %b", keys->element[i]->str, keys->element[i]->len));
      EXPECT_EQ(r->type, REDIS_REPLY_INTEGER) << (r->type == REDIS_REPLY_ERROR ? r->str : "");
      out.push_back(r->integer);
      freeReplyObject(r);
    }
    freeReplyObject(keys);
    redisFree(c);
    std::sort(out.begin(), out.end());
    return out;
  };
  ASSERT_EQ(idle().size(), 3u) << "p's two blocks and q's one";
  // Redis counts idle time in whole seconds of a clock its timer advances:
  // margins of two seconds on either side keep a loaded machine's delays out.
  std::this_thread::sleep_for(std::chrono::milliseconds(5100));
  std::vector<int32_t> resumed = p;
  resumed.push_back(7);
  int cached = -1;
  auto seq = (*e)->CreateSequenceForPrompt(resumed, static_cast<int>(resumed.size()) + 1, &cached);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(cached, 2 * bs) << "p's blocks from the hot cache";
  EXPECT_EQ((*e)->kv_tier_stats()[0].hit_blocks, 0) << "nothing was read from Redis";
  (*e)->FlushKvTiers();
  const auto after = idle();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_LE(after[1], 2) << "both of p's blocks were touched";
  EXPECT_GE(after[2], 4) << "q's block was not";
  EXPECT_EQ((*e)->kv_tier_stats()[0].errors, 0);
  ASSERT_TRUE((*e)->ReleaseSequence(*seq).ok());
}

TEST(RedisAuthTest, PasswordFromOptionsAndWrongPasswordDegrades) {
  if (services::FindRedisServer().empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
  auto redis = LocalRedis::Start(16, "s3cret");
  ASSERT_TRUE(redis.ok()) << redis.status();
  auto opts = ParseRedisUrl("redis://:s3cret@127.0.0.1:" + std::to_string((*redis)->port()));
  ASSERT_TRUE(opts.ok());
  auto good = RedisBlockStore::Create(*opts);
  ASSERT_TRUE(good.ok());
  const KvBlockLayout l = TestLayout(100);
  const auto hs = Chain(l, 1, 3);
  EXPECT_TRUE((*good)->Put(l.root, {Stored(l, hs[0], 0)}).ok());
  EXPECT_EQ((*good)->Contains(l.root, hs), 1);
  opts->password = "wrong";
  auto bad = RedisBlockStore::Create(*opts);
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE((*bad)->Put(l.root, {Stored(l, hs[0], 0)}).ok());
  EXPECT_EQ((*bad)->Contains(l.root, hs), 0);
  EXPECT_GE((*bad)->stats().errors, 2);
}

// Engine A finishes a session (written to Redis behind the request); engine
// B, a fresh process in all but name, resumes it: P from Redis, tokens equal
// the full forward. Then Redis dies: B and a new engine C still answer every
// request (recomputing), each within the store's timeouts, and count errors.
TEST_F(RedisTest, EnginesResumeThroughRedisAndSurviveItsDeath) {
  RedisStoreOptions ro;
  ro.connect_timeout_ms = 200;
  ro.io_timeout_ms = 200;
  ro.retry_after_ms = 200;
  EngineOptions o;
  o.kv_shared_store = Store(ro);
  auto a = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(a.ok());
  const auto turn1 = RandomPrompt(180, 51);
  const int bs = (*a)->cache_stats().block_size;
  GreedyRun r1;
  {
    int cached = -1;
    auto seq = (*a)->CreateSequenceForPrompt(turn1, 200, &cached);
    ASSERT_TRUE(seq.ok());
    PrefillOptions po;
    po.replay = ReplayMode::kExact;
    ASSERT_TRUE((*a)->Prefill(*seq, turn1, po).ok());
    ASSERT_TRUE((*a)->ReleaseSequence(*seq).ok());
    (*a)->FlushKvTiers();
  }
  EXPECT_EQ((*a)->kv_tier_stats()[0].written_blocks, 180 / bs);

  o.kv_shared_store = Store(ro);  // B's own connection
  auto b = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(b.ok());
  std::vector<int32_t> turn2 = turn1;
  const auto more = RandomPrompt(25, 52);
  turn2.insert(turn2.end(), more.begin(), more.end());
  EXPECT_EQ((*b)->CachedPrefixTokens(turn2), 0) << "B's hot cache is empty";
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = 64;
  GreedyRun rb;
  {
    int cached = -1;
    auto seq = (*b)->CreateSequenceForPrompt(turn2, static_cast<int>(turn2.size()) + 8, &cached);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(cached, 180 / bs * bs) << "P from Redis";
    auto pre = (*b)->Prefill(*seq, turn2, po);
    ASSERT_TRUE(pre.ok());
    std::vector<float> logits = pre->logits;
    for (int i = 0; i < 8; ++i) {
      const int32_t tok = Argmax(logits.data(), (*b)->config().vocab_size);
      rb.tokens.push_back(tok);
      rb.logits.push_back(logits);
      if (i == 7) break;
      DecodeInput in{*seq, tok};
      auto next = (*b)->Decode(absl::MakeConstSpan(&in, 1));
      ASSERT_TRUE(next.ok());
      logits = std::move(*next);
    }
    ASSERT_TRUE((*b)->ReleaseSequence(*seq).ok());
  }
  ExpectMatchesFullForward(**b, turn2, rb, 1e-5);

  // Redis dies mid-run.
  kill(redis_->pid(), SIGKILL);
  redis_->Stop();
  o.kv_shared_store = Store(ro);
  auto c = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(c.ok());
  for (Engine* e : {b->get(), c->get()}) {
    for (int k = 0; k < 3; ++k) {
      auto prompt = RandomPrompt(120 + k, 60 + k);  // new sessions: full misses
      const auto t0 = std::chrono::steady_clock::now();
      int cached = -1;
      auto seq = e->CreateSequenceForPrompt(prompt, 130, &cached);
      ASSERT_TRUE(seq.ok()) << seq.status();
      EXPECT_EQ(cached, 0);
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(ms, 2000) << "a lookup waits at most the store's timeouts";
      ASSERT_TRUE(e->Prefill(*seq, prompt, po).ok());
      ASSERT_TRUE(e->ReleaseSequence(*seq).ok());  // its write fails behind the request
    }
    e->FlushKvTiers();
    EXPECT_GT(e->kv_tier_stats()[0].errors, 0);
  }
}

}  // namespace
}  // namespace ced::testing
