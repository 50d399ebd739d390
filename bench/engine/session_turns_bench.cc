// session_turns_bench: the prefill work of an agent session's turns on one
// prefill engine, the way a prefill worker runs them (encoder and decoder K/V
// projections, the replay deferred to the decode worker), three ways side by
// side per turn:
//   recomputed  the whole prompt (no prefix cache),
//   from blocks the previous turns' cached blocks reused, the encoder windows
//               rebuilt from R tokens back (DESIGN.md §1.6; --held-sequences 0),
//   held        the previous turn's sequence held and continued from its
//               windows (EngineOptions::max_held_sequences; the worker default).
// Turn k's prompt is turn k-1's, an answer (decoded elsewhere, so not cached
// here) and a tool result, as ced-loadgen --workload agent sends them. The
// three engines run each turn in rotating order, repetitions on new tokens.
// In process: no queue, no transport, no other process; what the cache saves
// in compute alone. Markdown on stdout, progress on stderr.
#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/common/flags.h"
#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/machine.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"
#include "kernels/cpu/isa.h"

namespace ced::bench {
namespace {

struct Args {
  std::string presets = "small,small-dec";
  int turns = 8;
  int first = 1000;
  int tool = 1000;
  int answer = 16;
  int reps = 3;
  int chunk = 256;
  int threads = 0;
  std::string scratch_dir;
};

enum Way { kRecomputed = 0, kBlocks = 1, kHeld = 2 };
constexpr const char* kWayNames[] = {"recomputed", "from blocks", "held"};

struct TurnTimes {
  std::vector<double> seconds[3];
  int prompt_tokens = 0;
  int cached[3] = {0, 0, 0};
  int computed_from[3] = {0, 0, 0};
};

// One turn's prefill on `e` as a prefill worker runs it; then the sequence is
// held (when the engine holds any) or released.
absl::StatusOr<double> Turn(Engine& e, const std::vector<int32_t>& prompt, int chunk, int* cached,
                            int* computed_from) {
  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(SeqId seq,
                   e.CreateSequenceForPrompt(prompt, static_cast<int>(prompt.size()), cached));
  PrefillOptions po;
  po.chunk_tokens = chunk;
  po.defer_replay = !e.config().IsDecoderOnly();
  ASSIGN_OR_RETURN(PrefillResult r, e.Prefill(seq, prompt, po));
  const double s = NowSeconds() - t0;
  *computed_from = r.computed_from;
  RETURN_IF_ERROR(e.HoldSequence(seq));  // released when the engine holds none
  return s;
}

absl::Status RunPreset(const Args& a, const std::string& preset) {
  ASSIGN_OR_RETURN(auto weights, LoadPreset(a.scratch_dir, preset, 1));
  const ModelConfig& c = weights->config();
  const int longest = a.first + (a.turns - 1) * (a.answer + a.tool);
  if (longest > c.max_position) {
    return absl::InvalidArgumentError(absl::StrCat("a session reaches ", longest, " tokens, past ",
                                                   preset, "'s max_position ", c.max_position));
  }
  // Room for one session's blocks, twice over (nothing is evicted).
  const int64_t kv_bytes =
      2 * static_cast<int64_t>(longest + 64) * GlobalKvBytesPerToken(c, c.kv_cache_dtype) +
      (64ll << 20);
  std::unique_ptr<Engine> engines[3];
  for (int w = 0; w < 3; ++w) {
    EngineOptions o;
    o.kv_cache_bytes = kv_bytes;
    o.max_sequences = 4;
    o.prefix_cache = w != kRecomputed;
    o.max_held_sequences = w == kHeld ? 8 : 0;
    ASSIGN_OR_RETURN(engines[w], Engine::CreateWithWeights(o, weights));
  }
  // Warm-up: weights packed, scratch grown.
  for (auto& e : engines) {
    int cached = 0, from = 0;
    RETURN_IF_ERROR(Turn(*e, RandomPrompt(a.chunk + 1, 1), a.chunk, &cached, &from).status());
    e->DropHeldSequences();
    e->EvictCachedBlocks();
  }
  std::vector<TurnTimes> turns(a.turns);
  for (int rep = 0; rep < a.reps; ++rep) {
    std::vector<int32_t> prompt = RandomPrompt(a.first, 100 + 1000 * rep);
    for (int k = 0; k < a.turns; ++k) {
      if (k > 0) {
        const auto answer = RandomPrompt(a.answer, 200 + 1000 * rep + k);
        const auto tool = RandomPrompt(a.tool, 300 + 1000 * rep + k);
        prompt.insert(prompt.end(), answer.begin(), answer.end());
        prompt.insert(prompt.end(), tool.begin(), tool.end());
      }
      TurnTimes& t = turns[k];
      t.prompt_tokens = static_cast<int>(prompt.size());
      for (int i = 0; i < 3; ++i) {
        const int w = (i + k + rep) % 3;  // rotate who goes first
        ASSIGN_OR_RETURN(double s,
                         Turn(*engines[w], prompt, a.chunk, &t.cached[w], &t.computed_from[w]));
        t.seconds[w].push_back(s);
      }
    }
    for (auto& e : engines) {  // the next repetition's session starts cold
      e->DropHeldSequences();
      e->EvictCachedBlocks();
    }
    std::fprintf(stderr, "[turns] %s repetition %d/%d done\n", preset.c_str(), rep + 1, a.reps);
  }
  std::printf("\n## %s (%s, L %d, E %d, W %d, R %d)\n\n", preset.c_str(),
              c.IsDecoderOnly() ? "decoder-only" : "CED", c.num_layers, c.num_encoder_layers,
              c.sliding_window, c.replay_window);
  std::printf(
      "| turn | prompt | cached: from blocks / held | encoder from: from blocks / held | "
      "recomputed ms | from blocks ms | held ms | recomputed / from blocks | recomputed / held | "
      "from blocks / held |\n|---:|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  double sum[3] = {0, 0, 0};
  for (int k = 0; k < a.turns; ++k) {
    const TurnTimes& t = turns[k];
    double med[3];
    for (int w = 0; w < 3; ++w) med[w] = Summarize(t.seconds[w]).median;
    if (k > 0) {
      for (int w = 0; w < 3; ++w) sum[w] += med[w];
    }
    std::printf("| %d | %d | %d / %d | %d / %d | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.3f |\n",
                k + 1, t.prompt_tokens, t.cached[kBlocks], t.cached[kHeld],
                t.computed_from[kBlocks], t.computed_from[kHeld], 1e3 * med[kRecomputed],
                1e3 * med[kBlocks], 1e3 * med[kHeld], med[kRecomputed] / med[kBlocks],
                med[kRecomputed] / med[kHeld], med[kBlocks] / med[kHeld]);
  }
  if (a.turns > 1) {
    std::printf(
        "| turns >= 2, sum of medians | | | | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.3f |\n",
        1e3 * sum[kRecomputed], 1e3 * sum[kBlocks], 1e3 * sum[kHeld],
        sum[kRecomputed] / sum[kBlocks], sum[kRecomputed] / sum[kHeld], sum[kBlocks] / sum[kHeld]);
  }
  return absl::OkStatus();
}

absl::Status Main(int argc, char** argv) {
  Args a;
  FlagSet f;
  f.String("presets", &a.presets, "comma list of models (CED and decoder-only presets)");
  f.Int("turns", &a.turns, "turns per session");
  f.Int("first", &a.first, "tokens of the first prompt");
  f.Int("tool", &a.tool, "tokens of the tool result each later turn appends");
  f.Int("answer", &a.answer, "tokens of each answer (decoded elsewhere; appended to the prompt)");
  f.Int("reps", &a.reps, "sessions run (new tokens each); per turn the median is reported");
  f.Int("chunk", &a.chunk, "prefill chunk in tokens (the worker's --chunk)");
  f.Int("threads", &a.threads, "OpenMP threads (0: the default, all cores)");
  f.String("scratch-dir", &a.scratch_dir,
           "where the preset models are written (kept and reused); default: a temporary "
           "directory");
  RETURN_IF_ERROR(f.Parse(argc, argv));
  if (f.help_requested()) {
    std::printf("%s", f.Help("session_turns_bench [flags]",
                             "An agent session's turns on one prefill engine, each turn's "
                             "prefill recomputed, resumed from cached blocks (encoder windows "
                             "rebuilt), and continued from the held sequence, side by side. "
                             "Markdown on stdout.")
                          .c_str());
    return absl::OkStatus();
  }
  if (a.turns < 1 || a.first < 2 || a.tool < 1 || a.answer < 0 || a.reps < 1 || a.chunk < 1) {
    return absl::InvalidArgumentError(
        "--turns, --tool, --reps and --chunk must be >= 1, --first >= 2, --answer >= 0");
  }
  if (a.threads < 0) return absl::InvalidArgumentError("--threads: must be >= 0");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const ScratchDir scratch(a.scratch_dir, "session_turns_bench");  // ours: removed on return
  a.scratch_dir = scratch.path();
  const MachineInfo machine = CollectMachineInfo();
  std::printf("# CPU: %s, kernels %s, %d thread(s)\n", machine.cpu_model.c_str(),
              std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())).c_str(),
              omp_get_max_threads());
  std::printf(
      "# session: first prompt %d tokens, then +%d answer +%d tool a turn, %d turns; chunk %d; "
      "%d repetitions, ms = median per turn (create + prefill, replay deferred)\n",
      a.first, a.answer, a.tool, a.turns, a.chunk, a.reps);
  for (absl::string_view preset : absl::StrSplit(a.presets, ',', absl::SkipEmpty())) {
    RETURN_IF_ERROR(RunPreset(a, std::string(preset)));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  if (const std::string err = ced::kernels::ValidateCpuIsaEnv(); !err.empty()) {
    std::fprintf(stderr, "session_turns_bench: %s\n", err.c_str());
    return 2;
  }
  const absl::Status s = ced::bench::Main(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "session_turns_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
