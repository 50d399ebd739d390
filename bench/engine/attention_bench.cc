// attention_bench: the CPU attention of a long prefill chunk over a cached
// context (a resumed agent turn, or a long prompt's later chunks), per kernel
// variant this CPU supports, at several context lengths: time per call,
// GFLOP/s (the cost model's attention FLOPs: QK and PV over each row's keys)
// and the share of that variant's FMA peak. One layer of the model's heads,
// its local window and K/V cache format (AttentionProbe, shared with
// ced-sim-calibrate). Markdown on stdout, progress on stderr.
#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/flags.h"
#include "bench/common/stats.h"
#include "bench/engine/attention_probe.h"
#include "bench/engine/machine.h"
#include "engine/common/status.h"
#include "engine/model/presets.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::bench {
namespace {

namespace k = ced::kernels;

struct Args {
  std::string preset = "small";
  std::string contexts = "1024,4096,16384,32768";
  int rows = 256;
  int reps = 7;
  int threads = 0;
  std::string variants;
  std::string kv_format;
  int block_size = 16;
};

absl::Status Main(int argc, char** argv) {
  Args a;
  FlagSet f;
  f.String("preset", &a.preset,
           "model shape whose heads, window and cache format are used (any context length: "
           "the kernels do not read max_position)");
  f.String("contexts", &a.contexts, "comma list of cached tokens before the chunk");
  f.Int("rows", &a.rows, "query rows of the chunk (the prefill chunk size)");
  f.Int("reps", &a.reps, "timed calls per context and variant (after one warm-up call)");
  f.Int("threads", &a.threads, "OpenMP threads (0: the default, all cores)");
  f.String("variants", &a.variants,
           "comma list of kernel variants (avx512, avx2, generic); default: every one this CPU "
           "supports");
  f.String("kv-format", &a.kv_format,
           "K/V cache format (f32, bf16, fp8_e4m3, fp4_e2m1); "
           "default: the preset's");
  f.Int("block-size", &a.block_size, "tokens per global K/V block");
  RETURN_IF_ERROR(f.Parse(argc, argv));
  if (f.help_requested()) {
    std::printf("%s", f.Help("attention_bench [flags]",
                             "Long-context CPU attention per kernel variant: one prefill chunk "
                             "of --rows query rows after each of --contexts cached tokens, one "
                             "layer of --preset's heads. Markdown on stdout.")
                          .c_str());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ModelConfig c, PresetConfig(a.preset));
  ASSIGN_OR_RETURN(std::vector<int> contexts, ParsePositiveInts("contexts", a.contexts));
  if (a.rows < 1) return absl::InvalidArgumentError("--rows: must be >= 1");
  if (a.reps < 1) return absl::InvalidArgumentError("--reps: must be >= 1");
  if (a.threads < 0) return absl::InvalidArgumentError("--threads: must be >= 0");
  if (a.block_size < 1) return absl::InvalidArgumentError("--block-size: must be >= 1");
  k::KvFormat format = c.kv_cache_dtype;
  if (!a.kv_format.empty() && !k::ParseKvFormat(a.kv_format, &format)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-format: expected f32, bf16, fp8_e4m3 or fp4_e2m1, got '", a.kv_format, "'"));
  }
  ASSIGN_OR_RETURN(const std::vector<k::CpuIsa> isas, ParseKernelVariants(a.variants));
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const MachineInfo machine = CollectMachineInfo();
  std::vector<double> peaks;
  for (k::CpuIsa isa : isas) peaks.push_back(VariantFmaPeakGflops(isa));

  std::printf("# CPU: %s\n", machine.cpu_model.c_str());
  std::printf(
      "# %d thread(s); model %s (H %d, G %d, D %d, W %d), K/V %s in blocks of %d; "
      "%d query rows per call, %d timed calls after one warm-up\n",
      omp_get_max_threads(), a.preset.c_str(), c.num_heads, c.num_kv_heads, c.head_dim,
      c.sliding_window, std::string(k::KvFormatName(format)).c_str(), a.block_size, a.rows, a.reps);
  std::printf("# FMA peak on these threads:");
  for (size_t i = 0; i < isas.size(); ++i) {
    if (peaks[i] > 0) {
      std::printf(" %s %.1f GFLOP/s", std::string(k::CpuIsaName(isas[i])).c_str(), peaks[i]);
    }
  }
  std::printf("\n\n| context | rows | GFLOP per call |");
  for (k::CpuIsa isa : isas) {
    std::printf(" %s: ms median (min..max) | GFLOP/s (%% of peak) |",
                std::string(k::CpuIsaName(isa)).c_str());
  }
  std::printf("\n|---:|---:|---:|");
  for (size_t i = 0; i < isas.size(); ++i) std::printf("---|---|");
  std::printf("\n");
  const k::CpuIsa active = k::ActiveCpuIsa();
  for (int context : contexts) {
    AttentionProbe probe(c, format, a.block_size, a.rows, context);
    std::string line = absl::StrFormat("| %d | %d | %.2f |", context, a.rows, probe.flops() * 1e-9);
    for (size_t i = 0; i < isas.size(); ++i) {
      k::SetActiveCpuIsa(isas[i]);
      probe.Run();  // warm-up: gathers, thread-local buffers
      std::vector<double> seconds;
      for (int r = 0; r < a.reps; ++r) {
        const double t0 = NowSeconds();
        probe.Run();
        seconds.push_back(NowSeconds() - t0);
      }
      const Summary s = Summarize(seconds);
      const double gflops = probe.flops() / s.median * 1e-9;
      line += absl::StrFormat(" %.2f (%.2f..%.2f) | %.1f", 1e3 * s.median, 1e3 * s.min, 1e3 * s.max,
                              gflops);
      line += peaks[i] > 0 ? absl::StrFormat(" (%.0f%%) |", 100 * gflops / peaks[i]) : " |";
      std::fprintf(stderr, "[attention] context %d, %s: %.2f ms\n", context,
                   std::string(k::CpuIsaName(isas[i])).c_str(), 1e3 * s.median);
    }
    k::SetActiveCpuIsa(active);
    std::printf("%s\n", line.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  if (const std::string err = ced::kernels::ValidateCpuIsaEnv(); !err.empty()) {
    std::fprintf(stderr, "attention_bench: %s\n", err.c_str());
    return 2;
  }
  const absl::Status s = ced::bench::Main(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "attention_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
