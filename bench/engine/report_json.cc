// BuildJson: the bench's raw samples reduced to summaries, in one document.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "bench/common/stats.h"
#include "bench/engine/report.h"
#include "kernels/cpu/isa.h"

namespace ced::bench {
namespace {

using Json = nlohmann::ordered_json;

Json SummaryJson(const std::vector<double>& samples) {
  const Summary s = Summarize(samples);
  return Json{{"median", s.median}, {"min", s.min}, {"max", s.max},
              {"q1", s.q1},         {"q3", s.q3},   {"n", s.n}};
}

double Max(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// Each repetition's FLOP/s over the best FMA sample of the run.
std::vector<double> PeakFraction(const PrefillVariant& v, const std::vector<double>& peak) {
  std::vector<double> out;
  const double best = Max(peak);
  if (best <= 0) return out;
  for (double t : v.ttft_s) out.push_back(v.flops() / t / best);
  return out;
}

// rate / cpu_share per sample: the rate with the contention removed.
std::vector<double> Normalized(const std::vector<double>& rate, const std::vector<double>& share) {
  std::vector<double> out;
  for (size_t i = 0; i < std::min(rate.size(), share.size()); ++i) {
    if (share[i] > 0) out.push_back(rate[i] / share[i]);
  }
  return out;
}

// Each repetition's FLOP/s per unit of CPU share over the median of the
// probe's, both contention-normalized.
std::vector<double> PeakFractionCpu(const PrefillVariant& v, const std::vector<double>& peak,
                                    const std::vector<double>& share) {
  std::vector<double> out;
  const double ref = Summarize(Normalized(peak, share)).median;
  if (ref <= 0) return out;
  for (size_t i = 0; i < std::min(v.ttft_s.size(), v.cpu_share.size()); ++i) {
    out.push_back(v.flops() / v.ttft_s[i] / v.cpu_share[i] / ref);
  }
  return out;
}

// Per repetition: CPU seconds of `slow` / CPU seconds of `fast`.
std::vector<double> CpuRatio(const PrefillVariant& slow, const PrefillVariant& fast) {
  std::vector<double> out;
  for (size_t i = 0; i < std::min(slow.ttft_s.size(), fast.ttft_s.size()); ++i) {
    out.push_back(slow.ttft_s[i] * slow.cpu_share[i] / (fast.ttft_s[i] * fast.cpu_share[i]));
  }
  return out;
}

Json PrefillJson(const PrefillReport& p) {
  Json j;
  j["prompt_tokens"] = p.options.prompt_tokens;
  j["chunk_tokens"] = p.options.chunk_tokens;
  j["repetitions"] = p.options.repetitions;
  j["fma_peak_flops"] = {{"avx2", SummaryJson(p.fma_avx2)}, {"avx512", SummaryJson(p.fma_avx512)}};
  j["fma_peak_flops_cpu_normalized"] = {
      {"avx2", SummaryJson(Normalized(p.fma_avx2, p.fma_avx2_share))},
      {"avx512", SummaryJson(Normalized(p.fma_avx512, p.fma_avx512_share))}};
  for (const PrefillVariant& v : p.variants) {
    std::vector<double> rate;
    for (double t : v.ttft_s) rate.push_back(v.flops() / t);
    j["variants"].push_back(
        {{"name", v.name},
         {"replay_tokens", v.replay_tokens},
         {"matmul_flops", v.matmul_flops},
         {"attention_flops", v.attention_flops},
         {"ttft_s", SummaryJson(v.ttft_s)},
         {"encoder_s", SummaryJson(v.encoder_s)},
         {"replay_s", SummaryJson(v.replay_s)},
         {"flops_per_s", SummaryJson(rate)},
         {"fraction_of_avx2_peak", SummaryJson(PeakFraction(v, p.fma_avx2))},
         {"fraction_of_avx512_peak", SummaryJson(PeakFraction(v, p.fma_avx512))},
         {"fraction_of_avx2_peak_cpu_normalized",
          SummaryJson(PeakFractionCpu(v, p.fma_avx2, p.fma_avx2_share))},
         {"fraction_of_avx512_peak_cpu_normalized",
          SummaryJson(PeakFractionCpu(v, p.fma_avx512, p.fma_avx512_share))},
         {"cpu_share", SummaryJson(v.cpu_share)},
         {"ttft_samples_s", v.ttft_s},
         {"first_token", v.first_token}});
  }
  const PrefillVariant &bounded = p.variants[0], &exact = p.variants[1], &dec = p.variants[2];
  j["speedup_bounded"] = SummaryJson(p.speedup_bounded);
  j["speedup_exact"] = SummaryJson(p.speedup_exact);
  j["cpu_time_ratio_bounded"] = SummaryJson(CpuRatio(dec, bounded));
  j["cpu_time_ratio_exact"] = SummaryJson(CpuRatio(dec, exact));
  j["flop_ratio_bounded"] = dec.flops() / bounded.flops();
  j["flop_ratio_exact"] = dec.flops() / exact.flops();
  j["matmul_flop_ratio_bounded"] = dec.matmul_flops / bounded.matmul_flops;
  j["matmul_flop_ratio_exact"] = dec.matmul_flops / exact.matmul_flops;
  return j;
}

Json DecodeJson(const DecodeReport& d) {
  Json j;
  j["context"] = d.options.context;
  j["steps"] = d.options.steps;
  j["repetitions"] = d.options.repetitions;
  j["bandwidth_buffer_bytes"] = d.options.bandwidth_bytes;
  j["matmul_weight_bytes"] = d.bf16_weights ? 2 : 4;
  j["read_bandwidth_bytes_per_s"] = SummaryJson(d.bandwidth);
  j["roofline_bandwidth_bytes_per_s"] = d.best_bandwidth;
  const double bw_cpu = Summarize(Normalized(d.bandwidth, d.bandwidth_share)).median;
  j["read_bandwidth_cpu_normalized_bytes_per_s"] = bw_cpu;
  for (const DecodeBatchResult& b : d.batches) {
    const double ws_cpu =
        Summarize(Normalized(b.working_set_bandwidth, b.working_set_share)).median;
    std::vector<double> fraction_cpu;
    for (size_t i = 0; i < b.tokens_per_s.size() && bw_cpu > 0; ++i) {
      const double roofline = b.batch * std::max(bw_cpu, ws_cpu) / b.bytes_per_step_samples[i];
      fraction_cpu.push_back(b.tokens_per_s[i] / b.cpu_share[i] / roofline);
    }
    j["batches"].push_back({{"batch", b.batch},
                            {"mean_context", b.mean_context},
                            {"weight_bytes_per_step", b.weight_bytes},
                            {"kv_bytes_per_step", b.kv_bytes},
                            {"tokens_per_s", SummaryJson(b.tokens_per_s)},
                            {"step_ms", SummaryJson(b.step_ms)},
                            {"roofline_tokens_per_s", SummaryJson(b.roofline_tokens_per_s)},
                            {"working_set_bandwidth_bytes_per_s",
                             SummaryJson(b.working_set_bandwidth)},
                            {"roofline_bandwidth_bytes_per_s", b.roofline_bandwidth},
                            {"fraction_of_roofline", SummaryJson(b.fraction)},
                            {"fraction_of_dram_roofline", SummaryJson(b.dram_fraction)},
                            {"fraction_of_roofline_cpu_normalized", SummaryJson(fraction_cpu)},
                            {"cpu_share", SummaryJson(b.cpu_share)}});
  }
  return j;
}

}  // namespace

std::string BlasIsa(const std::string& blas_core) {
  const std::string c = absl::AsciiStrToLower(blas_core);
  return c == "skylakex" || c == "cooperlake" || c == "sapphirerapids" ? "avx512" : "avx2";
}

// The ISA the engine's CPU kernels were compiled for (they are built with the
// same -march flags as this bench): their packed-panel GEMM and attention
// kernels use 16-wide vectors, which become AVX-512 FMAs where AVX-512F is on.
std::string KernelIsa() { return std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())); }

