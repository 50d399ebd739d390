#include "bench/sim/planner.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/sim/cost_model.h"
#include "engine/common/status.h"

namespace ced::sim {

absl::StatusOr<double> ReferenceTtftSeconds(const ModelConfig& model, const GpuSpec& gpu,
                                            int prefill_gpus, int64_t mean_prompt,
                                            double factor) {
  CostModel::Options options;
  options.config = DecoderOnlyTwin(model);
  options.gpu = gpu;
  ASSIGN_OR_RETURN(std::unique_ptr<CostModel> cost, CostModel::Create(options));
  return factor * cost->PrefillSeconds(mean_prompt, true, prefill_gpus);
}

namespace {

absl::StatusOr<SimSummary> RunAt(SimOptions options, double rate) {
  options.workload.rate = rate;
  return RunSimulation(options);
}

}  // namespace

absl::StatusOr<SplitResult> MaxRate(const SimOptions& options, double target, int steps) {
  SplitResult result;
  result.prefill = options.prefill_instances;
  result.decode = options.decode_instances;
  // Bracket from the prefill pool's roofline throughput for the mean prompt.
  CostModel::Options cost_options;
  cost_options.config = options.model;
  cost_options.gpu = options.gpu;
  ASSIGN_OR_RETURN(std::unique_ptr<CostModel> cost, CostModel::Create(cost_options));
  const bool replay_here = options.replay_on != router::ReplayOnChoice::kDecode;
  const double prefill_s = cost->PrefillSeconds(
      static_cast<int64_t>(options.workload.input_mean), replay_here, options.prefill_gpus);
  // Decode pool: a full batch (max_batch, or as many as the KV room holds)
  // at the mean context, one token per sequence per step.
  const double in = options.workload.input_mean, out = options.workload.output_mean;
  const double room = cost->KvRoomBytes(WeightSet::kFull, options.decode_gpus);
  const double batch =
      std::max(1.0, std::min<double>(options.max_batch, room / (cost->kv_bytes_per_token() * (in + out))));
  Work step = cost->DecodeStepBaseWork(static_cast<int64_t>(batch));
  step += cost->DecodeBatchWork(static_cast<int64_t>(batch),
                                static_cast<int64_t>(batch * (in + out / 2)), 0);
  const double decode_rate =
      options.decode_instances * batch / (out * cost->StepSeconds(step, options.decode_gpus));
  double hi = 1.5 * std::min(options.prefill_instances / prefill_s, decode_rate);
  double lo = 0;
  SimSummary best;
  for (int i = 0; i < 6; ++i) {  // grow hi until it misses the target
    ASSIGN_OR_RETURN(SimSummary s, RunAt(options, hi));
    ++result.runs;
    if (s.attainment < target) break;
    lo = hi;
    best = s;
    hi *= 2;
  }
  if (lo == hi) {
    result.max_rate = lo;
    result.at_max = best;
    return result;
  }
  for (int i = 0; i < steps; ++i) {
    const double mid = (lo + hi) / 2;
    ASSIGN_OR_RETURN(SimSummary s, RunAt(options, mid));
    ++result.runs;
    if (s.attainment >= target) {
      lo = mid;
      best = s;
    } else {
      hi = mid;
    }
  }
  result.max_rate = lo;
  result.at_max = best;
  return result;
}

absl::StatusOr<PlanResult> Plan(const PlanOptions& options) {
  std::vector<std::pair<int, int>> splits;
  const SimOptions& base = options.base;
  if (options.total_gpus > 0) {
    for (int p = 1; p * base.prefill_gpus < options.total_gpus; ++p) {
      const int left = options.total_gpus - p * base.prefill_gpus;
      if (left % base.decode_gpus == 0) splits.emplace_back(p, left / base.decode_gpus);
    }
  } else {
    for (int p = 1; p < options.instances; ++p) splits.emplace_back(p, options.instances - p);
  }
  if (splits.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: no prefill:decode split fits ", options.instances, " instances / ",
                     options.total_gpus, " GPUs"));
  }
  PlanResult plan;
  for (const auto& [p, d] : splits) {
    SimOptions sim = base;
    sim.prefill_instances = p;
    sim.decode_instances = d;
    ASSIGN_OR_RETURN(SplitResult split, MaxRate(sim, options.target, options.bisection_steps));
    plan.splits.push_back(split);
    if (split.max_rate > 0 &&
        (plan.best < 0 || split.max_rate > plan.splits[plan.best].max_rate)) {
      plan.best = static_cast<int>(plan.splits.size()) - 1;
    }
  }
  return plan;
}

}  // namespace ced::sim
