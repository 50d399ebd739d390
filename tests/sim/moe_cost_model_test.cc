// The cost model on the DeepSeek-V4.1-Flash shape (MoE, window-only layers):
// weight bytes a step reads follow the experts its tokens touch, prefill
// FLOPs the activated parameters, and instance memory the weight sets.
#include "bench/sim/cost_model.h"
#include "bench/sim/hardware.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

std::unique_ptr<CostModel> Flash(bool decoder_only) {
  CostModel::Options o;
  o.config = *PresetConfig(decoder_only ? "deepseek-v4.1-flash-dec" : "deepseek-v4.1-flash");
  o.gpu = *GpuByName("h200");
  o.bytes_per_param = 1;  // fp8 weights
  auto m = CostModel::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

TEST(MoeCostModelTest, DecodeStepReadsTheExpertsItsTokensTouch) {
  auto m = Flash(false);
  const Accounting& a = m->accounting();
  // Batch 1: the activated parameters (k routed + shared + router + the rest).
  EXPECT_DOUBLE_EQ(m->DecodeStepBaseWork(1).bytes,
                   static_cast<double>(a.params_per_generated_token));
  // A large batch touches every expert: about the whole model.
  const double all = m->DecodeStepBaseWork(100000).bytes;
  EXPECT_NEAR(all / static_cast<double>(a.decode_params), 1.0, 0.01);
  // Replays riding in a step touch decoder experts only.
  const double with_replay = m->DecodeStepBaseWork(1, 128).bytes;
  const double expert = 3.0 * 2304 * 5120;
  EXPECT_NEAR(with_replay - m->DecodeStepBaseWork(1).bytes,
              20 * (ExpectedExpertsTouched(m->config(), 129) - 6) * expert, 1.0);
  // FLOPs stay per token: batch x activated.
  EXPECT_DOUBLE_EQ(m->DecodeBatchWork(4, 0, 0).flops, MatmulFlops(a.params_per_generated_token, 4));
}

TEST(MoeCostModelTest, CedPrefillReadsHalfTheExpertsAndDoesHalfTheWork) {
  auto ced = Flash(false), dec = Flash(true);
  const int64_t n = 32768;
  const Work wc = ced->PrefillWork(n, /*replay_here=*/false);
  const Work wd = dec->PrefillWork(n, true);
  EXPECT_NEAR(wc.flops / wd.flops, 0.5, 0.03);
  // A long prompt touches every expert of the layers it runs.
  EXPECT_NEAR(wc.bytes / ced->WeightBytes(WeightSet::kEncoderOnly), 1.0, 0.02);
  EXPECT_NEAR(wd.bytes / dec->WeightBytes(WeightSet::kFull), 1.0, 0.02);
  // Window-only layers 0 and 1 attend no global keys: a decoder-only prefill's
  // attention is that of 38 global + 40 local layers.
  const ModelConfig& c = dec->config();
  EXPECT_DOUBLE_EQ(AttentionFlopsForLayers(c, 0, n, 0, 40),
                   AttentionFlopsForPositions(c, 0, n, 38) +
                       2 * (AttentionFlopsForPositions(c, 0, n, 1) -
                            4.0 * c.num_heads * c.head_dim * (n * (n + 1) / 2.0)));
}

TEST(MoeCostModelTest, InstanceMemoryOnEightH200) {
  auto m = Flash(false);
  // fp8: 552 GB for decode, 276 GB for an encoder-only prefill instance.
  EXPECT_NEAR(m->WeightBytes(WeightSet::kFull) / 1e9, 552.1, 0.1);
  EXPECT_NEAR(m->WeightBytes(WeightSet::kEncoderOnly) / 1e9, 276.1, 0.1);
  EXPECT_GT(m->KvRoomBytes(WeightSet::kFull, 8), 400e9);
  EXPECT_LT(m->KvRoomBytes(WeightSet::kFull, 4), 0);  // the full model does not fit 4 GPUs
  EXPECT_GT(m->KvRoomBytes(WeightSet::kEncoderOnly, 4), 200e9);
  EXPECT_EQ(m->kv_bytes_per_token(), 4 * 2 * 1536);  // fp8 K/V, 4 source layers
}

}  // namespace
}  // namespace ced::sim