Json BuildJson(const BenchReport& report) {
  const RunContext& c = report.context;
  const MachineInfo& m = c.machine;
  const ModelConfig& mc = c.ced_config;
  Json j;
  j["command"] = c.command;
  j["date_utc"] = c.date_utc;
  j["wall_s"] = c.wall_s;
  j["quick"] = c.quick;
  j["load_average_start"] = c.load_start;
  j["load_average_end"] = c.load_end;
  j["machine"] = {{"cpu_model", m.cpu_model},
                  {"logical_cores", m.logical_cores},
                  {"omp_threads", m.omp_threads},
                  {"l3_bytes", m.l3_bytes},
                  {"has_avx512", m.has_avx512},
                  {"blas_core", m.blas_core},
                  {"blas_isa", BlasIsa(m.blas_core)},
                  {"kernel_isa", KernelIsa()},
                  {"kernel_summary", kernels::CpuIsaSummary()},
                  {"compiler", m.compiler},
                  {"omp_wait_policy", m.omp_wait_policy},
                  {"openblas_coretype_env", m.blas_coretype_env}};
  j["model"] = absl::StrFormat("L=%d E=%d d=%d H=%d G=%d D=%d F=%d V=%d W=%d R=%d", mc.num_layers,
                               mc.num_encoder_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads,
                               mc.head_dim, mc.intermediate_size, mc.vocab_size, mc.sliding_window,
                               mc.replay_window);
  j["model_dirs"] = c.model_dirs;
  j["kv_format"] = c.kv_format;
  j["block_size"] = c.block_size;
  if (report.has_prefill) j["prefill"] = PrefillJson(report.prefill);
  if (report.has_decode) j["decode"] = DecodeJson(report.decode);
  for (const ReplayErrorRow& row : report.replay) {
    j["replay_error"].push_back({{"preset", row.preset},
                                 {"prompt_tokens", row.prompt_tokens},
                                 {"replay_window", row.replay_window},
                                 {"exact_window", row.exact_window},
                                 {"approximate", row.approximate},
                                 {"steps", row.steps},
                                 {"kl_first", row.kl_first},
                                 {"kl_mean", row.kl_mean},
                                 {"kl_max", row.kl_max},
                                 {"top1_agreement", row.top1_agreement},
                                 {"first_divergence", row.first_divergence},
                                 {"exact_kl_max", row.exact_kl_max},
                                 {"exact_first_divergence", row.exact_first_divergence},
                                 {"full_forward_s", row.full_forward_s}});
  }
  if (!report.resume.empty()) j["resume_error"] = ResumeErrorJson(report.resume);
  if (!report.at_rest.empty()) j["kv_at_rest"] = AtRestJson(report.at_rest);
  // Every variant's prefill and decode, this run's first.
  Json own = {{"isa", KernelIsa()}};
  if (j.contains("prefill")) own["prefill"] = j["prefill"];
  if (j.contains("decode")) own["decode"] = j["decode"];
  if (report.has_prefill || report.has_decode) j["kernel_variants"].push_back(own);
  for (const Json& child : report.variant_reports) {
    Json v = {{"isa", child["machine"].value("kernel_isa", "")}};
    if (child.contains("prefill")) v["prefill"] = child["prefill"];
    if (child.contains("decode")) v["decode"] = child["decode"];
    j["kernel_variants"].push_back(v);
  }
  if (!report.peer_gemm_table.empty()) {
    j["peer_gemm"] = {{"command", report.peer_gemm_command}, {"table", report.peer_gemm_table}};
  }
  if (report.alt_report.is_object() && report.alt_report.contains("prefill")) {
    j["alt_blas"] = {{"blas_core", report.alt_report["machine"].value("blas_core", "")},
                     {"requested", report.alt_blas_core},
                     {"prefill", report.alt_report["prefill"]}};
  }
  return j;
}

}  // namespace ced::bench
