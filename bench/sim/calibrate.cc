// ced-sim-calibrate: measures a device profile of this machine's CPU for
// ced-sim (hardware.h), for the threads one worker of `ced cluster` gets:
//   - GEMM rate: the engine's own GEMM (kernels/cpu GemmCpu) over one
//     layer's matmul shapes of the model at the prefill chunk size;
//   - attention rate: the CPU attention (kernels/cpu AttentionCpu) of one
//     prefill chunk over a long cached context (a resumed agent turn, where
//     attention is most of the work), the model's heads and cache format;
//   - memory read bandwidth: bench/engine's probe (machine.h, linked);
//   - per-step costs beyond that roofline: the engine's real prefill at
//     several prompt lengths and real decode steps at several batch sizes,
//     minus what the cost model predicts from the two rates, fitted as
//     fixed + per-token (prefill) and fixed + per-sequence (decode).
// Writes the profile as text (hardware.h: ParseDeviceProfile) with the raw
// measurements as comments.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "bench/engine/attention_probe.h"
#include "bench/engine/machine.h"
#include "bench/sim/cost_model.h"
#include "bench/sim/hardware.h"
#include "engine/common/status.h"
#include "engine/runtime/engine.h"
#include "kernels/cpu/math.h"

namespace ced::sim {
namespace {

struct Args {
  std::string model, out, name = "cpu";
  std::string prompts = "128,512,1024", batches = "1,4,8", clock = "wall";
  int context = 512, reps = 7, steps = 6, kv_cache_mb = 256, chunk = 256;
  int attention_context = 4096;
  bool colocated = true;
  double request_ms = 0, link_gbps = 0, bandwidth_mb = 256;
};

// At least two positive integers (a line is fitted through them).
absl::StatusOr<std::vector<int>> ParseFitPoints(const std::string& flag, const std::string& text) {
  ASSIGN_OR_RETURN(std::vector<int> out, bench::ParsePositiveInts(flag, text));
  if (out.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": need at least two values"));
  }
  return out;
}

// The median of the repetitions: on a shared machine, the conditions the
// cluster will meet too (the least would describe a quiet machine).
double Typical(std::vector<double> v) { return bench::Summarize(std::move(v)).median; }

// The clock every measurement uses: wall time, or (--clock cpu, one thread)
// process CPU time, which leaves out the time other processes held the core
// (but, in a VM, may also leave out time the host took).
bool g_cpu_clock = false;
double Now() { return g_cpu_clock ? bench::ProcessCpuSeconds() : bench::NowSeconds(); }

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % std::min(vocab, 256));
  return t;
}

// FLOP/s of GemmCpu over one layer's matmuls (q, k/v, o, gate, up, down) at
// `rows` rows: the shapes the engine's prefill multiplies.
double MeasureGemmRate(const ModelConfig& c, int rows, int reps) {
  struct Shape {
    int in, out;
  };
  const std::vector<Shape> shapes = {{c.hidden_size, c.QDim()},
                                     {c.hidden_size, 2 * c.KvDim()},
                                     {c.QDim(), c.hidden_size},
                                     {c.hidden_size, 2 * c.intermediate_size},
                                     {c.intermediate_size, c.hidden_size}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<std::vector<float>> w, x, y;
  double flops = 0;
  for (const Shape& s : shapes) {
    w.emplace_back(static_cast<size_t>(s.in) * s.out);
    x.emplace_back(static_cast<size_t>(rows) * s.in);
    y.emplace_back(static_cast<size_t>(rows) * s.out);
    for (float& v : w.back()) v = u(rng);
    for (float& v : x.back()) v = u(rng);
    flops += 2.0 * rows * s.in * s.out;
  }
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = Now();
    for (size_t i = 0; i < shapes.size(); ++i) {
      kernels::GemmCpu(x[i].data(), rows, shapes[i].in, w[i].data(), shapes[i].out, y[i].data());
    }
    if (r > 0) times.push_back(Now() - t0);  // the first warms up
  }
  return flops / Typical(times);
}

