#include "bench/services/kv_bytes_bench.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/services/clients.h"
#include "bench/services/cluster.h"
#include "bench/services/ttft_bench.h"
#include "engine/accounting/accounting.h"
#include "engine/common/status.h"
#include "engine/model/presets.h"
#include "services/common/grpc_util.h"

namespace ced::bench {
namespace {

// Independent of the codec: bytes of one row of n values, and its formula.
int64_t HandRowBytes(KvFormat f, int64_t n, std::string* formula) {
  switch (f) {
    case KvFormat::kF32:
      *formula = absl::StrCat(n, "x4");
      return 4 * n;
    case KvFormat::kBF16:
      *formula = absl::StrCat(n, "x2");
      return 2 * n;
    case KvFormat::kFP8E4M3:
      *formula = absl::StrCat(n, "x1");
      return n;
    case KvFormat::kFP4E2M1:
      *formula = absl::StrCat("(", n, "/2+", n, "/16)");
      return n / 2 + n / 16;
  }
  return 0;
}

struct Counts {
  double in = 0, out = 0;
};

absl::StatusOr<Counts> ReadBytes(const BenchCluster& cluster) {
  Counts c;
  ASSIGN_OR_RETURN(c.in, ScrapeMetric(cluster, "decode-0", "ced_kv_transfer_bytes_total",
                                      {{"direction", "in"}}));
  ASSIGN_OR_RETURN(c.out, ScrapeMetric(cluster, "prefill-0", "ced_kv_transfer_bytes_total",
                                       {{"direction", "out"}}));
  return c;
}

}  // namespace

absl::StatusOr<KvBytesReport> RunKvBytesBench(const KvBytesBenchOptions& o,
                                              const Progress& progress) {
  KvBytesReport report;
  report.options = o;
  uint64_t salt = 90000;
  for (const std::string& preset : o.presets) {
    const std::string model = o.scratch_dir + "/model-" + preset;
    RETURN_IF_ERROR(EnsureModel(o.ced_binary, preset, model));
    ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
    for (const std::string& format : o.formats) {
      KvBytesRow row;
      row.preset = preset;
      row.format = format;
      row.decoder_only = config.IsDecoderOnly();
      row.short_prompt = o.short_prompt;
      row.long_prompt = o.long_prompt;
      KvFormat f;
      if (!kernels::ParseKvFormat(format, &f)) {
        return absl::InvalidArgumentError(absl::StrCat("--kv_formats: unknown format ", format));
      }
      config.kv_cache_dtype = f;
      row.accounting_per_token = GlobalKvBytesPerToken(config, f);
      std::string row_formula;
      const int64_t row_bytes = HandRowBytes(f, config.KvDim(), &row_formula);
      const int sources = config.NumGlobalSourceLayers();
      row.hand_per_token = 2 * sources * row_bytes;
      row.hand_formula = absl::StrCat("2 x ", sources, " x ", row_formula);
      const int w = config.sliding_window, layers = config.num_layers,
                enc = config.num_encoder_layers;
      const int64_t window = 2 * static_cast<int64_t>(w) * row_bytes;  // one layer's ring
      const int64_t he = static_cast<int64_t>(config.replay_window) * config.hidden_size * 4;
      if (row.decoder_only) {
        row.hand_tail_decode = 32 + layers * window;
        row.hand_tail_decode_formula = absl::StrCat("32 + ", layers, "x", window);
      } else {
        row.hand_tail_decode = 32 + enc * window + he;
        row.hand_tail_decode_formula = absl::StrCat("32 + ", enc, "x", window, " + ", he);
        row.hand_tail_prefill = 32 + layers * window;
        row.hand_tail_prefill_formula = absl::StrCat("32 + ", layers, "x", window);
      }

      ClusterOptions co;
      co.ced_binary = o.ced_binary;
      co.model_dir = model;
      co.log_path = absl::StrCat(o.scratch_dir, "/cluster-kvbytes-", preset, "-", format, ".log");
      co.flags = {"--prefill", "1", "--decode", "1", "--kv-format", format};
      if (!o.ucx_tls.empty()) co.env["UCX_TLS"] = o.ucx_tls;
      ASSIGN_OR_RETURN(auto cluster, BenchCluster::Start(co));
      auto stub = ced::v1::Gateway::NewStub(services::MakeChannel(cluster->gateway()));
      // One request; returns the decode worker's and the prefill worker's byte deltas.
      auto measure = [&](int n, ced::v1::ReplayOn replay) -> absl::StatusOr<Counts> {
        ASSIGN_OR_RETURN(const Counts before, ReadBytes(*cluster));
        GenerateArgs args;
        args.request_id = absl::StrCat("kvb-", salt);
        args.prompt = MakePrompt(n, salt++);
        args.max_tokens = 2;
        args.replay_on = replay;
        const StreamResult r = GatewayGenerate(stub.get(), args);
        RETURN_IF_ERROR(r.status);
        if (r.placement.local_prefill()) {
          return absl::InternalError("kv bytes: the router chose a local prefill");
        }
        ASSIGN_OR_RETURN(const Counts after, ReadBytes(*cluster));
        return Counts{after.in - before.in, after.out - before.out};
      };
      ASSIGN_OR_RETURN(const Counts s, measure(o.short_prompt, ced::v1::REPLAY_ON_DECODE));
      ASSIGN_OR_RETURN(const Counts l, measure(o.long_prompt, ced::v1::REPLAY_ON_DECODE));
      row.bytes_short = s.in;
      row.bytes_long = l.in;
      row.prefill_out_long = l.out;
      row.slope = (l.in - s.in) / (o.long_prompt - o.short_prompt);
      row.tail_decode = l.in - o.long_prompt * row.slope;
      if (!row.decoder_only) {
        ASSIGN_OR_RETURN(const Counts p, measure(o.long_prompt, ced::v1::REPLAY_ON_PREFILL));
        row.bytes_long_replay_prefill = p.in;
        row.tail_prefill = p.in - o.long_prompt * row.slope;
      }
      cluster->Stop();
      progress(absl::StrFormat(
          "kv bytes %-8s %-8s: %.1f B/token on the wire (accounting %d, hand %d), tail %.0f B "
          "(replay on decode)%s",
          preset, format, row.slope, row.accounting_per_token, row.hand_per_token, row.tail_decode,
          row.decoder_only ? ""
                           : absl::StrFormat(", %.0f B (replay on prefill)", row.tail_prefill)));
      report.rows.push_back(row);
    }
  }
  return report;
}

}  // namespace ced::bench
