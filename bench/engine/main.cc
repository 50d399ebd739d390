// ced_engine_bench: the engine's headline figures in one run (see
// bench/README.md): CED vs decoder-only prefill, decode against the memory
// roofline, prefill against the FMA peak, and bounded-replay error.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/child_run.h"
#include "services/common/subprocess.h"
#include "bench/engine/report.h"
#include "engine/common/status.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::bench {
namespace {

struct Flags {
  bool quick = false;
  std::string sections = "prefill,decode,replay";
  int prompt_tokens = 2048;
  int chunk_tokens = 256;
  int prefill_reps = 9;
  double fma_seconds = 0.3;
  int decode_context = 512;
  std::string decode_batches = "1,16";
  int decode_steps = 8;
  int decode_reps = 9;
  int bandwidth_mib = 1024;
  std::string replay_presets = "small,tiny";
  std::string replay_lengths = "64,128,256,512,1024,2048";
  int replay_steps = 64;
  std::string resume_presets = "tiny,small";
  std::string resume_lengths = "256,1024,4096";
  std::string resume_cached = "0.25,0.5,1";
  int resume_steps = 64;
  int seed = 0;
  std::string scratch_dir;
  std::string ced_model, dec_model;  // model folders instead of small / small-dec
  std::string compare_blas_core = "none";
  std::string variants = "all";
  std::string peers = "auto";
  std::string markdown = "bench/results/engine.md";
  std::string json = "bench/results/engine.json";
};

// The OpenBLAS kernel set to compare prefill against, or "" for none: on an
// AVX-512 CPU, auto compares AVX-512 kernels with AVX2 ones.
std::string AltBlasCore(const std::string& flag, const MachineInfo& m) {
  if (flag == "none" || flag.empty()) return "";
  if (flag != "auto") return flag;
  if (!m.has_avx512) return "";
  return BlasIsa(m.blas_core) == "avx512" ? "Haswell" : "SkylakeX";
}

// --resume_cached: fractions in (0, 1], at least one.
absl::StatusOr<std::vector<double>> ParseCachedFractions(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !(v > 0 && v <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume_cached: '", part, "' is not a fraction in (0, 1]"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("--resume_cached is empty");
  return out;
}

absl::Status Validate(const Flags& f) {
  const std::pair<const char*, int> positive[] = {
      {"prompt_tokens", f.prompt_tokens}, {"chunk_tokens", f.chunk_tokens},
      {"prefill_reps", f.prefill_reps},   {"decode_context", f.decode_context},
      {"decode_steps", f.decode_steps},   {"decode_reps", f.decode_reps},
      {"bandwidth_mib", f.bandwidth_mib}, {"replay_steps", f.replay_steps},
      {"resume_steps", f.resume_steps}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " must be positive"));
    }
  }
  if (f.fma_seconds <= 0) return absl::InvalidArgumentError("--fma_seconds must be positive");
  RETURN_IF_ERROR(ParseCachedFractions(f.resume_cached).status());
  RETURN_IF_ERROR(ParsePositiveInts("resume_lengths", f.resume_lengths).status());
  if (f.peers != "auto" && f.peers != "on" && f.peers != "off") {
    return absl::InvalidArgumentError("--peers must be auto, on or off");
  }
  if (f.variants != "all" && f.variants != "active") {
    return absl::InvalidArgumentError("--variants must be all or active");
  }
  return absl::OkStatus();
}