// FLOP/s of AttentionCpu (one layer) for `rows` query rows after `context`
// tokens of global K/V (bench/engine/attention_probe.h): a prefill chunk of a
// request whose prefix was cached. The FLOPs are the cost model's
// (AttentionFlopsForPositions).
double MeasureAttentionRate(const ModelConfig& c, KvFormat format, int block_size, int rows,
                            int context, int reps) {
  bench::AttentionProbe probe(c, format, block_size, rows, context);
  probe.Run();  // warms up
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    probe.Run();
    times.push_back(Now() - t0);
  }
  return probe.flops() / Typical(times);
}

// Least squares fit of y = a + b x with a, b >= 0.
void FitNonNegative(const std::vector<double>& x, const std::vector<double>& y, double* a,
                    double* b) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  *b = det > 0 ? (n * sxy - sx * sy) / det : 0;
  *a = (sy - *b * sx) / n;
  if (*b < 0) {
    *b = 0;
    *a = sy / n;
  }
  if (*a < 0) {
    *a = 0;
    *b = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  }
}

// Runs `body` over and over on its own thread until Stop (a neighbour: the
// other worker of a cluster on the same machine, with its own engine and
// weights). The first error stops it and is returned by Stop.
class Neighbour {
 public:
  explicit Neighbour(std::function<absl::Status()> body)
      : thread_([this, body = std::move(body)] {
          while (!stop_.load(std::memory_order_relaxed)) {
            absl::Status s = body();
            if (!s.ok()) {
              status_ = s;
              return;
            }
          }
        }) {}
  absl::Status Stop() {
    stop_ = true;
    thread_.join();
    return status_;
  }

 private:
  std::atomic<bool> stop_{false};
  absl::Status status_;
  std::thread thread_;
};

