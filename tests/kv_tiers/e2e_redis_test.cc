// The Redis KV tier end to end (issue 16): real `ced serve` processes on
// loopback and a real redis-server. Turn 1 runs on one pair of workers; they
// are replaced by new processes (empty caches); turn 2 finds its prefix in
// Redis (usage.cached_prompt_tokens > 0) and its tokens equal the colocated
// engine's. With Redis killed, turn 3 still succeeds (recomputed) and the
// workers count the errors. `ced cluster --kv-store local` starts and stops
// its own redis-server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <regex>

#include "services/kv_store/local_redis.h"
#include "tests/common/missing_tool.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/service_process.h"

namespace ced::testing {
namespace {

constexpr int kTokens = 24;

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

double Metric(const ServiceProcess& p, const std::string& series) {
  return ScrapeMetric(p.metrics(), series).value_or(-1);
}

struct Workers {
  std::unique_ptr<ServiceProcess> prefill, decode;
};

Workers StartWorkers(const std::string& model, const std::string& router, const std::string& store,
                     int generation) {
  const std::string g = std::to_string(generation);
  Workers w;
  w.decode = std::make_unique<ServiceProcess>(std::vector<std::string>{
      "--role=decode", "--worker-id", "decode-g" + g, "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0", "--kv-listen", "127.0.0.1:0", "--router", router,
      "--model", model, "--kv-store", store, "--kv-store-timeout-ms", "200"});
  w.prefill = std::make_unique<ServiceProcess>(std::vector<std::string>{
      "--role=prefill", "--worker-id", "prefill-g" + g, "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0", "--router", router, "--model", model,
      "--replay-capable", "--kv-store", store, "--kv-store-timeout-ms", "200"});
  return w;
}

// The router lists exactly these two workers, live.
bool OnlyLive(const std::string& router, const std::string& prefill_id,
              const std::string& decode_id) {
  auto list = ListWorkers(router);
  if (!list) return false;
  int live = 0;
  bool p = false, d = false;
  for (const auto& w : list->workers()) {
    if (!w.live()) continue;
    ++live;
    p |= w.info().worker_id() == prefill_id;
    d |= w.info().worker_id() == decode_id;
  }
  return live == 2 && p && d;
}

TEST(E2eRedisTierTest, SessionResumesOnNewWorkersFromRedis) {
  if (services::FindRedisServer().empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
  auto redis = services::LocalRedis::Start(64);
  ASSERT_TRUE(redis.ok()) << redis.status();
  const std::string store = (*redis)->url();
  const std::string model = MakeModelDir("tiny");
  ColocatedEngine colocated(model);
  ASSERT_TRUE(colocated.ok());
  const int bs = colocated.engine().cache_stats().block_size;

  ServiceProcess router({"--role=router", "--listen", "127.0.0.1:0", "--metrics-listen",
                         "127.0.0.1:0", "--model", model});
  ASSERT_TRUE(router.ready());
  Workers w1 = StartWorkers(model, router.grpc(), store, 1);
  ASSERT_TRUE(w1.decode->ready() && w1.prefill->ready());
  ServiceProcess gateway({"--role=gateway", "--listen", "127.0.0.1:0", "--metrics-listen",
                          "127.0.0.1:0", "--router", router.grpc(), "--model", model});
  ASSERT_TRUE(gateway.ready());
  ASSERT_TRUE(WaitUntil([&] { return OnlyLive(router.grpc(), "prefill-g1", "decode-g1"); },
                        std::chrono::seconds(60)));
  ASSERT_TRUE(WaitUntil([&] { return HealthStatus(gateway.grpc(), "") == 1; },
                        std::chrono::seconds(60)));

  auto run = [&](const std::vector<int32_t>& prompt) {
    ced::v1::GenerateRequest req = Request(prompt, kTokens, ced::v1::REPLAY_ON_DECODE);
    req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
    return Generate(gateway.grpc(), req);
  };
  const std::vector<int32_t> turn1 = Prompt(200, 71);
  const GenResult r1 = run(turn1);
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message() << w1.decode->Log();
  EXPECT_EQ(r1.tokens, colocated.Run(turn1, kTokens, ReplayMode::kExact));
  EXPECT_EQ(r1.last.usage().cached_prompt_tokens(), 0);
  // Both workers write behind the request, each the blocks it computed: the
  // prefill worker the prompt's full blocks, the decode worker the rest (the
  // block the prompt's end shares with the answer, and the answer's: all but
  // its last token's K/V).
  const int stored_tokens = (200 + kTokens - 1) / bs * bs;
  const int prompt_blocks = 200 / bs;
  const double block_bytes = static_cast<double>(
      64 + Engine::GlobalRangeBytes(colocated.engine().config(), 0, bs));
  const std::string written = "ced_kv_tier_written_bytes_total{tier=\"redis\"}";
  ASSERT_GT(stored_tokens / bs, prompt_blocks);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(*w1.prefill, written) >= block_bytes * prompt_blocks &&
               Metric(*w1.decode, written) >= block_bytes * (stored_tokens / bs - prompt_blocks);
      },
      std::chrono::seconds(20)))
      << w1.decode->Log();
  EXPECT_EQ(Metric(*w1.decode, written), block_bytes * (stored_tokens / bs - prompt_blocks))
      << "the decode worker wrote a block of the prompt, which the prefill worker computed";
  EXPECT_EQ(Metric(*w1.prefill, written), block_bytes * prompt_blocks);
  // Each write behind (pipelined SETs) is timed.
  EXPECT_GT(Metric(*w1.decode, "ced_kv_tier_write_seconds_count{tier=\"redis\"}"), 0);
  EXPECT_GT(Metric(*w1.decode, "ced_kv_tier_write_seconds_sum{tier=\"redis\"}"), 0);

