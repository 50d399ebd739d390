// Issue 15 point 3: a decode worker that leaves (SIGKILL) or stops answering
// (SIGSTOP: connections open, no verdicts) while a long prompt's K/V is in
// flight to it costs only the requests it held. The prefill worker goes on
// serving the other decode workers: a bystander's K/V does not queue behind
// the messages stuck on the departed peer (each of which the transport gives
// up only after its send timeout, 30 s).
//
// The test plays the gateway (so that it chooses which decode worker holds
// which request): the victim's prompt computes slowly (fault injection: 300 ms
// per chunk) on the one prefill worker, its decode worker goes away after its
// first chunk landed, and the bystander, for the other decode worker, queues
// behind the victim's compute. Its latency is bounded by that compute (about
// 3 s), far below the 30 s a stuck message would hold it.
#include <signal.h>

#include <memory>
#include <string>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kChunk = 64;
constexpr int kVictimChunks = 10;
constexpr int kChunkDelayMs = 300;
// Well below the transport's 30 s send timeout, well above the victim's
// remaining compute (kVictimChunks * kChunkDelayMs).
constexpr int kBystanderBoundMs = 15000;
static_assert(kVictimChunks * kChunkDelayMs * 2 < kBystanderBoundMs, "no margin");

// One request driven as the gateway drives it: Reserve on a decode worker,
// follow its token stream, start its prefill.
class ManualRequest {
 public:
  ManualRequest(FaultCluster& c, int decode, const std::string& id,
                const std::vector<int32_t>& prompt, int max_tokens)
      : id_(id) {
    decode_ = ced::internal::DecodeWorker::NewStub(
        grpc::CreateChannel(c.decode(decode).grpc(), grpc::InsecureChannelCredentials()));
    prefill_ = ced::internal::PrefillWorker::NewStub(
        grpc::CreateChannel(c.prefill(0).grpc(), grpc::InsecureChannelCredentials()));
    ced::internal::ReserveRequest reserve;
    reserve.set_request_id(id);
    reserve.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    reserve.set_max_tokens(max_tokens);
    reserve.set_ignore_eos(true);
    reserve.set_prefill_worker_id(c.prefill_id(0));
    reserve.mutable_replay()->set_replay_on(ced::internal::REPLAY_ON_DECODE);
    ced::internal::ReserveResponse reserved;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      reserve_status_ = decode_->Reserve(&ctx, reserve, &reserved);
      if (!reserve_status_.ok()) return;
    }
    stream_ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    ced::internal::StreamRequest sr;
    sr.set_request_id(id);
    tokens_ = decode_->Stream(&stream_ctx_, sr);
    ced::internal::PrefillRequest pr;
    pr.set_request_id(id);
    pr.mutable_token_ids()->Add(prompt.begin(), prompt.end());
    pr.set_decode_worker_id(c.decode_id(decode));
    pr.set_decode_kv_address(c.decode(decode).kv());
    pr.set_transfer_token(reserved.transfer_token());
    *pr.mutable_replay() = reserve.replay();
    pr.set_kv_format(reserved.kv_format());
    prefill_ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    prefill_stream_ = prefill_->Prefill(&prefill_ctx_, pr);
  }
  ~ManualRequest() {
    stream_ctx_.TryCancel();
    prefill_ctx_.TryCancel();
    if (tokens_) (void)tokens_->Finish();
    if (prefill_stream_) (void)prefill_stream_->Finish();
  }
  const grpc::Status& reserve_status() const { return reserve_status_; }
  // Reads the token stream to its end.
  grpc::Status Finish(std::vector<int32_t>* tokens) {
    ced::internal::TokenChunk chunk;
    while (tokens_->Read(&chunk)) {
      for (int32_t t : chunk.token_ids()) tokens->push_back(t);
    }
    grpc::Status s = tokens_->Finish();
    tokens_.reset();
    return s;
  }

 private:
  std::string id_;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> decode_;
  std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill_;
  grpc::Status reserve_status_;
  grpc::ClientContext stream_ctx_, prefill_ctx_;
  std::unique_ptr<grpc::ClientReader<ced::internal::TokenChunk>> tokens_;
  std::unique_ptr<grpc::ClientReader<ced::internal::PrefillResponse>> prefill_stream_;
};

class FaultDepartingDecodeTest : public ::testing::TestWithParam<int> {};

TEST_P(FaultDepartingDecodeTest, BystanderOnAnotherDecodeWorkerIsNotHeldUp) {
  const int sig = GetParam();
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 2);
  o.prefill_flags = {"--chunk", std::to_string(kChunk), "--fault-injection-for-testing",
                     "match=victim,chunk_delay_ms=" + std::to_string(kChunkDelayMs)};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto bystander_prompt = Prompt(100, 2);
  const auto want = ref.Run(bystander_prompt, 8);

  const std::string in_bytes = "ced_kv_transfer_bytes_total{direction=\"in\"}";
  auto victim =
      std::make_unique<ManualRequest>(c, 1, "victim-1", Prompt(kVictimChunks * kChunk, 1), 8);
  ASSERT_TRUE(victim->reserve_status().ok())
      << victim->reserve_status().error_message() << "\ndecode-1's log:\n"
      << c.decode(1).Log();
  ASSERT_TRUE(
      WaitUntil([&] { return ScrapeMetric(c.decode(1).metrics(), in_bytes).value_or(0) > 0; },
                Ms(30000), Ms(10)));
  // The victim's next chunks go to a peer that is gone or never answers.
  if (sig == SIGKILL) {
    c.decode(1).Kill();
  } else {
    c.decode(1).Signal(sig);
  }

  const auto t0 = SteadyClock::now();
  ManualRequest bystander(c, 0, "bystander-1", bystander_prompt, 8);
  ASSERT_TRUE(bystander.reserve_status().ok()) << bystander.reserve_status().error_message();
  std::vector<int32_t> tokens;
  const grpc::Status s = bystander.Finish(&tokens);
  const double took_ms = MsSince(t0);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(tokens, want);
  EXPECT_LT(took_ms, kBystanderBoundMs) << "the bystander waited for the departed decode worker";
  Figure(sig == SIGKILL ? "departing_decode_sigkill" : "departing_decode_sigstop", "bystander_ms",
         took_ms);

  if (sig == SIGSTOP) c.decode(1).Signal(SIGCONT);
  victim.reset();  // cancels it
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(40000), nullptr, &why)) << why;
}

INSTANTIATE_TEST_SUITE_P(Signals, FaultDepartingDecodeTest, ::testing::Values(SIGSTOP, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == SIGKILL ? "Sigkill" : "Sigstop");
                         });

}  // namespace
}  // namespace ced::testing
