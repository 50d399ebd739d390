#include "bench/sim/simulator.h"

#include <algorithm>
#include <memory>

#include "bench/sim/cost_model.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

SimOptions Fleet(const std::string& preset, int prefill, int decode) {
  SimOptions o;
  o.model = *PresetConfig(preset);
  o.gpu = *GpuByName("h100");
  o.prefill_instances = prefill;
  o.decode_instances = decode;
  o.ttft_slo_s = 1;
  o.workload.input_mean = 2048;
  o.workload.output_mean = 64;
  o.workload.rate = 20;
  o.workload.num_requests = 300;
  return o;
}

double Roofline(double flops, double bytes, int gpus) {
  return std::max(flops / (gpus * 989e12), bytes / (gpus * 3.35e12));
}

TEST(SimulatorTest, SameSeedSameSummary) {
  SimOptions o = Fleet("llama3-70b-ced", 2, 2);
  const SimSummary a = *RunSimulation(o);
  const SimSummary b = *RunSimulation(o);
  EXPECT_EQ(a.ToString(), b.ToString());
  EXPECT_EQ(a.completed, 300);
  o.workload.seed = 2;
  EXPECT_NE(RunSimulation(o)->ToString(), a.ToString());
}

// One request on an idle fleet, replay on prefill: the prefill instance makes
// the first token; the second comes from the decode instance's first step
// after the K/V transfer.
TEST(SimulatorTest, UnloadedRequestMatchesHandRoofline) {
  SimOptions o = Fleet("llama3-70b-ced", 1, 1);
  const int64_t n = 3000;
  o.requests = {{0.0123, n, 2}};
  const SimSummary s = *RunSimulation(o);
  ASSERT_EQ(s.completed, 1);
  const ModelConfig& c = o.model;
  const Accounting a = ComputeAccounting(c);
  const double kv_per_token = GlobalKvBytesPerToken(c, KvFormat::kBF16);
  const double prefill_flops =
      2.0 * (n * a.params_per_prompt_token + a.params_per_replayed_token + a.lm_head_params) +
      AttentionFlopsForPositions(c, 0, n, 40) + AttentionFlopsForPositions(c, n - 1, n, 40);
  const double prefill_bytes =
      2.0 * (a.params_per_prompt_token + a.params_per_replayed_token + a.lm_head_params) +
      n * kv_per_token;
  const double prefill = Roofline(prefill_flops, prefill_bytes, 4);
  const double transfer = n * kv_per_token / 50e9;
  // Decode at context n + 1: the full weights, the K/V read, one token written.
  const double step =
      Roofline(2.0 * a.params_per_generated_token + 80 * AttentionFlopsPerLayer(c, n + 1),
               2.0 * a.params_per_generated_token +
                   KvBytesReadPerDecodeStep(c, KvFormat::kBF16, n + 1) + kv_per_token,
               4);
  const RequestResult& r = s.results[0];
  EXPECT_NEAR(r.ttft_s(), prefill, 1e-9);
  EXPECT_NEAR(r.tpot_s(), transfer + step, 1e-9);
  EXPECT_NEAR(s.ttft_p50, prefill, 1e-9);
}

// One-token answers (replay on prefill): the prefill instance makes the only
// token, which ends the request for the client; the decode instance still
// holds the reservation until the K/V lands, then its scheduler ends it. More
// such requests than the decode scheduler's queue bound (256) must all
// finish: none may stay queued on the decode side.
TEST(SimulatorTest, OneTokenAnswersLeaveTheDecodeInstance) {
  SimOptions o = Fleet("llama3-70b-ced", 1, 1);
  for (int i = 0; i < 600; ++i) o.requests.push_back({0.01 * i, 512, 1});
  const SimSummary s = *RunSimulation(o);
  ASSERT_EQ(s.completed, 600);
  for (const RequestResult& r : s.results) {
    EXPECT_GE(r.first_token_s, 0);
    EXPECT_EQ(r.finish_s, r.first_token_s);  // the client's view: done with its token
  }
}

