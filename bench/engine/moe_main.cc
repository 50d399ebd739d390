// ced_moe_bench: the engine's mixture-of-experts figures (DESIGN.md §1.7) on
// `small-moe`: prefill of one long prompt, CED (bounded and exact replay)
// against its decoder-only twin `small-moe-dec` on the same weights, against
// the FMA peak on the activated FLOPs; batched decode against the memory
// roofline on the activated bytes (at batch 1: attention, router, the shared
// and k routed experts; at batch B the routed experts B tokens are expected
// to touch). Reuses the prefill and decode benches of ced_engine_bench; its
// own binary so that the two can grow apart. Markdown to stdout and --out.
#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/decode_bench.h"
#include "bench/engine/machine.h"
#include "bench/engine/prefill_bench.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"

namespace ced::bench {
namespace {

struct Flags {
  std::string preset = "small-moe";
  int prompt_tokens = 1024;
  int chunk_tokens = 256;
  int prefill_reps = 5;
  double fma_seconds = 0.2;
  int decode_context = 512;
  std::string decode_batches = "1,8,32";
  int decode_steps = 8;
  int decode_reps = 5;
  int bandwidth_mib = 1024;
  int seed = 0;
  std::string out = "bench/results/engine_moe.md";
};

std::string Median(const std::vector<double>& v, const char* fmt, double scale = 1) {
  std::vector<double> s;
  for (double x : v) s.push_back(x * scale);
  return FormatSummary(Summarize(s), fmt, "");
}

absl::StatusOr<std::string> Run(const Flags& f, const std::string& command) {
  RETURN_IF_ERROR(CheckWritable("out", f.out));
  ASSIGN_OR_RETURN(const std::vector<int> batches,
                   ParsePositiveInts("decode_batches", f.decode_batches));
  const ScratchDir scratch_dir("", "ced_moe_bench");  // removed on return
  const std::string& scratch = scratch_dir.path();
  ASSIGN_OR_RETURN(auto ced, LoadPreset(scratch, f.preset, f.seed));
  ASSIGN_OR_RETURN(auto dec, LoadPreset(scratch, f.preset + "-dec", f.seed));
  const ModelConfig& c = ced->config();
  if (!c.moe.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("--preset ", f.preset, " has no MoE layers"));
  }
  const MachineInfo machine = CollectMachineInfo();
  const Accounting a = ComputeAccounting(c);

  PrefillBenchOptions po;
  po.prompt_tokens = f.prompt_tokens;
  po.chunk_tokens = f.chunk_tokens;
  po.repetitions = f.prefill_reps;
  po.fma_seconds = f.fma_seconds;
  ASSIGN_OR_RETURN(PrefillReport prefill, RunPrefillBench(po, ced, dec));

  DecodeBenchOptions dopt;
  dopt.context = f.decode_context;
  dopt.batch_sizes = batches;
  dopt.steps = f.decode_steps;
  dopt.repetitions = f.decode_reps;
  dopt.bandwidth_bytes = static_cast<size_t>(f.bandwidth_mib) << 20;
  ASSIGN_OR_RETURN(DecodeReport decode, RunDecodeBench(dopt, ced));

  std::string md;
  absl::StrAppendFormat(&md, "# Engine bench: mixture of experts (`%s`)\n\n", f.preset);
  absl::StrAppendFormat(&md, "`%s`\n\n", command);
  absl::StrAppendFormat(&md,
                        "CPU: %s, %d OpenMP threads, kernels %s; medians [min .. max] of "
                        "the repetitions.\n\n",
                        machine.cpu_model, machine.omp_threads, machine.blas_core);
  const MoeConfig& m = *c.moe;
  absl::StrAppendFormat(
      &md,
      "Model: L %d (E %d), d %d, %d routed experts (%d active) + %d shared of width %d from "
      "layer %d, sources (window-only layer 0). %s parameters in all, %s activated per "
      "generated token, %s per prompt token (CED).\n\n",
      c.num_layers, c.num_encoder_layers, c.hidden_size, m.num_routed_experts,
      m.num_experts_per_tok, m.num_shared_experts, m.moe_intermediate_size, m.first_dense_layers,
      FormatParamCount(a.decode_params), FormatParamCount(a.params_per_generated_token),
      FormatParamCount(a.params_per_prompt_token));

