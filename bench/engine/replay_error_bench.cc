#include "bench/engine/replay_error_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"

namespace ced::bench {
namespace {

// log-softmax in double.
std::vector<double> LogSoftmax(const float* logits, int n) {
  double m = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(logits[i] - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = logits[i] - lse;
  return out;
}

// Prefill + `steps` steps. With `forced` empty, greedy (argmax fed back);
// otherwise step k+1 is fed forced[k]. Returns the logits of every step.
absl::StatusOr<std::vector<std::vector<float>>> Run(Engine& engine,
                                                    const std::vector<int32_t>& prompt, int steps,
                                                    ReplayMode mode,
                                                    const std::vector<int32_t>& forced) {
  const int V = engine.config().vocab_size;
  ASSIGN_OR_RETURN(SeqId seq, engine.CreateSequence(static_cast<int>(prompt.size()) + steps));
  PrefillOptions po;
  po.replay = mode;
  ASSIGN_OR_RETURN(PrefillResult pre, engine.Prefill(seq, prompt, po));
  std::vector<std::vector<float>> out;
  out.push_back(std::move(pre.logits));
  for (int k = 0; k + 1 < steps; ++k) {
    const int32_t tok = forced.empty() ? Argmax(out.back().data(), V) : forced[k];
    DecodeInput in{seq, tok};
    ASSIGN_OR_RETURN(std::vector<float> logits, engine.Decode(absl::MakeConstSpan(&in, 1)));
    out.push_back(std::move(logits));
  }
  RETURN_IF_ERROR(engine.ReleaseSequence(seq));
  return out;
}

}  // namespace

double LogitKl(const float* p_logits, const float* q_logits, int n) {
  const std::vector<double> lp = LogSoftmax(p_logits, n), lq = LogSoftmax(q_logits, n);
  double kl = 0;
  for (int i = 0; i < n; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

absl::StatusOr<std::vector<ReplayErrorRow>> RunReplayError(
    const ReplayErrorOptions& options, const std::string& preset,
    std::shared_ptr<const ModelWeights> weights) {
  const ModelConfig& c = weights->config();
  const int V = c.vocab_size, K = options.steps;
  int max_len = 0;
  for (int n : options.lengths) max_len = std::max(max_len, n);
  const int64_t kv_bytes =
      2 * static_cast<int64_t>(max_len + K + 64) * GlobalKvBytesPerToken(c, c.kv_cache_dtype);
  ASSIGN_OR_RETURN(auto engine, MakeBenchEngine(weights, kv_bytes, 4));
  std::vector<ReplayErrorRow> rows;
  for (int n : options.lengths) {
    if (n + K > c.max_position) continue;
    const std::vector<int32_t> prompt = RandomPrompt(n, 5000 + n);
    ASSIGN_OR_RETURN(auto exact, Run(*engine, prompt, K, ReplayMode::kExact, {}));
    std::vector<int32_t> tokens;
    for (const auto& l : exact) tokens.push_back(Argmax(l.data(), V));
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), tokens.begin(), tokens.end() - 1);
    const double t0 = NowSeconds();
    ASSIGN_OR_RETURN(std::vector<float> full, engine->FullForward(all));
    const double full_s = NowSeconds() - t0;
    ASSIGN_OR_RETURN(auto bounded, Run(*engine, prompt, K, ReplayMode::kBounded, tokens));

    ReplayErrorRow row;
    row.preset = preset;
    row.prompt_tokens = n;
    row.replay_window = c.replay_window;
    row.exact_window = c.ExactReplayWindow();
    row.approximate = engine->ReplayStart(n, ReplayMode::kBounded, 0) > 0;
    row.steps = K;
    row.full_forward_s = full_s;
    int agree = 0;
    for (int k = 0; k < K; ++k) {
      const float* ref = full.data() + static_cast<size_t>(n - 1 + k) * V;
      const int ref_top = Argmax(ref, V);
      const double kl = LogitKl(ref, bounded[k].data(), V);
      if (k == 0) row.kl_first = kl;
      row.kl_mean += kl / K;
      row.kl_max = std::max(row.kl_max, kl);
      const bool same = Argmax(bounded[k].data(), V) == ref_top;
      agree += same;
      if (!same && row.first_divergence < 0) row.first_divergence = k;
      row.exact_kl_max = std::max(row.exact_kl_max, LogitKl(ref, exact[k].data(), V));
      if (tokens[k] != ref_top && row.exact_first_divergence < 0) row.exact_first_divergence = k;
    }
    row.top1_agreement = static_cast<double>(agree) / K;
    std::fprintf(stderr,
                 "[replay %s n=%d] KL first %.3g, mean %.3g, max %.3g nats; top-1 %.0f%%; "
                 "first divergence %s (full forward %.1f s)\n",
                 preset.c_str(), n, row.kl_first, row.kl_mean, row.kl_max, 100 * row.top1_agreement,
                 row.first_divergence < 0 ? "none" : std::to_string(row.first_divergence).c_str(),
                 full_s);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ced::bench