// Replay on decode: the encoder-only prefill, the transfer (global K/V + h_E
// of the replayed token), then the decode instance's replay makes the first
// token.
TEST(SimulatorTest, UnloadedRequestWithReplayOnDecode) {
  SimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.replay_on = router::ReplayOnChoice::kDecode;
  const int64_t n = 3000;
  o.requests = {{0, n, 1}};
  const SimSummary s = *RunSimulation(o);
  ASSERT_EQ(s.completed, 1);
  EXPECT_EQ(s.replays_on_decode, 1);
  const ModelConfig& c = o.model;
  const Accounting a = ComputeAccounting(c);
  const double kv_per_token = GlobalKvBytesPerToken(c, KvFormat::kBF16);
  const double prefill =
      Roofline(2.0 * n * a.params_per_prompt_token + AttentionFlopsForPositions(c, 0, n, 40),
               2.0 * a.params_per_prompt_token + n * kv_per_token, 4);
  const double transfer = (n * kv_per_token + 8192 * 2) / 50e9;
  const double replay = Roofline(
      2.0 * (a.params_per_replayed_token + a.lm_head_params) +
          AttentionFlopsForPositions(c, n - 1, n, 40),
      2.0 * a.params_per_generated_token + KvBytesReadPerDecodeStep(c, KvFormat::kBF16, n) / 2, 4);
  EXPECT_NEAR(s.results[0].ttft_s(), prefill + transfer + replay, 1e-9);
}

TEST(SimulatorTest, DecoderOnlyFirstTokenComesFromPrefill) {
  SimOptions o = Fleet("llama3-70b", 1, 1);
  const int64_t n = 1024;
  o.requests = {{0, n, 4}};
  const SimSummary s = *RunSimulation(o);
  std::unique_ptr<CostModel> cost = *CostModel::Create({o.model, o.gpu});
  EXPECT_NEAR(s.results[0].ttft_s(), cost->PrefillSeconds(n, true, 4), 1e-12);
  EXPECT_EQ(s.replays_on_decode, 0);
}

TEST(SimulatorTest, RequestsThatCannotFitFail) {
  SimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.requests = {{0, 10'000'000, 4}, {0.1, 100, 4}};
  const SimSummary s = *RunSimulation(o);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.completed, 1);
  EXPECT_FALSE(s.results[0].completed);
}

// Bursts land between two load reports: the naive router (reported queue
// only) piles each burst on one prefill instance.
TEST(SimulatorTest, NaiveRouterIsNeverBetterOnBursts) {
  for (uint64_t seed : {1, 2, 3}) {
    SimOptions o = Fleet("llama3-70b-ced", 3, 3);
    o.ttft_slo_s = 0.5;
    for (int burst = 0; burst < 20; ++burst) {
      for (int i = 0; i < 6; ++i) {
        o.requests.push_back(
            {burst * 1.0 + 0.01, 2048 + 512 * static_cast<int64_t>((i + seed) % 4), 32});
      }
    }
    const SimSummary smart = *RunSimulation(o);
    o.count_inflight = false;
    const SimSummary naive = *RunSimulation(o);
    EXPECT_LE(naive.attainment, smart.attainment) << seed;
    EXPECT_GT(naive.ttft_p90, smart.ttft_p90) << seed;
  }
}

// A measured device profile's costs beyond the roofline: the path latency
// before the prefill, the fixed and per-token prefill costs, and the fixed and
// per-sequence decode costs, exactly as stated.
TEST(SimulatorTest, DeviceProfileCostsInAnUnloadedRequest) {
  SimOptions o;
  o.model = *PresetConfig("small");
  o.gpu = GpuSpec{"cpu", 1e11, 2e10, 8e9};
  o.gpu.bytes_per_param = 4;
  o.gpu.request_s = 0.002;
  o.gpu.prefill_step_s = 0.003;
  o.gpu.prefill_token_s = 2e-5;
  o.gpu.decode_step_s = 0.001;
  o.gpu.decode_seq_s = 0.0004;
  o.gpu.kv_room_bytes = 256 << 20;
  o.gpu.link_bytes_per_s = 4e9;
  o.prefill_instances = o.decode_instances = 1;
  o.prefill_gpus = o.decode_gpus = 1;
  const int64_t n = 512;
  o.requests = {{0.5, n, 3}};
  const SimSummary s = *RunSimulation(o);
  ASSERT_EQ(s.completed, 1);
  CostModel::Options co;
  co.config = o.model;
  co.gpu = o.gpu;
  std::unique_ptr<CostModel> cost = *CostModel::Create(co);
  const double prefill = cost->StepSeconds(cost->PrefillWork(n, true), 1) + 0.003 + 2e-5 * n;
  auto step = [&](int64_t ctx) {
    Work w = cost->DecodeStepBaseWork();
    w += cost->DecodeSequenceWork(ctx);
    return cost->StepSeconds(w, 1) + 0.001 + 0.0004;
  };
  const double transfer = cost->TransferBytes(n, false) / 4e9;
  const RequestResult& r = s.results[0];
  EXPECT_NEAR(r.ttft_s(), 0.002 + prefill, 1e-12);
  EXPECT_NEAR(r.tpot_s(), (transfer + step(n + 1) + step(n + 2)) / 2, 1e-12);
}