// A child run of this bench: its JSON report's path and its flags: the same
// measurement flags, sections `sections`, reports <scratch>/<name>.md and
// .json, and no children of its own.
struct ChildRun {
  std::string json;
  std::vector<std::string> args;
};
ChildRun MakeChildRun(const Flags& f, const std::string& sections, const std::string& scratch,
                      const std::string& name) {
  ChildRun run;
  run.json = absl::StrCat(scratch, "/", name, ".json");
  run.args = {"--sections=" + sections,
              absl::StrCat("--prompt_tokens=", f.prompt_tokens),
              absl::StrCat("--chunk_tokens=", f.chunk_tokens),
              absl::StrCat("--prefill_reps=", f.prefill_reps),
              absl::StrCat("--fma_seconds=", f.fma_seconds),
              absl::StrCat("--decode_context=", f.decode_context),
              "--decode_batches=" + f.decode_batches,
              absl::StrCat("--decode_steps=", f.decode_steps),
              absl::StrCat("--decode_reps=", f.decode_reps),
              absl::StrCat("--bandwidth_mib=", f.bandwidth_mib),
              absl::StrCat("--seed=", f.seed),
              "--scratch_dir=" + scratch,
              absl::StrCat("--markdown=", scratch, "/", name, ".md"),
              "--json=" + run.json,
              "--compare_blas_core=none",
              "--variants=active",
              "--peers=off"};
  return run;
}

