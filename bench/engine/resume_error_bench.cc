#include "bench/engine/resume_error_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/replay_error_bench.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::bench {
namespace {

struct Trace {
  std::vector<std::vector<float>> logits;  // per step
  double prefill_s = 0;
};

// Prefill of `seq` + `steps` - 1 decode steps. With `forced` empty, greedy
// (argmax fed back); otherwise step k+1 is fed forced[k]. Releases `seq`.
absl::StatusOr<Trace> Run(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                          int steps, ReplayMode mode, const std::vector<int32_t>& forced) {
  const int V = engine.config().vocab_size;
  PrefillOptions po;
  po.replay = mode;
  Trace t;
  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(PrefillResult pre, engine.Prefill(seq, prompt, po));
  t.prefill_s = NowSeconds() - t0;
  t.logits.push_back(std::move(pre.logits));
  for (int k = 0; k + 1 < steps; ++k) {
    const int32_t tok = forced.empty() ? Argmax(t.logits.back().data(), V) : forced[k];
    DecodeInput in{seq, tok};
    ASSIGN_OR_RETURN(std::vector<float> logits, engine.Decode(absl::MakeConstSpan(&in, 1)));
    t.logits.push_back(std::move(logits));
  }
  RETURN_IF_ERROR(engine.ReleaseSequence(seq));
  return t;
}

}  // namespace

absl::StatusOr<std::vector<ResumeErrorRow>> RunResumeError(
    const ResumeErrorOptions& options, const std::string& preset,
    std::shared_ptr<const ModelWeights> weights) {
  const ModelConfig& c = weights->config();
  const int V = c.vocab_size, K = options.steps;
  int max_len = 0;
  for (int n : options.lengths) max_len = std::max(max_len, n);
  // Room for the fresh sequence's blocks (cached after release) plus one
  // running resumed sequence, with slack.
  const int64_t kv_bytes =
      3 * static_cast<int64_t>(max_len + K + 64) * GlobalKvBytesPerToken(c, c.kv_cache_dtype);
  ASSIGN_OR_RETURN(auto engine, MakeBenchEngine(weights, kv_bytes, 4));
  const int bs = engine->cache_stats().block_size;
  std::vector<ResumeErrorRow> rows;
  for (int n : options.lengths) {
    if (n + K > c.max_position || n < 2) continue;
    const std::vector<int32_t> prompt = RandomPrompt(n, 7000 + n);
    std::set<int> ps;
    for (double f : options.cached_fractions) {
      const int p = static_cast<int>(std::floor(f * (n - 1) / bs)) * bs;
      if (p > 0 && p <= n - 1) ps.insert(p);
    }
    for (ReplayMode mode : {ReplayMode::kBounded, ReplayMode::kExact}) {
      // Fresh: no lookup (CreateSequence), so nothing cached is reused; its
      // prompt blocks join the cache when it is released.
      engine->EvictCachedBlocks();
      ASSIGN_OR_RETURN(SeqId fresh_seq, engine->CreateSequence(n + K));
      ASSIGN_OR_RETURN(Trace fresh, Run(*engine, fresh_seq, prompt, K, mode, {}));
      std::vector<int32_t> tokens;
      for (const auto& l : fresh.logits) tokens.push_back(Argmax(l.data(), V));
      for (int p : ps) {
        int cached = 0;
        ASSIGN_OR_RETURN(SeqId seq, engine->CreateSequenceForPrompt(prompt, n + K, &cached, p));
        if (cached != p) {
          return absl::InternalError(absl::StrCat("resume bench: ", preset, " N=", n,
                                                  ": asked for P=", p, ", the cache gave ", cached));
        }
        ASSIGN_OR_RETURN(Trace resumed, Run(*engine, seq, prompt, K, mode, tokens));
        ResumeErrorRow row;
        row.preset = preset;
        row.mode = ReplayModeName(mode);
        row.prompt_tokens = n;
        row.cached_tokens = p;
        row.encoder_start = engine->ResumeStart(n, p, mode, 0);
        row.replay_window = n - engine->ReplayStart(n, mode, 0);
        row.steps = K;
        row.fresh_prefill_s = fresh.prefill_s;
        row.resumed_prefill_s = resumed.prefill_s;
        int agree = 0;
        for (int k = 0; k < K; ++k) {
          const float* ref = fresh.logits[static_cast<size_t>(k)].data();
          const float* got = resumed.logits[static_cast<size_t>(k)].data();
          const double kl = LogitKl(ref, got, V);
          if (k == 0) row.kl_first = kl;
          row.kl_mean += kl / K;
          row.kl_max = std::max(row.kl_max, kl);
          const bool same = Argmax(got, V) == tokens[static_cast<size_t>(k)];
          agree += same;
          if (!same && row.first_divergence < 0) row.first_divergence = k;
        }
        row.top1_agreement = static_cast<double>(agree) / K;
        std::fprintf(stderr,
                     "[resume %s %s N=%d P=%d a=%d] KL first %.3g, mean %.3g, max %.3g nats; "
                     "top-1 %.0f%%; first divergence %s; prefill fresh %.3f s, resumed %.3f s\n",
                     preset.c_str(), row.mode.c_str(), n, p, row.encoder_start, row.kl_first,
                     row.kl_mean, row.kl_max, 100 * row.top1_agreement,
                     row.first_divergence < 0 ? "none"
                                              : std::to_string(row.first_divergence).c_str(),
                     row.fresh_prefill_s, row.resumed_prefill_s);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

absl::StatusOr<std::vector<AtRestRow>> RunAtRest(const std::string& preset,
                                                 std::shared_ptr<const ModelWeights> weights) {
  const ModelConfig& c = weights->config();
  std::vector<AtRestRow> rows;
  for (int f = 0; f < kernels::kNumKvFormats; ++f) {
    const KvFormat format = static_cast<KvFormat>(f);
    EngineOptions o;
    o.kv_format = format;
    o.kv_cache_bytes = 64ll << 20;
    o.max_sequences = 2;
    ASSIGN_OR_RETURN(auto engine, Engine::CreateWithWeights(o, weights));
    const int n = std::min(512, c.max_position - 1);
    ASSIGN_OR_RETURN(SeqId seq, engine->CreateSequence(n));
    PrefillOptions po;
    ASSIGN_OR_RETURN(PrefillResult pre, engine->Prefill(seq, RandomPrompt(n, 99), po));
    (void)pre;
    RETURN_IF_ERROR(engine->ReleaseSequence(seq));
    const CacheStats st = engine->cache_stats();
    AtRestRow row;
    row.preset = preset;
    row.format = std::string(kernels::KvFormatName(format));
    row.block_size = st.block_size;
    row.cached_blocks = st.cached_blocks;
    row.block_bytes = static_cast<int64_t>(st.block_bytes);
    row.bytes_per_token = static_cast<double>(st.block_bytes) / st.block_size;
    row.accounting_bytes_per_token = GlobalKvBytesPerToken(c, format);
    row.local_bytes_per_sequence = LocalKvBytesPerSequence(c, format);
    std::fprintf(stderr, "[at rest %s %s] %d blocks cached, %.1f B/token (accounting %lld)\n",
                 preset.c_str(), row.format.c_str(), row.cached_blocks, row.bytes_per_token,
                 static_cast<long long>(row.accounting_bytes_per_token));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ced::bench