absl::Status Main(int argc, char** argv) {
  Args a;
  bench::FlagSet f;
  f.String("model", &a.model, "model directory (the one `ced cluster --model` serves)");
  f.String("out", &a.out, "write the profile here (default: stdout)");
  f.String("name", &a.name, "profile name");
  f.String("prompts", &a.prompts, "prefill prompt lengths to time (at least two)");
  f.String("batches", &a.batches, "decode batch sizes to time (at least two)");
  f.Int("context", &a.context, "decode: prompt tokens of each sequence");
  f.Int("reps", &a.reps, "repetitions per measurement (median)");
  f.Int("steps", &a.steps, "decode steps per repetition");
  f.Int("chunk", &a.chunk, "prefill chunk in tokens (the prefill worker's --chunk)");
  f.Int("attention-context", &a.attention_context,
        "attention rate: tokens of cached context before one chunk of --chunk query rows");
  f.Int("kv-cache-mb", &a.kv_cache_mb, "the workers' --kv-cache-mb: KV room of an instance");
  f.Bool("colocated", &a.colocated,
         "also time the decode step while another engine prefills on a second thread, and "
         "the prefill while another engine decodes (the two workers of a one-machine cluster)");
  f.Double("request-ms", &a.request_ms,
           "per-request path latency to record (gateway, router, RPC hops), ms");
  f.Double("link-gbps", &a.link_gbps, "K/V link to record, GB/s (0: leave to ced-sim)");
  f.Double("bandwidth-mb", &a.bandwidth_mb, "buffer for the bandwidth probe, MiB");
  f.String("clock", &a.clock,
           "wall | cpu: cpu (process CPU time, one thread) leaves out the time other "
           "processes held the core");
  RETURN_IF_ERROR(f.Parse(argc, argv));
  if (f.help_requested()) {
    std::printf("%s", f.Help("ced-sim-calibrate --model DIR [--out FILE] [flags]",
                             "Measures a CPU device profile for ced-sim --device-profile with "
                             "the threads\nOMP_NUM_THREADS allows (ced cluster gives each worker "
                             "cores / workers).")
                          .c_str());
    return absl::OkStatus();
  }
  if (a.model.empty()) return absl::InvalidArgumentError("--model: required");
  RETURN_IF_ERROR(bench::CheckWritable("out", a.out));  // the profile is written after minutes
  if (a.attention_context < 0) {
    return absl::InvalidArgumentError("--attention-context: must be >= 0");
  }
  if (a.reps < 1 || a.steps < 1 || a.context < 1 || a.kv_cache_mb < 1 || a.chunk < 1) {
    return absl::InvalidArgumentError(
        "--reps, --steps, --context, --chunk and --kv-cache-mb must be >= 1");
  }
  if (!std::isfinite(a.request_ms) || a.request_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-ms must be >= 0, got ", a.request_ms));
  }
  if (!std::isfinite(a.link_gbps) || a.link_gbps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--link-gbps must be >= 0, got ", a.link_gbps));
  }
  if (!std::isfinite(a.bandwidth_mb) || a.bandwidth_mb < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bandwidth-mb must be >= 1, got ", a.bandwidth_mb));
  }
  if (a.name.empty() || a.name.find_first_of(" \t\n#") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--name: '", a.name, "' must be one word (no spaces or '#')"));
  }
  ASSIGN_OR_RETURN(std::vector<int> prompts, ParseFitPoints("prompts", a.prompts));
  ASSIGN_OR_RETURN(std::vector<int> batches, ParseFitPoints("batches", a.batches));
  kernels::SetBlasSingleThreaded();
  if (a.clock == "wall") {
    g_cpu_clock = false;
  } else if (a.clock == "cpu") {
    if (omp_get_max_threads() != 1) {
      return absl::InvalidArgumentError("--clock cpu: needs one thread (OMP_NUM_THREADS=1)");
    }
    g_cpu_clock = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--clock: expected wall or cpu, got '", a.clock, "'"));
  }

  const bench::MachineInfo info = bench::CollectMachineInfo();
  std::fprintf(stderr, "[calibrate] %s, %d OpenMP threads\n", info.cpu_model.c_str(),
               info.omp_threads);

  EngineOptions eo;
  eo.model_dir = a.model;
  eo.weights = WeightSet::kFull;
  eo.kv_cache_bytes = static_cast<int64_t>(a.kv_cache_mb) << 20;
  eo.max_sequences = std::max(64, *std::max_element(batches.begin(), batches.end()));
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo));
  const ModelConfig& c = engine->config();
  if (a.attention_context + a.chunk > c.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("--attention-context: ", a.attention_context, " + --chunk ", a.chunk,
                     " exceeds the model's max_position ", c.max_position));
  }

  // Memory bandwidth (median of passes over a buffer far above the caches).
  ASSIGN_OR_RETURN(auto probe, bench::ReadBandwidthProbe::Create(
                                   static_cast<size_t>(a.bandwidth_mb * (1 << 20))));
  std::vector<double> bw;
  for (int r = 0; r < a.reps + 1; ++r) {
    const bench::ProbeSample s = probe->Measure();
    // On the CPU clock: the rate while the probe held the cores.
    if (r > 0)
      bw.push_back(g_cpu_clock && s.cpu_share > 0 ? s.rate / std::min(1.0, s.cpu_share) : s.rate);
  }
  const double bandwidth = Typical(bw);
  probe.reset();
  const bench::FmaIsa isa = info.has_avx512 ? bench::FmaIsa::kAvx512 : bench::FmaIsa::kAvx2;
  const bench::ProbeSample fma = bench::MeasureFmaPeak(isa, 0.3);
  const double fma_peak =
      g_cpu_clock && fma.cpu_share > 0 ? fma.rate / std::min(1.0, fma.cpu_share) : fma.rate;
  const double gemm = MeasureGemmRate(c, a.chunk, a.reps);
  const double attention = MeasureAttentionRate(c, c.kv_cache_dtype, eo.block_size, a.chunk,
                                                a.attention_context, a.reps);
  std::fprintf(stderr,
               "[calibrate] bandwidth %.2f GB/s, GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
               "FMA peak %.1f GFLOP/s\n",
               bandwidth / 1e9, gemm / 1e9, attention / 1e9, fma_peak / 1e9);

  GpuSpec spec;
  spec.name = a.name;
  spec.peak_flops = gemm;
  spec.attention_flops_per_s = attention;
  spec.hbm_bytes_per_s = bandwidth;
  spec.hbm_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  spec.bytes_per_param = 4;  // the CPU backend holds f32 weights
  spec.kv_room_bytes = static_cast<double>(eo.kv_cache_bytes);
  spec.request_s = a.request_ms / 1e3;
  spec.link_bytes_per_s = a.link_gbps * 1e9;
  CostModel::Options co;
  co.config = c;
  co.gpu = spec;
  ASSIGN_OR_RETURN(std::unique_ptr<CostModel> cost, CostModel::Create(co));

  // Prefill, replay on the prefill side (what the router's `auto` picks).
  std::string notes;
  std::vector<double> px, ptime;
  for (int n : prompts) {
    if (n + 1 > c.max_position) {
      return absl::InvalidArgumentError(absl::StrCat("--prompts: ", n, " exceeds max_position"));
    }
    const std::vector<int32_t> tokens = RandomTokens(n, c.vocab_size, 11 + n);
    std::vector<double> times;
    for (int r = 0; r < a.reps + 1; ++r) {
      ASSIGN_OR_RETURN(SeqId seq, engine->CreateSequence(n + 1));
      PrefillOptions po;
      po.chunk_tokens = a.chunk;
      const double t0 = Now();
      absl::StatusOr<PrefillResult> pre = engine->Prefill(seq, tokens, po);
      const double dt = Now() - t0;
      RETURN_IF_ERROR(engine->ReleaseSequence(seq));
      RETURN_IF_ERROR(pre.status());
      if (r > 0) times.push_back(dt);
    }
    px.push_back(n);
    ptime.push_back(Typical(times));
  }
  // The matmul rate: the GEMM probe's, or the rate the engine's prefill of
  // the longest prompt reaches beside its attention (at the measured
  // attention rate) when that is higher (its matmuls fuse better than the
  // probe's separate products), so that the excess is never negative where
  // the matmuls dominate.
  const size_t longest = std::max_element(px.begin(), px.end()) - px.begin();
  const Work longest_work = cost->PrefillWork(static_cast<int64_t>(px[longest]), true);
  const double matmul_s = ptime[longest] - longest_work.attn_flops / attention;
  const double prefill_rate =
      matmul_s > 0 ? (longest_work.flops - longest_work.attn_flops) / matmul_s : 0;
  if (prefill_rate > spec.peak_flops) {
    spec.peak_flops = prefill_rate;
    co.gpu = spec;
    ASSIGN_OR_RETURN(cost, CostModel::Create(co));
  }
  std::vector<double> pres;
  for (size_t i = 0; i < px.size(); ++i) {
    const double roofline = cost->PrefillSeconds(static_cast<int64_t>(px[i]), true, 1);
    pres.push_back(ptime[i] - roofline);
    absl::StrAppendFormat(&notes, "# prefill %5d tokens: measured %.3f ms, roofline %.3f ms\n",
                          static_cast<int>(px[i]), 1e3 * ptime[i], 1e3 * roofline);
  }
  FitNonNegative(px, pres, &spec.prefill_step_s, &spec.prefill_token_s);

  // Decode: `batch` sequences of `context` prompt tokens, `steps` steps each.
  std::vector<double> dx, dtime, dctx;
  const int capacity = a.context + (a.reps + 1) * a.steps + 2;
  for (int batch : batches) {
    std::vector<SeqId> seqs;
    std::vector<DecodeInput> in;
    for (int b = 0; b < batch; ++b) {
      ASSIGN_OR_RETURN(SeqId seq, engine->CreateSequence(capacity));
      PrefillOptions po;
      po.chunk_tokens = a.chunk;
      RETURN_IF_ERROR(
          engine->Prefill(seq, RandomTokens(a.context, c.vocab_size, 100 + b), po).status());
      seqs.push_back(seq);
      in.push_back({seq, 1});
    }
    std::vector<double> times;
    double measured_ctx = 0;
    for (int r = 0; r < a.reps + 1; ++r) {
      const double ctx = engine->NumTokens(seqs[0]) + 1 + (a.steps - 1) / 2.0;
      const double t0 = Now();
      for (int s = 0; s < a.steps; ++s) RETURN_IF_ERROR(engine->Decode(in).status());
      if (r > 0) {
        times.push_back((Now() - t0) / a.steps);
        measured_ctx += ctx / a.reps;
      }
    }
    for (SeqId seq : seqs) RETURN_IF_ERROR(engine->ReleaseSequence(seq));
    dx.push_back(batch);
    dtime.push_back(Typical(times));
    dctx.push_back(measured_ctx);
  }
  auto decode_work = [&](size_t i) {
    const int64_t batch = static_cast<int64_t>(dx[i]);
    const int64_t ctx = static_cast<int64_t>(dctx[i] + 0.5);
    const int64_t local = c.sliding_window > 0 ? std::min<int64_t>(c.sliding_window, ctx) : 0;
    Work work = cost->DecodeStepBaseWork();
    work += cost->DecodeBatchWork(batch, batch * ctx, batch * local);
    return work;
  };
  // The bandwidth: the probe's, or the rate the engine's smallest decode
  // batch reaches when that is higher (a bandwidth-bound step: the probe may
  // have been disturbed), so that the excess is never negative there.
  const size_t smallest = std::min_element(dx.begin(), dx.end()) - dx.begin();
  const double decode_rate = decode_work(smallest).bytes / dtime[smallest];
  if (decode_rate > spec.hbm_bytes_per_s) {
    spec.hbm_bytes_per_s = decode_rate;
    co.gpu = spec;
    ASSIGN_OR_RETURN(cost, CostModel::Create(co));
  }
  std::vector<double> dres;
  for (size_t i = 0; i < dx.size(); ++i) {
    const double roofline = cost->StepSeconds(decode_work(i), 1);
    dres.push_back(dtime[i] - roofline);
    absl::StrAppendFormat(&notes,
                          "# decode batch %3d at context %d: measured %.3f ms/step, roofline "
                          "%.3f ms\n",
                          static_cast<int>(dx[i]), static_cast<int>(dctx[i] + 0.5), 1e3 * dtime[i],
                          1e3 * roofline);
  }
  FitNonNegative(dx, dres, &spec.decode_step_s, &spec.decode_seq_s);

  // Colocation (ced cluster's prefill and decode workers on one machine):
  // the decode step of one sequence at `context` while a second engine (its
  // own weights, as the other worker's process holds) prefills prompts of
  // `context` tokens on another thread, and that prefill while the second
  // engine decodes: each against the same measurement alone just before it,
  // the slowdown the median of those paired ratios (robust to drift in what
  // else runs on the machine), over twice the repetitions. Wall clock always
  // (the process CPU clock would count the neighbour).
  if (a.colocated) {
    ASSIGN_OR_RETURN(std::unique_ptr<Engine> other, Engine::Create(eo));
    const std::vector<int32_t> prompt = RandomTokens(a.context, c.vocab_size, 5);
    auto prefill_once = [&](Engine& e) -> absl::StatusOr<double> {
      ASSIGN_OR_RETURN(SeqId seq, e.CreateSequence(a.context + 1));
      PrefillOptions po;
      po.chunk_tokens = a.chunk;
      const double t0 = bench::NowSeconds();
      absl::StatusOr<PrefillResult> pre = e.Prefill(seq, prompt, po);
      const double dt = bench::NowSeconds() - t0;
      RETURN_IF_ERROR(e.ReleaseSequence(seq));
      RETURN_IF_ERROR(pre.status());
      return dt;
    };
    // `steps` decode steps of one sequence at about `context` tokens, per
    // step; the sequence is prefilled again (untimed) when its room runs out.
    struct Decoder {
      Engine* engine;
      SeqId seq = 0;
      bool live = false;
      int left = 0;
    };
    const int room = 8 * a.steps;
    auto decode_steps = [&](Decoder& d) -> absl::StatusOr<double> {
      if (d.left < a.steps) {
        if (d.live) RETURN_IF_ERROR(d.engine->ReleaseSequence(d.seq));
        d.live = false;
        ASSIGN_OR_RETURN(d.seq, d.engine->CreateSequence(a.context + room + 1));
        d.live = true;
        PrefillOptions po;
        po.chunk_tokens = a.chunk;
        RETURN_IF_ERROR(d.engine->Prefill(d.seq, prompt, po).status());
        d.left = room;
      }
      const DecodeInput in{d.seq, 1};
      const double t0 = bench::NowSeconds();
      for (int s = 0; s < a.steps; ++s) RETURN_IF_ERROR(d.engine->Decode({&in, 1}).status());
      d.left -= a.steps;
      return (bench::NowSeconds() - t0) / a.steps;
    };
    Decoder mine{engine.get()}, theirs{other.get()};
    std::vector<double> decode_alone, decode_with, prefill_alone, prefill_with, decode_ratio,
        prefill_ratio;
    const int reps = 2 * a.reps;
    for (int r = 0; r < reps + 1; ++r) {
      ASSIGN_OR_RETURN(const double alone, decode_steps(mine));
      Neighbour n([&]() -> absl::Status { return prefill_once(*other).status(); });
      absl::StatusOr<double> with = decode_steps(mine);
      RETURN_IF_ERROR(n.Stop());
      RETURN_IF_ERROR(with.status());
      if (r > 0) {
        decode_alone.push_back(alone);
        decode_with.push_back(*with);
        decode_ratio.push_back(*with / alone);
      }
    }
    for (int r = 0; r < reps + 1; ++r) {
      ASSIGN_OR_RETURN(const double alone, prefill_once(*engine));
      Neighbour n([&]() -> absl::Status { return decode_steps(theirs).status(); });
      absl::StatusOr<double> with = prefill_once(*engine);
      RETURN_IF_ERROR(n.Stop());
      RETURN_IF_ERROR(with.status());
      if (r > 0) {
        prefill_alone.push_back(alone);
        prefill_with.push_back(*with);
        prefill_ratio.push_back(*with / alone);
      }
    }
    const double da = Typical(decode_alone), dw = Typical(decode_with);
    const double pa = Typical(prefill_alone), pw = Typical(prefill_with);
    const double dr = Typical(decode_ratio), pr = Typical(prefill_ratio);
    spec.decode_colocated_slowdown = std::max(1.0, dr);
    spec.prefill_colocated_slowdown = std::max(1.0, pr);
    absl::StrAppendFormat(&notes,
                          "# colocated: decode step at context %d: %.3f ms alone, %.3f ms while "
                          "another engine prefills %d tokens (median ratio %.3f)\n"
                          "# colocated: prefill of %d tokens: %.3f ms alone, %.3f ms while another "
                          "engine decodes (median ratio %.3f)\n",
                          a.context, 1e3 * da, 1e3 * dw, a.context, dr, a.context, 1e3 * pa,
                          1e3 * pw, pr);
  }

  std::string text = absl::StrFormat(
      "# ced-sim device profile, measured by ced-sim-calibrate\n"
      "# cpu: %s; OpenMP threads %d; clock %s; model %s (L %d, E %d)\n"
      "# memory read bandwidth %.3f GB/s; engine GEMM %.2f GFLOP/s (rows %d); FMA peak %.2f "
      "GFLOP/s;\n# attention of %d query rows after %d cached tokens (one layer): %.2f GFLOP/s "
      "(attention_flops_per_s);\n# engine prefill of %d tokens: its matmuls reach %.2f GFLOP/s "
      "beside that attention (peak_flops: the higher);\n"
      "# engine decode of batch %d reads %.3f GB/s (hbm_bytes_per_s: the higher)\n%s",
      info.cpu_model, info.omp_threads, g_cpu_clock ? "process CPU time" : "wall", a.model,
      c.num_layers, c.num_encoder_layers, bandwidth / 1e9, gemm / 1e9, a.chunk, fma_peak / 1e9,
      a.chunk, a.attention_context, attention / 1e9, static_cast<int>(px[longest]),
      prefill_rate / 1e9, static_cast<int>(dx[smallest]),
      decode_rate / 1e9, notes);
  absl::StrAppend(&text, DeviceProfileText(spec));
  if (a.out.empty()) {
    std::printf("%s", text.c_str());
  } else {
    std::ofstream out(a.out);
    out << text;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("--out: cannot write '", a.out, "'"));
    std::fprintf(stderr, "%s", text.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::sim

int main(int argc, char** argv) {
  const absl::Status s = ced::sim::Main(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "ced-sim-calibrate: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
