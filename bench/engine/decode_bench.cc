#include "bench/engine/decode_bench.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>

#include "bench/common/stats.h"
#include "bench/engine/bench_models.h"
#include "bench/engine/machine.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"
#include "kernels/cpu/gemm_packed.h"

namespace ced::bench {
namespace {

// f32 weight bytes one decode step of `batch` sequences reads: every matmul
// (incl. the LM head), the norms and one embedding row per sequence. On MoE
// layers: the activated experts, plus the further routed experts the batch's
// other tokens are expected to touch (engine/accounting).
// `matmul_bytes` per matmul weight: 4, or 2 where the packed copies are bf16
// (kernels/cpu/gemm_packed.h: a model stored in bf16); norms and embedding
// rows are read as f32.
double WeightBytesPerStep(const ModelConfig& c, int batch, double matmul_bytes) {
  const Accounting a = ComputeAccounting(c);
  const double norms = (2.0 * c.num_layers + 2) * c.hidden_size;
  const double experts = NumMoeLayers(c, 0, c.num_layers) * MoeExtraParamsReadPerLayer(c, batch);
  return matmul_bytes * (static_cast<double>(a.params_per_generated_token) + experts) +
         4.0 * (norms + static_cast<double>(batch) * c.hidden_size);
}

// Whether the engine packs this model's matmul weights as bf16: they are all
// bf16 values (checked on the LM head, which every stored dtype shares with
// the rest) and CED_CPU_WEIGHTS allows it.
bool PackedAsBf16(const ModelWeights& w) {
  return kernels::PackedBf16Allowed() && w.lm_head.loaded() &&
         kernels::AllBf16Values(w.lm_head.data,
                                static_cast<size_t>(w.lm_head.rows * w.lm_head.cols));
}

struct Measurement {
  double seconds = 0, cpu = 0, weight_bytes = 0, kv_bytes = 0, context_sum = 0;
  int steps = 0;
};

// `steps` greedy decode steps over sequences [0, batch); tokens fed back.
absl::StatusOr<Measurement> RunSteps(Engine& engine, const std::vector<SeqId>& seqs,
                                     std::vector<int32_t>& next, int batch, int steps,
                                     double matmul_bytes) {
  const ModelConfig& c = engine.config();
  Measurement m;
  std::vector<DecodeInput> in(batch);
  for (int s = 0; s < steps; ++s) {
    for (int b = 0; b < batch; ++b) {
      in[b] = {seqs[b], next[b]};
      const int context = engine.NumTokens(seqs[b]) + 1;
      m.kv_bytes += KvBytesReadPerDecodeStep(c, engine.kv_format(), context);
      m.context_sum += context;
    }
    m.weight_bytes += WeightBytesPerStep(c, batch, matmul_bytes);
    const double c0 = ProcessCpuSeconds();
    const double t0 = NowSeconds();
    ASSIGN_OR_RETURN(std::vector<float> logits, engine.Decode(in));
    for (int b = 0; b < batch; ++b) {
      next[b] = Argmax(logits.data() + static_cast<size_t>(b) * c.vocab_size, c.vocab_size);
    }
    m.seconds += NowSeconds() - t0;
    m.cpu += ProcessCpuSeconds() - c0;
    ++m.steps;
  }
  return m;
}

}  // namespace

absl::StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchOptions& options,
                                            std::shared_ptr<const ModelWeights> weights) {
  const ModelConfig& c = weights->config();
  const int max_batch = *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());
  const int nb = static_cast<int>(options.batch_sizes.size());
  const int capacity = options.context + (options.repetitions + 1) * options.steps * nb + 1;
  const int64_t kv_bytes = static_cast<int64_t>(max_batch) * (capacity + 64) *
                           GlobalKvBytesPerToken(c, c.kv_cache_dtype);
  ASSIGN_OR_RETURN(auto engine, MakeBenchEngine(weights, kv_bytes, max_batch));

  std::fprintf(stderr, "[decode] prefilling %d sequences of %d tokens\n", max_batch,
               options.context);
  std::vector<SeqId> seqs;
  std::vector<int32_t> next;
  for (int b = 0; b < max_batch; ++b) {
    ASSIGN_OR_RETURN(SeqId seq, engine->CreateSequence(capacity));
    ASSIGN_OR_RETURN(PrefillResult pre,
                     engine->Prefill(seq, RandomPrompt(options.context, 100 + b), {}));
    seqs.push_back(seq);
    next.push_back(Argmax(pre.logits.data(), c.vocab_size));
  }
  ASSIGN_OR_RETURN(auto probe, ReadBandwidthProbe::Create(options.bandwidth_bytes));

  DecodeReport report;
  report.bf16_weights = PackedAsBf16(*weights);
  const double matmul_bytes = report.bf16_weights ? 2.0 : 4.0;
  report.options = options;
  report.batches.resize(nb);
  for (int i = 0; i < nb; ++i) report.batches[i].batch = options.batch_sizes[i];

  std::fprintf(stderr, "[decode] warm-up\n");
  probe->Measure();
  // One probe per batch size as large as its step's reads (weights + K/V).
  std::vector<std::unique_ptr<ReadBandwidthProbe>> ws_probes;
  for (int i = 0; i < nb; ++i) {
    ASSIGN_OR_RETURN(Measurement warm,
                     RunSteps(*engine, seqs, next, options.batch_sizes[i], options.steps,
                              matmul_bytes));
    const auto step_bytes = static_cast<size_t>((warm.weight_bytes + warm.kv_bytes) / warm.steps);
    ASSIGN_OR_RETURN(auto ws, ReadBandwidthProbe::Create(step_bytes));
    ws->Measure();
    ws_probes.push_back(std::move(ws));
  }
  for (int rep = 0; rep < options.repetitions; ++rep) {
    const ProbeSample sample = probe->Measure();
    const double bw = sample.rate;
    report.bandwidth.push_back(bw);
    report.bandwidth_share.push_back(sample.cpu_share);
    std::fprintf(stderr, "[decode %d/%d] read bandwidth %.2f GB/s (%.0f MiB buffer)\n", rep + 1,
                 options.repetitions, bw * 1e-9, probe->bytes() / 1048576.0);
    for (int k = 0; k < nb; ++k) {
      const int i = (rep + k) % nb;
      DecodeBatchResult& r = report.batches[i];
      const ProbeSample ws = ws_probes[i]->Measure();
      r.working_set_bandwidth.push_back(ws.rate);
      r.working_set_share.push_back(ws.cpu_share);
      ASSIGN_OR_RETURN(Measurement m, RunSteps(*engine, seqs, next, r.batch, options.steps, matmul_bytes));
      const double tokens = static_cast<double>(r.batch) * m.steps;
      // This repetition's bandwidth: the faster of the two probes.
      const double roofline_s = (m.weight_bytes + m.kv_bytes) / std::max(bw, ws.rate);
      r.tokens_per_s.push_back(tokens / m.seconds);
      r.bytes_per_step_samples.push_back((m.weight_bytes + m.kv_bytes) / m.steps);
      r.step_ms.push_back(m.seconds / m.steps * 1e3);
      r.cpu_share.push_back(m.cpu / (m.seconds * omp_get_max_threads()));
      r.weight_bytes = m.weight_bytes / m.steps;
      r.kv_bytes = m.kv_bytes / m.steps;
      r.bytes_per_step = r.weight_bytes + r.kv_bytes;
      r.mean_context = m.context_sum / tokens;
      std::fprintf(stderr,
                   "[decode %d/%d] batch %2d: %.1f tokens/s (%.2f ms/step), %.0f%% of the "
                   "roofline at this repetition's bandwidth, CPU share %.0f%%\n",
                   rep + 1, options.repetitions, r.batch, r.tokens_per_s.back(), r.step_ms.back(),
                   100 * roofline_s / m.seconds, 100 * r.cpu_share.back());
    }
  }
  report.best_bandwidth = *std::max_element(report.bandwidth.begin(), report.bandwidth.end());
  for (DecodeBatchResult& r : report.batches) {
    r.roofline_bandwidth =
        std::max(report.best_bandwidth, *std::max_element(r.working_set_bandwidth.begin(),
                                                          r.working_set_bandwidth.end()));
    for (size_t i = 0; i < r.tokens_per_s.size(); ++i) {
      const double roofline = r.batch * r.roofline_bandwidth / r.bytes_per_step_samples[i];
      r.roofline_tokens_per_s.push_back(roofline);
      r.fraction.push_back(r.tokens_per_s[i] / roofline);
      r.dram_fraction.push_back(r.tokens_per_s[i] * r.bytes_per_step_samples[i] /
                                (r.batch * report.best_bandwidth));
    }
  }
  return report;
}

}  // namespace ced::bench