  md += "## Prefill: CED vs decoder-only (same weights)\n\n";
  absl::StrAppendFormat(&md, "Prompt %d tokens, chunks of %d.\n\n", f.prompt_tokens,
                        f.chunk_tokens);
  md +=
      "| variant | replayed | TTFT (ms) | activated GFLOP | GFLOP/s | of FMA peak | CPU share "
      "|\n";
  md += "|---|---|---|---|---|---|---|\n";
  double peak = 0;
  for (double x : prefill.fma_avx512) peak = std::max(peak, x);
  for (double x : prefill.fma_avx2) peak = std::max(peak, x);
  for (const PrefillVariant& v : prefill.variants) {
    std::vector<double> rate, frac;
    for (double t : v.ttft_s) {
      rate.push_back(v.flops() / t);
      frac.push_back(peak > 0 ? v.flops() / t / peak : 0);
    }
    absl::StrAppendFormat(&md, "| %s | %d | %s | %.2f | %s | %s | %s |\n", v.name, v.replay_tokens,
                          Median(v.ttft_s, "%.1f", 1e3), v.flops() * 1e-9,
                          Median(rate, "%.1f", 1e-9), Median(frac, "%.0f%%", 100),
                          Median(v.cpu_share, "%.0f%%", 100));
  }
  const double ratio_bounded = prefill.variants.back().flops() / prefill.variants[0].flops();
  const double ratio_exact = prefill.variants.back().flops() / prefill.variants[1].flops();
  absl::StrAppendFormat(&md,
                        "\nSpeedup decoder-only / CED (paired per repetition): bounded %s "
                        "(FLOP ratio %.2fx), exact %s (FLOP ratio %.2fx). FMA peak of this run: "
                        "%.1f GFLOP/s. CPU share = process CPU time / (wall x threads): below "
                        "100%% the threads waited or other processes had the cores.\n\n",
                        Median(prefill.speedup_bounded, "%.2fx"), ratio_bounded,
                        Median(prefill.speedup_exact, "%.2fx"), ratio_exact, peak * 1e-9);

  md += "## Decode: against the memory roofline on activated bytes\n\n";
  absl::StrAppendFormat(
      &md,
      "Context %d tokens, %d steps per measurement. Weight bytes per step (f32) count what the "
      "step reads: attention, router, shared expert and the routed experts the batch's tokens "
      "are expected to touch (k = %d at batch 1, n (1 - (1 - k/n)^B) at batch B), plus the "
      "LM head and the K/V read. Best read bandwidth of the run: %.2f GB/s.\n\n",
      f.decode_context, f.decode_steps, m.num_experts_per_tok, decode.best_bandwidth * 1e-9);
  md +=
      "| batch | experts touched / layer | weight MB / step | tokens/s | ms / step | roofline "
      "tokens/s | of roofline | CPU share |\n";
  md += "|---|---|---|---|---|---|---|---|\n";
  for (const DecodeBatchResult& r : decode.batches) {
    absl::StrAppendFormat(&md, "| %d | %.1f of %d | %.1f | %s | %s | %s | %s | %s |\n", r.batch,
                          ExpectedExpertsTouched(c, r.batch), m.num_routed_experts,
                          r.weight_bytes * 1e-6, Median(r.tokens_per_s, "%.1f"),
                          Median(r.step_ms, "%.2f"), Median(r.roofline_tokens_per_s, "%.1f"),
                          Median(r.fraction, "%.0f%%", 100), Median(r.cpu_share, "%.0f%%", 100));
  }
  return md;
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  using namespace ced::bench;
  Flags f;
  FlagSet flags;
  flags.String("preset", &f.preset, "an MoE preset with a -dec twin");
  flags.Int("prompt_tokens", &f.prompt_tokens, "prefill prompt length");
  flags.Int("chunk_tokens", &f.chunk_tokens, "prefill chunk");
  flags.Int("prefill_reps", &f.prefill_reps, "prefill repetitions");
  flags.Double("fma_seconds", &f.fma_seconds, "seconds per FMA peak probe");
  flags.Int("decode_context", &f.decode_context, "tokens before decode");
  flags.String("decode_batches", &f.decode_batches, "comma-separated batch sizes");
  flags.Int("decode_steps", &f.decode_steps, "decode steps per measurement");
  flags.Int("decode_reps", &f.decode_reps, "decode repetitions");
  flags.Int("bandwidth_mib", &f.bandwidth_mib, "bandwidth probe buffer, MiB");
  flags.Int("seed", &f.seed, "model weights seed");
  flags.String("out", &f.out, "markdown report path (empty: stdout only)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ced_moe_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s",
                flags.Help("ced_moe_bench [flags]", "MoE prefill and decode figures").c_str());
    return 0;
  }
  if (f.prompt_tokens <= 0 || f.chunk_tokens <= 0 || f.prefill_reps <= 0 || f.decode_reps <= 0 ||
      f.decode_steps <= 0 || f.decode_context <= 0 || f.bandwidth_mib <= 0 || f.fma_seconds <= 0) {
    std::fprintf(stderr, "ced_moe_bench: sizes, repetitions and durations must be positive\n");
    return 2;
  }
  std::string command = "ced_moe_bench";
  for (int i = 1; i < argc; ++i) absl::StrAppend(&command, " ", argv[i]);
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t != nullptr) {
    command = absl::StrCat("OMP_NUM_THREADS=", t, " ", command);
  }
  absl::StatusOr<std::string> md = Run(f, command);
  if (!md.ok()) {
    std::fprintf(stderr, "ced_moe_bench: %s\n", std::string(md.status().message()).c_str());
    return 1;
  }
  std::printf("%s", md->c_str());
  if (!f.out.empty()) {
    if (absl::Status s = WriteTextFile(f.out, *md); !s.ok()) {
      std::fprintf(stderr, "ced_moe_bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
