#include "bench/sim/planner.h"

#include <memory>

#include "bench/sim/cost_model.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

SimOptions Base() {
  SimOptions o;
  o.model = *PresetConfig("llama3-70b-ced");
  o.gpu = *GpuByName("h100");
  o.workload.input_mean = 2048;
  o.workload.output_mean = 128;
  o.workload.num_requests = 200;
  o.ttft_slo_s = *ReferenceTtftSeconds(o.model, o.gpu, 4, 2048, 5);
  return o;
}

TEST(PlannerTest, ReferenceTtftIsFiveDecoderOnlyPrefills) {
  const SimOptions o = Base();
  std::unique_ptr<CostModel> dec = *CostModel::Create({*PresetConfig("llama3-70b"), o.gpu});
  EXPECT_DOUBLE_EQ(o.ttft_slo_s, 5 * dec->PrefillSeconds(2048, true, 4));
}

TEST(PlannerTest, MoreDecodeInstancesNeverLowerCapacity) {
  SimOptions o = Base();
  o.workload.input_mean = 512;  // decode-bound even with one prefill instance
  o.workload.output_mean = 1024;
  o.workload.duration_s = 60;  // many request lifetimes: steady state, not a transient
  o.workload.max_requests = 3000;
  o.prefill_instances = 1;
  double previous = 0;
  for (int d = 1; d <= 3; ++d) {
    o.decode_instances = d;
    const SplitResult r = *MaxRate(o, 0.9, 6);
    EXPECT_GE(r.max_rate, previous) << d;
    EXPECT_GE(r.at_max.attainment, 0.9) << d;
    previous = r.max_rate;
  }
  EXPECT_GT(previous, 2 * 10.0);  // three decode instances: well above one's ~14 req/s
}

TEST(PlannerTest, TriesEverySplitAndReportsTheBest) {
  PlanOptions p;
  p.base = Base();
  p.instances = 4;
  p.bisection_steps = 4;
  const PlanResult plan = *Plan(p);
  ASSERT_EQ(plan.splits.size(), 3u);
  ASSERT_GE(plan.best, 0);
  for (size_t i = 0; i < plan.splits.size(); ++i) {
    EXPECT_EQ(plan.splits[i].prefill, static_cast<int>(i) + 1);
    EXPECT_EQ(plan.splits[i].decode, 3 - static_cast<int>(i));
    EXPECT_LE(plan.splits[i].max_rate, plan.splits[plan.best].max_rate);
  }
}

TEST(PlannerTest, SplitsAGpuBudget) {
  PlanOptions p;
  p.base = Base();
  p.base.prefill_gpus = 2;
  p.total_gpus = 16;
  p.bisection_steps = 2;
  const PlanResult plan = *Plan(p);
  ASSERT_EQ(plan.splits.size(), 3u);  // 2+3, 4+2, 6+1 (x2 and x4 GPUs)
  EXPECT_EQ(plan.splits[0].prefill, 2);
  EXPECT_EQ(plan.splits[0].decode, 3);
  EXPECT_EQ(plan.splits[2].prefill, 6);
  EXPECT_EQ(plan.splits[2].decode, 1);
  p.total_gpus = 3;
  EXPECT_FALSE(Plan(p).ok());
}

}  // namespace
}  // namespace ced::sim
