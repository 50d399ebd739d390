#include "bench/sim/report.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/cost_model.h"

namespace ced::sim {

std::string SummaryTable(const SimSummary& s) {
  std::string out =
      "| requests | completed | failed (refused: no decode room) | SLO attainment | "
      "TTFT p50/p90/p99 (ms) | TPOT p50/p90/p99 (ms) | throughput (req/s) | goodput (req/s) | "
      "output tok/s | replays on decode |\n|---|---|---|---|---|---|---|---|---|---|\n";
  absl::StrAppendFormat(&out,
                        "| %d | %d | %d (%d) | %.1f%% | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | "
                        "%.3f | %.3f | %.0f | %d |\n",
                        s.requests, s.completed, s.failed, s.refused, 100 * s.attainment,
                        1e3 * s.ttft_p50, 1e3 * s.ttft_p90, 1e3 * s.ttft_p99, 1e3 * s.tpot_p50,
                        1e3 * s.tpot_p90, 1e3 * s.tpot_p99, s.throughput, s.goodput,
                        s.output_tokens_per_s, s.replays_on_decode);
  return out;
}

std::string PlanTable(const PlanResult& plan) {
  std::string out =
      "| prefill:decode | max rate (req/s) | attainment there | TTFT p90 (ms) | TPOT p90 (ms) | "
      "sim runs |\n|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < plan.splits.size(); ++i) {
    const SplitResult& r = plan.splits[i];
    const bool best = static_cast<int>(i) == plan.best;
    absl::StrAppendFormat(&out, "| %s%d:%d%s | %.3f | %.1f%% | %.0f | %.1f | %d |\n",
                          best ? "**" : "", r.prefill, r.decode, best ? "**" : "", r.max_rate,
                          100 * r.at_max.attainment, 1e3 * r.at_max.ttft_p90,
                          1e3 * r.at_max.tpot_p90, r.runs);
  }
  return out;
}

namespace {
std::unique_ptr<CostModel> Model(const ModelConfig& config, const GpuSpec& gpu) {
  CostModel::Options options;
  options.config = config;
  options.gpu = gpu;
  absl::StatusOr<std::unique_ptr<CostModel>> model = CostModel::Create(options);
  return model.ok() ? std::move(*model) : nullptr;
}
}  // namespace

std::string InstanceMemoryTable(const ModelConfig& model, const GpuSpec& gpu, int prefill_gpus,
                                int decode_gpus) {
  std::unique_ptr<CostModel> ced = Model(model, gpu);
  std::unique_ptr<CostModel> dec = Model(DecoderOnlyTwin(model), gpu);
  if (!ced || !dec) return "(invalid model)\n";
  std::string out = absl::StrFormat(
      "| instance (%s) | GPUs | weights (GB) | KV room (GB) | KV room (tokens) |\n"
      "|---|---|---|---|---|\n",
      gpu.name);
  auto row = [&](const std::string& name, const CostModel& m, WeightSet set, int gpus) {
    const double room = m.KvRoomBytes(set, gpus);
    absl::StrAppendFormat(&out, "| %s | %d | %.1f | %.1f | %s |\n", name, gpus,
                          m.WeightBytes(set) / 1e9, room / 1e9,
                          room > 0 ? absl::StrCat(static_cast<int64_t>(room / m.kv_bytes_per_token()))
                                   : "does not fit");
  };
  row("prefill, decoder-only", *dec, dec->PrefillWeightSet(true), prefill_gpus);
  row("prefill, CED, replay on prefill", *ced, ced->PrefillWeightSet(true), prefill_gpus);
  row("prefill, CED, replay on decode", *ced, ced->PrefillWeightSet(false), prefill_gpus);
  row("decode (either model)", *ced, WeightSet::kFull, decode_gpus);
  return out;
}

std::string PrefillStepTable(const ModelConfig& model, const GpuSpec& gpu, int gpus,
                             const std::vector<int64_t>& lengths) {
  std::unique_ptr<CostModel> ced = Model(model, gpu);
  std::unique_ptr<CostModel> dec = Model(DecoderOnlyTwin(model), gpu);
  if (!ced || !dec) return "(invalid model)\n";
  std::string out = absl::StrFormat(
      "| prompt tokens | decoder-only (ms) | CED + replay (ms) | CED encoder-only (ms) | "
      "decoder-only / CED |\n|---|---|---|---|---|\n");
  for (int64_t n : lengths) {
    const double d = dec->PrefillSeconds(n, true, gpus);
    const double c = ced->PrefillSeconds(n, true, gpus);
    const double e = ced->PrefillSeconds(n, false, gpus);
    absl::StrAppendFormat(&out, "| %d | %.2f | %.2f | %.2f | %.2fx |\n", n, 1e3 * d, 1e3 * c,
                          1e3 * e, d / c);
  }
  return out;
}

}  // namespace ced::sim