  // New workers: empty caches, the same Redis.
  w1.prefill->Stop(SIGTERM);
  w1.decode->Stop(SIGTERM);
  Workers w2 = StartWorkers(model, router.grpc(), store, 2);
  ASSERT_TRUE(w2.decode->ready() && w2.prefill->ready());
  ASSERT_TRUE(WaitUntil([&] { return OnlyLive(router.grpc(), "prefill-g2", "decode-g2"); },
                        std::chrono::seconds(60)));

  // The prefix reads of turn 2 are timed: one observation per prefix read
  // (its MGETs). Only the prefill worker reads: a decode worker reserving for
  // a remote prefill reads no tier, the prefill worker sends it the blocks.
  auto reads = [](const ServiceProcess& p) {
    return Metric(p, "ced_kv_tier_read_seconds_count{tier=\"redis\"}");
  };
  const double prefill_reads = reads(*w2.prefill), decode_reads = reads(*w2.decode);
  const std::string kv_in = "ced_kv_transfer_bytes_total{direction=\"in\"}";
  const double decode_in = Metric(*w2.decode, kv_in);
  const std::vector<int32_t> turn2 = Concat(Concat(turn1, r1.tokens), Prompt(50, 72));
  const GenResult r2 = run(turn2);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message() << w2.prefill->Log();
  EXPECT_EQ(r2.tokens, colocated.Run(turn2, kTokens, ReplayMode::kExact))
      << "a session resumed from Redis must equal a fresh prefill (exact replay)";
  EXPECT_EQ(r2.last.usage().cached_prompt_tokens(), stored_tokens);
  EXPECT_EQ(Metric(*w2.prefill, "ced_kv_tier_hit_blocks_total{tier=\"redis\"}"), stored_tokens / bs);
  EXPECT_EQ(Metric(*w2.decode, "ced_kv_tier_hit_blocks_total{tier=\"redis\"}"), 0);
  EXPECT_EQ(Metric(*w2.prefill, "ced_prefix_cache_hit_tokens_total"), stored_tokens);
  EXPECT_EQ(Metric(*w2.decode, "ced_kv_tier_errors_total{tier=\"redis\"}"), 0);
  EXPECT_GT(reads(*w2.prefill), prefill_reads);
  EXPECT_EQ(reads(*w2.decode), decode_reads);
  EXPECT_GT(Metric(*w2.prefill, "ced_kv_tier_read_seconds_sum{tier=\"redis\"}"), 0);
  // The whole prompt's K/V reached the decode worker over the transport, the
  // blocks the prefill worker read from Redis included.
  EXPECT_GE(Metric(*w2.decode, kv_in) - decode_in,
            static_cast<double>(
                Engine::GlobalRangeBytes(colocated.engine().config(), 0,
                                         static_cast<int>(turn2.size()))));

  // Redis dies: the next turn recomputes, and the workers count errors. The
  // failed calls are timed too.
  auto calls = [](const ServiceProcess& p) {
    return Metric(p, "ced_kv_tier_read_seconds_count{tier=\"redis\"}") +
           Metric(p, "ced_kv_tier_write_seconds_count{tier=\"redis\"}");
  };
  const double prefill_calls = calls(*w2.prefill);
  (*redis)->Stop();
  const std::vector<int32_t> turn3 = Concat(Prompt(90, 73), Prompt(40, 74));
  const GenResult r3 = run(turn3);
  ASSERT_TRUE(r3.status.ok()) << r3.status.error_message();
  EXPECT_EQ(r3.tokens, colocated.Run(turn3, kTokens, ReplayMode::kExact));
  EXPECT_EQ(r3.last.usage().cached_prompt_tokens(), 0);
  EXPECT_TRUE(WaitUntil(
      [&] { return Metric(*w2.prefill, "ced_kv_tier_errors_total{tier=\"redis\"}") > 0; },
      std::chrono::seconds(10)));
  // The decode worker's write behind of turn 3's blocks fails (it reads no
  // tier for a remote prefill).
  EXPECT_TRUE(WaitUntil(
      [&] { return Metric(*w2.decode, "ced_kv_tier_errors_total{tier=\"redis\"}") > 0; },
      std::chrono::seconds(20)));
  EXPECT_TRUE(
      WaitUntil([&] { return calls(*w2.prefill) > prefill_calls; }, std::chrono::seconds(10)));
}

TEST(E2eRedisTierTest, ClusterStartsAndStopsItsOwnRedis) {
  if (services::FindRedisServer().empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
  const std::string model = MakeModelDir("tiny");
  int port = 0;
  {
    LocalCluster cluster(model, {"--kv-store", "local", "--kv-host-mb", "16"});
    ASSERT_TRUE(cluster.ready()) << cluster.Log();
    std::smatch m;
    const std::string log = cluster.Log();
    ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(redis-server \(KV tier\) on redis://127\.0\.0\.1:(\d+))")))
        << log;
    port = std::stoi(m[1]);
    EXPECT_TRUE(Accepts(port));
    const GenResult r = Generate(cluster.gateway(), Request(Prompt(100, 75), 8, ced::v1::REPLAY_ON_DECODE));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    // The prompt's blocks, written by the prefill worker.
    const std::string prefill_metrics = cluster.addresses().at("prefill-0").at("metrics");
    EXPECT_TRUE(WaitUntil(
        [&] {
          return ScrapeMetric(prefill_metrics, "ced_kv_tier_written_bytes_total{tier=\"redis\"}")
                     .value_or(0) > 0;
        },
        std::chrono::seconds(20)));
    cluster.Stop();
  }
  EXPECT_FALSE(Accepts(port)) << "the cluster stops its redis-server";
}

}  // namespace
}  // namespace ced::testing