// The decode instances run the worker's scheduler (engine/scheduler): with
// max_batch 1 a request starts only once the one before it finished, in
// arrival order (FIFO), and it decodes from the step after its start.
TEST(SimulatorTest, LinkedSchedulerStartsFifoWithinMaxBatch) {
  SimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.replay_on = router::ReplayOnChoice::kDecode;  // the decode start makes the first token
  o.max_batch = 1;
  o.requests = {{0, 1000, 20}, {0.001, 1000, 20}, {0.002, 1000, 20}, {0.003, 1000, 20}};
  const SimSummary s = *RunSimulation(o);
  ASSERT_EQ(s.completed, 4);
  for (int i = 1; i < 4; ++i) {
    EXPECT_GE(s.results[i].first_token_s, s.results[i - 1].finish_s) << i;
  }
  // 20 tokens: the start makes one, then 19 decode steps alone in the batch.
  EXPECT_EQ(s.decode_steps, 4 * 19);
}

// The per-step token budget (--max-step-tokens): replays on decode landing
// together start in one step when the budget holds them all, and one per
// step (the first start of a step always runs) when it holds one.
TEST(SimulatorTest, TokenBudgetSpreadsReplayStartsOverSteps) {
  SimOptions o = Fleet("llama3-70b-ced", 4, 1);
  o.model.replay_window = 512;  // each replay charges 512 tokens
  o.replay_on = router::ReplayOnChoice::kDecode;
  o.requests = {{0, 1024, 50}, {0, 1024, 50}, {0, 1024, 50}, {0, 1024, 50}};
  // The four prefill instances finish together; the first landing starts
  // alone on the idle instance, the other three land during its step.
  const SimSummary wide = *RunSimulation(o);
  ASSERT_EQ(wide.completed, 4);
  EXPECT_EQ(wide.results[1].first_token_s, wide.results[2].first_token_s);
  EXPECT_EQ(wide.results[2].first_token_s, wide.results[3].first_token_s);
  EXPECT_GT(wide.results[1].first_token_s, wide.results[0].first_token_s);
  o.max_step_tokens = 600;
  const SimSummary narrow = *RunSimulation(o);
  ASSERT_EQ(narrow.completed, 4);
  // Its first step replays one prompt, not three: shorter.
  EXPECT_LT(narrow.results[1].first_token_s, wide.results[1].first_token_s);
  for (int i = 2; i < 4; ++i) {
    EXPECT_GT(narrow.results[i].first_token_s, narrow.results[i - 1].first_token_s) << i;
  }
  EXPECT_GT(narrow.ttft_p90, wide.ttft_p90);
  o.max_step_tokens = 0;
  EXPECT_FALSE(RunSimulation(o).ok());
}

SimOptions CpuPair() {
  SimOptions o;
  o.model = *PresetConfig("small");
  o.gpu = GpuSpec{"cpu", 1e11, 2e10, 8e9};
  o.gpu.bytes_per_param = 4;
  o.gpu.kv_room_bytes = 256 << 20;
  o.gpu.link_bytes_per_s = 1e18;  // K/V lands at once
  o.prefill_instances = o.decode_instances = 1;
  o.prefill_gpus = o.decode_gpus = 1;
  o.ttft_slo_s = 10;
  return o;
}

// Colocated prefill and decode instances: a request alone never overlaps the
// other instance, so it runs as if apart; a prompt prefilled while another
// request decodes runs slower by the prefill slowdown, and that request's
// steps by the decode slowdown.
TEST(SimulatorTest, ColocatedInstancesSlowEachOther) {
  SimOptions o = CpuPair();
  o.gpu.prefill_colocated_slowdown = 1.8;
  o.gpu.decode_colocated_slowdown = 1.5;
  o.requests = {{0, 512, 400}};
  o.colocated = false;
  const SimSummary apart_one = *RunSimulation(o);
  o.colocated = true;
  EXPECT_EQ(RunSimulation(o)->ToString(), apart_one.ToString());

  // The second prompt waits for the first, then prefills while the first
  // decodes (400 steps: longer than the prefill).
  o.requests = {{0, 512, 400}, {0, 256, 4}};
  o.colocated = false;
  const SimSummary apart = *RunSimulation(o);
  o.colocated = true;
  const SimSummary together = *RunSimulation(o);
  ASSERT_EQ(together.completed, 2);
  CostModel::Options co;
  co.config = o.model;
  co.gpu = o.gpu;
  std::unique_ptr<CostModel> cost = *CostModel::Create(co);
  const double alone = cost->PrefillSeconds(256, true, 1);
  EXPECT_DOUBLE_EQ(apart.results[1].prefill_s, alone);
  EXPECT_NEAR(together.results[1].prefill_s, 1.8 * alone, 1e-9);
  EXPECT_DOUBLE_EQ(together.results[0].prefill_s, apart.results[0].prefill_s);
  EXPECT_GT(together.results[0].tpot_s(), apart.results[0].tpot_s());
  EXPECT_LT(together.results[0].tpot_s(), 1.5 * apart.results[0].tpot_s());
  EXPECT_GT(together.results[1].ttft_s(), apart.results[1].ttft_s());

  // Slowdowns of 1: the same run as apart, figure for figure.
  o.gpu.prefill_colocated_slowdown = o.gpu.decode_colocated_slowdown = 1;
  EXPECT_EQ(RunSimulation(o)->ToString(), apart.ToString());
}

