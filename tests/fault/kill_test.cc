// Faults 1 and 2: a worker SIGKILLed mid-request.
// - A decode worker killed mid-stream, migration off (--migration-limit 0):
//   its clients get UNAVAILABLE at once
//   (never a wrong token), the other decode worker's streams finish with the
//   right tokens, the router stops sending work to the dead worker.
// - A prefill worker killed mid-transfer: the request fails with UNAVAILABLE
//   (with --migration-limit 0: no retry inside the cluster; the client may
//   retry, which is safe because sampling is a pure function of seed and
//   step), the decode worker
//   frees its reservation, other requests are unaffected. Without a gateway
//   to cancel it, the decode worker times the transfer out by itself after
//   --reservation-timeout-ms.
#include <signal.h>

#include <thread>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kLongTokens = 600;  // a long stream on tiny: seconds of decoding
// Decode workers that sleep this long before each step (test-only flag): a
// stream of N tokens then lasts at least N x this, whatever the machine.
constexpr int kStepDelayMs = 5;

double Running(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_decode_running_sequences").value_or(-1);
}

TEST(FaultKillTest, DecodeWorkerKilledMidStream) {
  const std::string model = MakeModelDir("tiny");
  // Every stream lasts >= kTokens x kStepDelayMs = 4 s by construction (tiny
  // alone decodes 1,200 tokens in well under a second), so all of them are
  // still running when the victim is killed.
  FaultClusterOptions o = Topology(model, 1, 2);
  o.decode_flags = {"--step-delay-ms-for-testing", std::to_string(kStepDelayMs)};
  // Migration off: the victims' streams end (migration_test.cc moves them).
  o.gateway_flags = {"--migration-limit", "0"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  // Long streams, started one by one so that the router, which places by
  // load, spreads them over both decode workers.
  constexpr int kStreams = 4, kTokens = 800;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    prompts.push_back(Prompt(64, 1 + i));
    streams.push_back(std::make_unique<Stream>(
        c.gateway().grpc(), FaultRequest(prompts[i], kTokens, "kill-" + std::to_string(i)),
        Ms(120000)));
    ASSERT_TRUE(streams.back()->ReadTokens(3));
  }
  // The victim: the decode worker running more of them.
  const double r0 = Running(c.decode(0)), r1 = Running(c.decode(1));
  const int victim = r0 >= r1 ? 0 : 1, survivor = 1 - victim;
  ASSERT_EQ(r0 + r1, kStreams) << "every stream is still running";
  ASSERT_GT(std::min(r0, r1), 0) << "the router placed every stream on one worker";

  const auto t_kill = SteadyClock::now();
  c.decode(victim).Kill();
  std::vector<grpc::Status> status(kStreams);
  std::vector<double> ended_ms(kStreams);
  std::vector<std::thread> finishers;
  for (int i = 0; i < kStreams; ++i) {
    finishers.emplace_back([&, i] {
      status[i] = streams[i]->Finish();
      ended_ms[i] = MsSince(t_kill);
    });
  }
  // Meanwhile: the router stops sending work there after the heartbeat timeout.
  const bool stale = WaitUntil([&] { return !c.Live(c.decode_id(victim)); }, Ms(20000), Ms(20));
  const double stale_ms = MsSince(t_kill);
  for (auto& t : finishers) t.join();
  ASSERT_TRUE(stale);
  Figure("decode_sigkill", "router_stale_ms", stale_ms);
  int failed = 0, ok = 0;
  double detect_ms = 0;
  for (int i = 0; i < kStreams; ++i) {
    const auto& got = streams[i]->tokens();
    if (status[i].ok()) {
      ++ok;
      EXPECT_EQ(got, ref.Run(prompts[i], kTokens)) << i;
      EXPECT_EQ(streams[i]->last().placement().decode_worker_id(), c.decode_id(survivor)) << i;
      continue;
    }
    ++failed;
    detect_ms = std::max(detect_ms, ended_ms[i]);
    EXPECT_EQ(status[i].error_code(), grpc::StatusCode::UNAVAILABLE) << status[i].error_message();
    EXPECT_LT(got.size(), static_cast<size_t>(kTokens));
    EXPECT_TRUE(IsPrefix(got, ref.Run(prompts[i], static_cast<int>(got.size()))))
        << i << ": a wrong token was streamed";
  }
  EXPECT_GT(failed, 0) << "no stream was on the killed worker";
  EXPECT_GT(ok, 0) << "every stream was on the killed worker (" << r0 << ", " << r1 << ")";
  // Bounded so a hang fails here rather than at the 120 s deadline.
  EXPECT_LT(detect_ms, 10000);
  Figure("decode_sigkill", "client_unavailable_ms", detect_ms);
  Figure("decode_sigkill", "streams_failed_on_victim", failed);
  Figure("decode_sigkill", "streams_ok_on_survivor", ok);

  // New requests all go to the survivor, with the right tokens.
  int lost = 0;
  for (int i = 0; i < 4; ++i) {
    const auto p = Prompt(40, 10 + i);
    const GenResult r =
        Generate(c.gateway().grpc(), FaultRequest(p, 8, "after-" + std::to_string(i)));
    if (!r.status.ok()) ++lost;
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, ref.Run(p, 8));
    EXPECT_EQ(r.last.placement().decode_worker_id(), c.decode_id(survivor));
  }
  Figure("decode_sigkill", "requests_lost_besides_victims", lost);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  Figure("decode_sigkill", "kv_blocks_leaked", c.DecodeSum("ced_kv_blocks_used"));
  EXPECT_EQ(HealthStatus(c.gateway().grpc(), ""), 1);
}

