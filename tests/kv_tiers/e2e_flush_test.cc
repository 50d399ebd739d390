// `ced client flush-cache` end to end (issue 16, the operator's flush): real
// `ced serve` processes on loopback with a host-memory KV tier. A turn fills
// both workers' prefix caches; the flush empties them into their host tiers
// (the CLI prints what went, the cache gauges read 0, the router sees the
// evictions); the next turn of the session reloads its prefix from the
// prefill worker's host tier and its tokens equal the colocated engine's.
#include <memory>
#include <regex>

#include "services/common/subprocess.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/service_process.h"

namespace ced::testing {
namespace {

constexpr int kTokens = 16;

double Metric(const ServiceProcess& p, const std::string& series) {
  return ScrapeMetric(p.metrics(), series).value_or(-1);
}

services::CompletedRun FlushCache(const std::vector<std::string>& args) {
  services::SubprocessOptions options;
  options.argv = {CedBinary(), "client", "flush-cache"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.stderr_to_stdout = true;
  absl::StatusOr<services::CompletedRun> run = services::RunToCompletion(options, 60);
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : services::CompletedRun{};
}

// "ADDR: N cached blocks evicted, M held by running requests" -> N (-1: no match).
int Evicted(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(R"((\d+) cached blocks evicted, (\d+) held)"))) {
    return -1;
  }
  return std::stoi(m[1]);
}

TEST(E2eFlushCacheTest, FlushedSessionReloadsFromTheHostTier) {
  const std::string model = MakeModelDir("tiny");
  ColocatedEngine colocated(model);
  ASSERT_TRUE(colocated.ok());
  const int bs = colocated.engine().cache_stats().block_size;

  ServiceProcess router({"--role=router", "--listen", "127.0.0.1:0", "--metrics-listen",
                         "127.0.0.1:0", "--model", model});
  ASSERT_TRUE(router.ready());
  ServiceProcess decode({"--role=decode", "--worker-id", "decode-f", "--listen", "127.0.0.1:0",
                         "--metrics-listen", "127.0.0.1:0", "--kv-listen", "127.0.0.1:0",
                         "--router", router.grpc(), "--model", model, "--kv-host-mb", "32"});
  ServiceProcess prefill({"--role=prefill", "--worker-id", "prefill-f", "--listen",
                          "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--router",
                          router.grpc(), "--model", model, "--replay-capable", "--kv-host-mb",
                          "32"});
  ASSERT_TRUE(decode.ready() && prefill.ready());
  ServiceProcess gateway({"--role=gateway", "--listen", "127.0.0.1:0", "--metrics-listen",
                          "127.0.0.1:0", "--router", router.grpc(), "--model", model});
  ASSERT_TRUE(gateway.ready());
  ASSERT_TRUE(WaitUntil([&] { return HealthStatus(gateway.grpc(), "") == 1; },
                        std::chrono::seconds(60)));

  auto run = [&](const std::vector<int32_t>& prompt) {
    ced::v1::GenerateRequest req = Request(prompt, kTokens, ced::v1::REPLAY_ON_DECODE);
    req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
    return Generate(gateway.grpc(), req);
  };
  const std::vector<int32_t> turn1 = Prompt(200, 81);
  const GenResult r1 = run(turn1);
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message() << decode.Log();
  const std::string cached = "ced_prefix_cache_blocks{state=\"cached\"}";
  const int prompt_blocks = 200 / bs;
  ASSERT_GE(Metric(prefill, cached), prompt_blocks);
  ASSERT_GT(Metric(decode, cached), 0);
  const double prefill_evicted = Metric(prefill, "ced_prefix_cache_evicted_blocks_total");
  const double prefill_cached = Metric(prefill, cached);

  // Bad input: no --worker; an address that is not a worker.
  const services::CompletedRun no_worker = FlushCache({});
  EXPECT_EQ(WEXITSTATUS(no_worker.wait_status), 2) << no_worker.output;
  EXPECT_NE(no_worker.output.find("--worker is required"), std::string::npos) << no_worker.output;
  const services::CompletedRun at_gateway = FlushCache({"--worker=" + gateway.grpc()});
  EXPECT_EQ(WEXITSTATUS(at_gateway.wait_status), 1) << at_gateway.output;
  EXPECT_NE(at_gateway.output.find("UNIMPLEMENTED"), std::string::npos) << at_gateway.output;

  // The flush: every cached block goes (nothing runs), down to the host tiers.
  for (const ServiceProcess* w : {&prefill, &decode}) {
    const double before = Metric(*w, cached);
    const services::CompletedRun flushed =
        FlushCache({"--worker=" + w->grpc(), "--wait-for-tiers", "--reason=test"});
    ASSERT_TRUE(flushed.exited_ok()) << flushed.output;
    EXPECT_EQ(Evicted(flushed.output), before) << flushed.output;
    EXPECT_NE(flushed.output.find(" 0 held by running requests"), std::string::npos)
        << flushed.output;
    EXPECT_EQ(Metric(*w, cached), 0);
    EXPECT_NE(w->Log().find("prefix cache flushed by"), std::string::npos);
    EXPECT_NE(w->Log().find("test"), std::string::npos) << "the reason is logged";
  }
  // Counted as evictions, and written to the host tier.
  EXPECT_EQ(Metric(prefill, "ced_prefix_cache_evicted_blocks_total") - prefill_evicted,
            prefill_cached);
  EXPECT_GT(Metric(prefill, "ced_kv_tier_written_bytes_total{tier=\"host\"}"), 0);
  EXPECT_GT(Metric(decode, "ced_kv_tier_written_bytes_total{tier=\"host\"}"), 0);

  // The router learns of the evictions (the workers' reports): it indexes no
  // block of either worker any more.
  EXPECT_GT(Metric(router, "ced_router_indexed_blocks"), -1);
  EXPECT_TRUE(WaitUntil([&] { return Metric(router, "ced_router_indexed_blocks") == 0; },
                        std::chrono::seconds(20)))
      << Metric(router, "ced_router_indexed_blocks");

  // The next turn reloads the prompt's blocks from the prefill worker's host
  // tier instead of recomputing them, and answers as a fresh prefill does.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
  const std::vector<int32_t> more = Prompt(40, 82);
  turn2.insert(turn2.end(), more.begin(), more.end());
  const GenResult r2 = run(turn2);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message() << prefill.Log();
  EXPECT_EQ(r2.tokens, colocated.Run(turn2, kTokens, ReplayMode::kExact));
  EXPECT_EQ(r2.last.usage().cached_prompt_tokens(), prompt_blocks * bs);
  EXPECT_EQ(Metric(prefill, "ced_kv_tier_hit_blocks_total{tier=\"host\"}"), prompt_blocks);
}

}  // namespace
}  // namespace ced::testing
