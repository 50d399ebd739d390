#include "bench/engine/prefill_bench.h"

#include <omp.h>

#include <cstdio>

#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/machine.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"

namespace ced::bench {
namespace {

struct Timing {
  double ttft = 0, encoder = 0, replay = 0, cpu = 0;
  int token = -1;
};

// One prefill to the first token on a fresh sequence.
absl::StatusOr<Timing> TimePrefill(Engine& engine, const std::vector<int32_t>& prompt,
                                   const PrefillOptions& base) {
  ASSIGN_OR_RETURN(SeqId seq, engine.CreateSequence(static_cast<int>(prompt.size()) + 1));
  const bool ced = !engine.config().IsDecoderOnly();
  PrefillOptions po = base;
  po.defer_replay = ced;
  Timing t;
  const double c0 = ProcessCpuSeconds();
  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(PrefillResult pre, engine.Prefill(seq, prompt, po));
  const double t1 = NowSeconds();
  std::vector<float> logits = std::move(pre.logits);
  if (ced) {
    ASSIGN_OR_RETURN(logits, engine.Replay(seq));
  }
  t.token = Argmax(logits.data(), static_cast<int>(logits.size()));
  const double t2 = NowSeconds();
  t.cpu = ProcessCpuSeconds() - c0;
  t.ttft = t2 - t0;
  t.encoder = ced ? t1 - t0 : t.ttft;
  t.replay = ced ? t2 - t1 : 0;
  RETURN_IF_ERROR(engine.ReleaseSequence(seq));
  return t;
}

void Account(const ModelConfig& c, int n, int replay_start, PrefillVariant* v) {
  const Accounting a = ComputeAccounting(c);
  const int replayed = c.IsDecoderOnly() ? 0 : n - replay_start;
  v->replay_tokens = replayed;
  v->matmul_flops = MatmulFlops(PrefillMatmulParams(a, n, replayed));
  // By layer range: window-only layers (source -1) attend no global keys.
  if (c.IsDecoderOnly()) {
    v->attention_flops = AttentionFlopsForLayers(c, 0, n, 0, c.num_layers);
  } else {
    v->attention_flops = AttentionFlopsForLayers(c, 0, n, 0, c.num_encoder_layers) +
                         AttentionFlopsForLayers(c, replay_start, n, c.num_encoder_layers,
                                                 c.num_layers);
  }
}

}  // namespace

absl::StatusOr<PrefillReport> RunPrefillBench(const PrefillBenchOptions& options,
                                              std::shared_ptr<const ModelWeights> ced,
                                              std::shared_ptr<const ModelWeights> dec) {
  const int n = options.prompt_tokens;
  const int64_t kv_bytes = 2 * static_cast<int64_t>(n + 64) *
                           GlobalKvBytesPerToken(dec->config(), dec->config().kv_cache_dtype);
  ASSIGN_OR_RETURN(auto ced_engine, MakeBenchEngine(ced, kv_bytes, 4));
  ASSIGN_OR_RETURN(auto dec_engine, MakeBenchEngine(dec, kv_bytes, 4));
  const std::vector<int32_t> prompt = RandomPrompt(n, 2024);

  PrefillReport report;
  report.options = options;
  struct Run {
    Engine* engine;
    PrefillOptions po;
  };
  std::vector<Run> runs(3);
  report.variants.resize(3);
  const char* names[3] = {"ced-bounded", "ced-exact", "decoder-only"};
  const ReplayMode modes[3] = {ReplayMode::kBounded, ReplayMode::kExact, ReplayMode::kBounded};
  for (int i = 0; i < 3; ++i) {
    runs[i].engine = i < 2 ? ced_engine.get() : dec_engine.get();
    runs[i].po.replay = modes[i];
    runs[i].po.chunk_tokens = options.chunk_tokens;
    PrefillVariant& v = report.variants[i];
    v.name = names[i];
    v.preset = i < 2 ? "ced" : "dec";
    Account(runs[i].engine->config(), n, runs[i].engine->ReplayStart(n, modes[i], 0), &v);
  }

  std::fprintf(stderr, "[prefill] warm-up: one run of each variant (%d tokens)\n", n);
  for (Run& r : runs) {
    ASSIGN_OR_RETURN(Timing ignored, TimePrefill(*r.engine, prompt, r.po));
    (void)ignored;
  }
  for (int rep = 0; rep < options.repetitions; ++rep) {
    double ttft[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {  // rotate the order every repetition
      const int i = (rep + k) % 3;
      ASSIGN_OR_RETURN(Timing t, TimePrefill(*runs[i].engine, prompt, runs[i].po));
      PrefillVariant& v = report.variants[i];
      v.ttft_s.push_back(t.ttft);
      v.encoder_s.push_back(t.encoder);
      v.replay_s.push_back(t.replay);
      v.cpu_share.push_back(t.cpu / (t.ttft * omp_get_max_threads()));
      v.first_token = t.token;
      ttft[i] = t.ttft;
      std::fprintf(stderr,
                   "[prefill %d/%d] %-12s TTFT %.3f s (encoder pass %.3f s, replay %.3f s), "
                   "%.1f GFLOP/s, CPU share %.0f%%\n",
                   rep + 1, options.repetitions, v.name.c_str(), t.ttft, t.encoder, t.replay,
                   v.flops() / t.ttft * 1e-9, 100 * v.cpu_share.back());
    }
    report.speedup_bounded.push_back(ttft[2] / ttft[0]);
    report.speedup_exact.push_back(ttft[2] / ttft[1]);
    const ProbeSample avx2 = MeasureFmaPeak(FmaIsa::kAvx2, options.fma_seconds);
    const ProbeSample avx512 = MeasureFmaPeak(FmaIsa::kAvx512, options.fma_seconds);
    report.fma_avx2.push_back(avx2.rate);
    report.fma_avx2_share.push_back(avx2.cpu_share);
    report.fma_avx512.push_back(avx512.rate);
    report.fma_avx512_share.push_back(avx512.cpu_share);
    std::fprintf(stderr, "[prefill %d/%d] FMA peak: AVX2 %.1f GFLOP/s, AVX-512 %.1f GFLOP/s\n",
                 rep + 1, options.repetitions, report.fma_avx2.back() * 1e-9,
                 report.fma_avx512.back() * 1e-9);
  }
  return report;
}

}  // namespace ced::bench