double SentBytes(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_kv_transfer_bytes_total{direction=\"out\"}").value_or(0);
}

// Which prefill worker has sent K/V since `before` (bytes per worker), or -1.
int SendingPrefill(FaultCluster& c, const std::vector<double>& before) {
  for (int i = 0; i < 2; ++i) {
    if (SentBytes(c.prefill(i)) > before[i]) return i;
  }
  return -1;
}

TEST(FaultKillTest, PrefillWorkerKilledMidTransfer) {
  const std::string model = MakeModelDir("tiny");
  // Requests named "slow-*" move their K/V in 64-token chunks 700 ms apart.
  FaultClusterOptions o = Topology(model, 2, 1);
  o.prefill_flags = {"--chunk", "64", "--fault-injection-for-testing",
                     "match=slow,send_delay_ms=700"};
  // Migration off, and with it the prefill retry (migration_test.cc).
  o.gateway_flags = {"--migration-limit", "0"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  // A bystander already decoding on the same decode worker.
  const auto prompt_b = Prompt(64, 3);
  const auto want_b = ref.Run(prompt_b, kLongTokens);
  Stream bystander(c.gateway().grpc(), FaultRequest(prompt_b, kLongTokens, "bystander"),
                   Ms(120000));
  ASSERT_TRUE(bystander.ReadTokens(5));

  const auto prompt = Prompt(300, 4);
  // The bystander's K/V may not all be counted yet (a busy host): wait until
  // neither worker's count moves, or the victim's worker would be told from
  // the bystander's late bytes and the wrong one killed.
  std::vector<double> before = {SentBytes(c.prefill(0)), SentBytes(c.prefill(1))};
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(Ms(200));
    const std::vector<double> now = {SentBytes(c.prefill(0)), SentBytes(c.prefill(1))};
    if (now == before) break;
    before = now;
  }
  Stream victim(c.gateway().grpc(), FaultRequest(prompt, 16, "slow-1"), Ms(120000));
  // Mid-transfer: the first chunk has landed, the others are still to come.
  ASSERT_TRUE(WaitUntil([&] { return SendingPrefill(c, before) >= 0; }, Ms(30000), Ms(20)));
  const int dead = SendingPrefill(c, before);
  const auto t_kill = SteadyClock::now();
  c.prefill(dead).Kill();
  const grpc::Status s = victim.Finish();
  const double detect_ms = MsSince(t_kill);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // With the replay on the prefill worker, the first token may have reached
  // the client before the transfer broke: right, and nothing after it.
  EXPECT_LE(victim.tokens().size(), 1u);
  EXPECT_TRUE(IsPrefix(victim.tokens(), ref.Run(prompt, 16))) << "a wrong token was streamed";
  EXPECT_LT(detect_ms, 10000);
  Figure("prefill_sigkill", "client_unavailable_ms", detect_ms);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  Figure("prefill_sigkill", "decode_reservation_freed_ms", MsSince(t_kill));

  ASSERT_TRUE(WaitUntil([&] { return !c.Live(c.prefill_id(dead)); }, Ms(20000), Ms(20)));
  // Requests after the router noticed go to the other prefill worker.
  for (int i = 0; i < 3; ++i) {
    const auto p = Prompt(40, 20 + i);
    const GenResult r =
        Generate(c.gateway().grpc(), FaultRequest(p, 8, "after-" + std::to_string(i)));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, ref.Run(p, 8));
    EXPECT_EQ(r.last.placement().prefill_worker_id(), c.prefill_id(1 - dead));
  }
  const grpc::Status sb = bystander.Finish();
  EXPECT_TRUE(sb.ok()) << sb.error_message();
  EXPECT_EQ(bystander.tokens(), want_b);
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  Figure("prefill_sigkill", "kv_blocks_leaked", c.DecodeSum("ced_kv_blocks_used"));
}