absl::Status Run(const Flags& f, const std::string& command) {
  const double t_start = NowSeconds();
  RETURN_IF_ERROR(Validate(f));
  ASSIGN_OR_RETURN(std::vector<int> batches, ParsePositiveInts("decode_batches", f.decode_batches));
  ASSIGN_OR_RETURN(std::vector<int> lengths, ParsePositiveInts("replay_lengths", f.replay_lengths));
  const std::vector<std::string> section_list = absl::StrSplit(f.sections, ',', absl::SkipEmpty());
  const std::set<std::string> sections(section_list.begin(), section_list.end());
  for (const std::string& s : sections) {
    if (s != "prefill" && s != "decode" && s != "replay" && s != "resume") {
      return absl::InvalidArgumentError(
          absl::StrCat("--sections: unknown section '", s, "' (prefill, decode, replay, resume)"));
    }
  }
  RETURN_IF_ERROR(CheckWritable("markdown", f.markdown));
  RETURN_IF_ERROR(CheckWritable("json", f.json));
  const ScratchDir scratch_dir(f.scratch_dir, "ced_engine_bench");  // ours: removed on return
  const std::string& scratch = scratch_dir.path();
  std::shared_ptr<const ModelWeights> ced, dec;
  if (f.ced_model.empty() != f.dec_model.empty()) {
    return absl::InvalidArgumentError("--ced_model and --dec_model go together");
  }
  if (!f.ced_model.empty()) {
    std::fprintf(stderr, "[setup] loading models %s, %s\n", f.ced_model.c_str(),
                 f.dec_model.c_str());
    ASSIGN_OR_RETURN(ced, LoadModelWeights(f.ced_model, WeightSet::kFull));
    ASSIGN_OR_RETURN(dec, LoadModelWeights(f.dec_model, WeightSet::kFull));
  } else {
    std::fprintf(stderr, "[setup] writing/loading models small, small-dec under %s\n",
                 scratch.c_str());
    ASSIGN_OR_RETURN(ced, LoadPreset(scratch, "small", f.seed));
    ASSIGN_OR_RETURN(dec, LoadPreset(scratch, "small-dec", f.seed));
  }

  BenchReport report;
  RunContext& ctx = report.context;
  ctx.command = command;
  ctx.date_utc = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  ctx.quick = f.quick;
  ctx.load_start = LoadAverage();
  ctx.machine = CollectMachineInfo();
  ctx.ced_config = ced->config();
  if (!f.ced_model.empty()) ctx.model_dirs = absl::StrCat(f.ced_model, ", ", f.dec_model);
  ctx.kv_format = std::string(kernels::KvFormatName(ced->config().kv_cache_dtype));
  ctx.block_size = EngineOptions().block_size;
  std::fprintf(stderr, "[setup] %s, %d cores, %d OpenMP threads, OpenBLAS %s, load %s\n",
               ctx.machine.cpu_model.c_str(), ctx.machine.logical_cores, ctx.machine.omp_threads,
               ctx.machine.blas_core.c_str(), ctx.load_start.c_str());
  if (ctx.machine.omp_wait_policy.empty() && ctx.machine.omp_threads > 1) {
    std::fprintf(stderr,
                 "[setup] note: OMP_WAIT_POLICY is unset; on a shared machine spinning OpenMP "
                 "threads starve each other (see bench/README.md): consider "
                 "OMP_WAIT_POLICY=passive\n");
  }

  if (sections.count("prefill")) {
    PrefillBenchOptions po;
    po.prompt_tokens = f.prompt_tokens;
    po.chunk_tokens = f.chunk_tokens;
    po.repetitions = f.prefill_reps;
    po.fma_seconds = f.fma_seconds;
    auto r = RunPrefillBench(po, ced, dec);
    if (!r.ok()) return r.status();
    report.prefill = std::move(*r);
    report.has_prefill = true;
  }
  if (sections.count("decode")) {
    DecodeBenchOptions d;
    d.context = f.decode_context;
    d.batch_sizes = batches;
    d.steps = f.decode_steps;
    d.repetitions = f.decode_reps;
    d.bandwidth_bytes = static_cast<size_t>(f.bandwidth_mib) << 20;
    auto r = RunDecodeBench(d, ced);
    if (!r.ok()) return r.status();
    report.decode = std::move(*r);
    report.has_decode = true;
  }
  if (sections.count("replay")) {
    ReplayErrorOptions ro;
    ro.lengths = lengths;
    ro.steps = f.replay_steps;
    for (absl::string_view preset : absl::StrSplit(f.replay_presets, ',', absl::SkipEmpty())) {
      std::shared_ptr<const ModelWeights> w = preset == "small" ? ced : nullptr;
      if (w == nullptr) {
        ASSIGN_OR_RETURN(w, LoadPreset(scratch, std::string(preset), f.seed));
      }
      ASSIGN_OR_RETURN(auto rows, RunReplayError(ro, std::string(preset), w));
      report.replay.insert(report.replay.end(), rows.begin(), rows.end());
    }
  }
  if (sections.count("resume")) {
    ResumeErrorOptions ro;
    ASSIGN_OR_RETURN(ro.lengths, ParsePositiveInts("resume_lengths", f.resume_lengths));
    ASSIGN_OR_RETURN(ro.cached_fractions, ParseCachedFractions(f.resume_cached));
    ro.steps = f.resume_steps;
    for (absl::string_view preset : absl::StrSplit(f.resume_presets, ',', absl::SkipEmpty())) {
      std::shared_ptr<const ModelWeights> w = preset == "small" ? ced : nullptr;
      if (w == nullptr) {
        ASSIGN_OR_RETURN(w, LoadPreset(scratch, std::string(preset), f.seed));
      }
      ASSIGN_OR_RETURN(auto rows, RunResumeError(ro, std::string(preset), w));
      report.resume.insert(report.resume.end(), rows.begin(), rows.end());
      ASSIGN_OR_RETURN(auto at_rest, RunAtRest(std::string(preset), w));
      report.at_rest.insert(report.at_rest.end(), at_rest.begin(), at_rest.end());
    }
  }
  if (f.variants == "all" && (report.has_prefill || report.has_decode)) {
    for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
      if (isa == kernels::ActiveCpuIsa()) continue;
      const std::string name(kernels::CpuIsaName(isa));
      std::fprintf(stderr, "[variants] prefill and decode again with CED_CPU_ISA=%s\n",
                   name.c_str());
      std::vector<std::string> parts;
      if (report.has_prefill) parts.push_back("prefill");
      if (report.has_decode) parts.push_back("decode");
      const ChildRun run =
          MakeChildRun(f, absl::StrJoin(parts, ","), scratch, absl::StrCat("variant_", name));
      auto child = RunChild(run.args, "CED_CPU_ISA=" + name, run.json);
      if (!child.ok()) return child.status();
      report.variant_reports.push_back(std::move(*child));
    }
  }
  if (f.peers != "off" && report.has_prefill) {
    const std::string exe =
        (std::filesystem::path(std::filesystem::read_symlink("/proc/self/exe")).parent_path() /
         "blas_compare")
            .string();
    if (!std::filesystem::exists(exe)) {
      if (f.peers == "on") {
        return absl::FailedPreconditionError(
            absl::StrCat("--peers=on: ", exe, " is not built (it needs oneDNN, libdnnl-dev)"));
      }
      std::fprintf(stderr, "[peers] %s not built (oneDNN missing): section 6 skipped\n",
                   exe.c_str());
    } else {
      const std::vector<std::string> args = {
          absl::StrCat("--threads=", ctx.machine.omp_threads),
          absl::StrCat("--reps=", std::max(7, f.prefill_reps))};
      std::fprintf(stderr, "[peers] blas_compare %s %s\n", args[0].c_str(), args[1].c_str());
      services::SubprocessOptions child;
      child.argv = {exe, args[0], args[1]};
      absl::StatusOr<services::CompletedRun> run =
          services::RunToCompletion(std::move(child), /*timeout_s=*/-1);
      if (!run.ok()) {
        return absl::InternalError(absl::StrCat("cannot run blas_compare: ", run.status().message()));
      }
      const std::string& out = run->output;
      if (!run->exited_ok()) {
        return absl::InternalError(absl::StrCat("blas_compare failed (wait status ",
                                                run->wait_status, "); its output:\n", out));
      }
      report.peer_gemm_command = absl::StrCat("blas_compare ", args[0], " ", args[1]);
      report.peer_gemm_table = out;
    }
  }
  const std::string alt = AltBlasCore(f.compare_blas_core, ctx.machine);
  if (report.has_prefill && !alt.empty()) {
    std::fprintf(stderr, "[blas] prefill again in a child process with OPENBLAS_CORETYPE=%s\n",
                 alt.c_str());
    const ChildRun run = MakeChildRun(f, "prefill", scratch, "blas_child");
    auto child = RunChild(run.args, "OPENBLAS_CORETYPE=" + alt, run.json);
    if (!child.ok()) return child.status();
    report.alt_blas_core = alt;
    report.alt_report = std::move(*child);
  }
  ctx.load_end = LoadAverage();
  ctx.wall_s = NowSeconds() - t_start;
  const nlohmann::ordered_json doc = BuildJson(report);
  RETURN_IF_ERROR(WriteTextFile(f.markdown, FormatMarkdown(doc)));
  RETURN_IF_ERROR(WriteTextFile(f.json, doc.dump(2) + "\n"));
  std::fprintf(stderr, "[done] %.0f s; wrote %s and %s\n", ctx.wall_s, f.markdown.c_str(),
               f.json.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  using ced::bench::Flags;
  if (const std::string error = ced::kernels::ValidateCpuIsaEnv(); !error.empty()) {
    std::fprintf(stderr, "ced_engine_bench: %s\n", error.c_str());
    return 2;
  }
  Flags f;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick" || std::string(argv[i]) == "--quick=true") {
      f.quick = true;  // smaller defaults; explicit flags still win
      f.prefill_reps = 3;
      f.decode_reps = 3;
      f.bandwidth_mib = 512;
      f.replay_lengths = "64,256,1024";
      f.replay_steps = 32;
    }
  }
  ced::bench::FlagSet flags;
  flags.Bool("quick", &f.quick, "fewer repetitions and replay lengths (about half the time)");
  flags.String("sections", &f.sections,
               "comma list of: prefill, decode, replay, resume (resume: prefix-cache resume "
               "error, run only when named)");
  flags.Int("prompt_tokens", &f.prompt_tokens, "prefill prompt length");
  flags.Int("chunk_tokens", &f.chunk_tokens, "prefill chunk size");
  flags.Int("prefill_reps", &f.prefill_reps, "prefill repetitions per variant");
  flags.Double("fma_seconds", &f.fma_seconds, "seconds per FMA-peak sample");
  flags.Int("decode_context", &f.decode_context, "prompt tokens before decoding");
  flags.String("decode_batches", &f.decode_batches, "comma list of decode batch sizes");
  flags.Int("decode_steps", &f.decode_steps, "decode steps per measurement");
  flags.Int("decode_reps", &f.decode_reps, "decode repetitions per batch size");
  flags.Int("bandwidth_mib", &f.bandwidth_mib, "read-bandwidth probe buffer, MiB");
  flags.String("replay_presets", &f.replay_presets, "models for the replay-error sweep");
  flags.String("replay_lengths", &f.replay_lengths, "prompt lengths of the replay sweep");
  flags.Int("replay_steps", &f.replay_steps, "greedy steps K compared per length");
  flags.String("resume_presets", &f.resume_presets,
               "models for the resume-error sweep (section resume, not in the default set)");
  flags.String("resume_lengths", &f.resume_lengths, "prompt lengths N of the resume sweep");
  flags.String("resume_cached", &f.resume_cached,
               "cached prefixes P as fractions of N - 1 (rounded down to full blocks)");
  flags.Int("resume_steps", &f.resume_steps, "greedy steps K compared per (N, P)");
  flags.Int("seed", &f.seed, "synthetic weights seed");
  flags.String("ced_model", &f.ced_model,
               "prefill and decode sections on this CED model folder instead of preset small "
               "(with --dec_model, its decoder-only twin)");
  flags.String("dec_model", &f.dec_model, "the decoder-only twin of --ced_model");
  flags.String("scratch_dir", &f.scratch_dir,
               "where models are written (kept and reused); default: a temporary directory");
  flags.String("compare_blas_core", &f.compare_blas_core,
               "rerun the prefill section in a child process with OPENBLAS_CORETYPE set to "
               "this; auto = on AVX-512 CPUs, the other ISA's kernels (Haswell <-> SkylakeX); "
               "none = off (the default: the engine's GEMMs no longer run on OpenBLAS)");
  flags.String("variants", &f.variants,
               "CPU kernel variants to measure: all = prefill and decode again in a child "
               "process for every other variant this CPU supports (CED_CPU_ISA); active = only "
               "the one this process runs");
  flags.String("peers", &f.peers,
               "run blas_compare (built next to this binary; needs oneDNN) after the prefill "
               "section: the engine's GEMM per variant vs OpenBLAS and oneDNN sgemm on the same "
               "shapes; auto = when built, on = required, off");
  flags.String("markdown", &f.markdown, "markdown report path");
  flags.String("json", &f.json, "JSON report path");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ced_engine_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags
                          .Help("ced_engine_bench [flags]",
                                "Benchmarks the CED engine on the CPU backend and writes a "
                                "markdown and a JSON report:\n"
                                "  1. prefill TTFT of `small` (CED) vs `small-dec` "
                                "(decoder-only twin, same weights),\n"
                                "  2. decode tokens/s vs the measured memory-bandwidth "
                                "roofline,\n"
                                "  3. prefill GFLOP/s vs the measured FMA peak,\n"
                                "  4. bounded-replay error against the full forward,\n"
                                "  8. (--sections=resume) prefix-cache resume error against a "
                                "fresh prefill.\n"
                                "Run from the repository root; threads follow "
                                "OMP_NUM_THREADS (default: all cores).")
                          .c_str());
    return 0;
  }
  // With the environment variables that change what the bench measures.
  absl::Status s = ced::bench::Run(
      f, ced::bench::CommandLine(argc, argv,
                                 {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                  "OPENBLAS_CORETYPE", "CED_CPU_ISA"}));
  if (!s.ok()) {
    std::fprintf(stderr, "ced_engine_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