// Under load, with the slowdowns switching on and off many times, the same
// options still give the same summary, and colocation only slows things.
TEST(SimulatorTest, ColocatedRunIsDeterministic) {
  SimOptions o = CpuPair();
  o.gpu.prefill_colocated_slowdown = 1.9;
  o.gpu.decode_colocated_slowdown = 1.6;
  o.gpu.link_bytes_per_s = 2e9;
  o.replay_on = router::ReplayOnChoice::kAuto;
  o.heartbeat_s = 1;
  o.max_batch = 64;
  o.workload.input_mean = 512;
  o.workload.output_mean = 32;
  o.workload.rate = 1.5;
  o.workload.num_requests = 200;
  o.colocated = true;
  const SimSummary a = *RunSimulation(o);
  EXPECT_EQ(RunSimulation(o)->ToString(), a.ToString());
  EXPECT_EQ(a.completed, 200);
  o.colocated = false;
  const SimSummary apart = *RunSimulation(o);
  EXPECT_GT(a.ttft_p90, apart.ttft_p90);
  EXPECT_GT(a.tpot_p50, apart.tpot_p50);
}

// refuse_when_full, as the gateway: a request no decode instance has K/V room
// for is refused (RESOURCE_EXHAUSTED), not held until room frees; once the
// room is back (the instance reported it) the next request is placed. By
// default it waits for the room instead (retrying clients).
TEST(SimulatorTest, RequestsWithoutDecodeRoomAreRefusedOrWait) {
  SimOptions o = CpuPair();
  CostModel::Options co;
  co.config = o.model;
  co.gpu = o.gpu;
  const double per_token = (*CostModel::Create(co))->kv_bytes_per_token();
  // Room for one request of 1,008 + 48 tokens (66 blocks of 16), not two.
  o.gpu.kv_room_bytes = 100 * 16 * per_token;
  o.heartbeat_s = 0.05;
  o.requests = {{0, 1008, 48}, {0.01, 1008, 48}, {1000, 1008, 48}};
  const SimSummary waited = *RunSimulation(o);
  EXPECT_EQ(waited.completed, 3);
  EXPECT_EQ(waited.refused, 0);
  // The second starts only once the first finished and a report showed it.
  EXPECT_GE(waited.results[1].first_token_s, waited.results[0].finish_s);

  o.refuse_when_full = true;
  const SimSummary s = *RunSimulation(o);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.refused, 1);
  EXPECT_TRUE(s.results[0].completed);
  EXPECT_FALSE(s.results[1].completed);
  EXPECT_TRUE(s.results[1].refused);
  EXPECT_TRUE(s.results[2].completed);
  EXPECT_FALSE(s.results[2].refused);
  // The request that waited nowhere does not stretch the others' figures: the
  // third runs as on an idle pair, like the first.
  EXPECT_NEAR(s.results[2].ttft_s(), s.results[0].ttft_s(), 1e-9);

  // With room for both, both run (the second after the first's prefill).
  o.gpu.kv_room_bytes = 200 * 16 * per_token;
  const SimSummary roomy = *RunSimulation(o);
  EXPECT_EQ(roomy.completed, 3);
  EXPECT_EQ(roomy.refused, 0);
  EXPECT_GT(roomy.results[1].ttft_s(), roomy.results[0].ttft_s());

  o.reserve_retries = -1;
  EXPECT_FALSE(RunSimulation(o).ok());
}

TEST(SimulatorTest, RejectsBadOptions) {
  SimOptions o = Fleet("llama3-70b-ced", 0, 1);
  EXPECT_FALSE(RunSimulation(o).ok());
  o = Fleet("llama3-70b-ced", 1, 1);
  o.workload.rate = 0;
  EXPECT_FALSE(RunSimulation(o).ok());
  o = Fleet("llama3-70b-ced", 1, 1);
  o.prefill_gpus = 1;  // 141 GB of weights on one 80 GB GPU
  EXPECT_FALSE(RunSimulation(o).ok());
}

}  // namespace
}  // namespace ced::sim