// Nobody cancels: the test plays the gateway, reserves on the decode worker,
// starts the prefill itself and kills the prefill worker mid-transfer. The
// decode worker must give the reservation up on its own.
TEST(FaultKillTest, DecodeTimesOutAnOrphanedTransfer) {
  const std::string model = MakeModelDir("tiny");
  constexpr int kReservationTimeoutMs = 3000;
  FaultClusterOptions o = Topology(model, 1, 1);
  o.prefill_flags = {"--chunk", "64", "--fault-injection-for-testing",
                     "match=orphan,send_delay_ms=700"};
  o.decode_flags = {"--reservation-timeout-ms", std::to_string(kReservationTimeoutMs)};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  const auto prompt = Prompt(300, 5);
  auto decode = ced::internal::DecodeWorker::NewStub(
      grpc::CreateChannel(c.decode(0).grpc(), grpc::InsecureChannelCredentials()));
  auto prefill = ced::internal::PrefillWorker::NewStub(
      grpc::CreateChannel(c.prefill(0).grpc(), grpc::InsecureChannelCredentials()));
  ced::internal::ReserveRequest reserve;
  reserve.set_request_id("orphan-1");
  reserve.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  reserve.set_max_tokens(16);
  reserve.set_prefill_worker_id(c.prefill_id(0));
  reserve.mutable_replay()->set_replay_on(ced::internal::REPLAY_ON_DECODE);
  ced::internal::ReserveResponse reserved;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = decode->Reserve(&ctx, reserve, &reserved);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const auto t_reserved = SteadyClock::now();
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  ced::internal::StreamRequest sr;
  sr.set_request_id("orphan-1");
  auto tokens = decode->Stream(&stream_ctx, sr);

  ced::internal::PrefillRequest pr;
  pr.set_request_id("orphan-1");
  pr.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  pr.set_decode_worker_id(c.decode_id(0));
  pr.set_decode_kv_address(c.decode(0).kv());
  pr.set_transfer_token(reserved.transfer_token());
  *pr.mutable_replay() = reserve.replay();
  pr.set_kv_format(reserved.kv_format());
  grpc::ClientContext prefill_ctx;
  auto prefill_stream = prefill->Prefill(&prefill_ctx, pr);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ScrapeMetric(c.decode(0).metrics(), "ced_kv_transfer_bytes_total{direction=\"in\"}")
                   .value_or(0) > 0;
      },
      Ms(30000), Ms(20)));
  const auto t_kill = SteadyClock::now();
  c.prefill(0).Kill();
  ced::internal::TokenChunk chunk;
  int produced = 0;
  while (tokens->Read(&chunk)) produced += chunk.token_ids_size();
  const grpc::Status s = tokens->Finish();
  const double after_kill_ms = MsSince(t_kill);
  const double after_reserve_ms = MsSince(t_reserved);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(produced, 0) << "tokens from a half-transferred prompt";
  // The reservation ends by the configured bound (plus scheduling slack).
  EXPECT_LT(after_reserve_ms, kReservationTimeoutMs + 5000) << s.error_message();
  Figure("prefill_sigkill_no_gateway", "decode_gives_up_after_kill_ms", after_kill_ms);
  Figure("prefill_sigkill_no_gateway", "decode_gives_up_after_reserve_ms", after_reserve_ms);
  std::printf("orphaned transfer ended with %d: %s\n", s.error_code(), s.error_message().c_str());
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  Figure("prefill_sigkill_no_gateway", "kv_blocks_leaked", c.DecodeSum("ced_kv_blocks_used"));
  prefill_ctx.TryCancel();
  (void)prefill_stream->Finish();
}

}  // namespace
}  // namespace ced::testing
