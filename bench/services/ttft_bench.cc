#include "bench/services/ttft_bench.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/services/clients.h"
#include "bench/services/cluster.h"
#include "engine/common/status.h"
#include "services/common/grpc_util.h"

namespace ced::bench {
namespace {

struct DecodeCounters {
  double ready_sum_s = 0, ready_count = 0, bytes_in = 0;
};

absl::StatusOr<DecodeCounters> ReadDecode(const BenchCluster& cluster) {
  ASSIGN_OR_RETURN(const std::string address, cluster.Address("decode-0", "metrics"));
  ASSIGN_OR_RETURN(const std::string text, ScrapeMetrics(address));
  DecodeCounters c;
  c.ready_sum_s = MetricValue(text, "ced_kv_transfer_seconds_sum");
  c.ready_count = MetricValue(text, "ced_kv_transfer_seconds_count");
  c.bytes_in = MetricValue(text, "ced_kv_transfer_bytes_total", {{"direction", "in"}});
  return c;
}

const char* PlacementName(ced::v1::ReplayOn r) {
  switch (r) {
    case ced::v1::REPLAY_ON_PREFILL:
      return "prefill";
    case ced::v1::REPLAY_ON_DECODE:
      return "decode";
    default:
      return "?";
  }
}

}  // namespace

absl::Status EnsureModel(const std::string& ced_binary, const std::string& preset,
                         const std::string& dir) {
  if (std::filesystem::exists(dir + "/config.json") &&
      std::filesystem::exists(dir + "/model.safetensors")) {
    return absl::OkStatus();
  }
  const services::SubprocessOptions o = services::BackgroundJob(
      {ced_binary, "model", "make", "--preset", preset, "--seed", "1", "--out", dir},
      dir + ".make.log");
  ASSIGN_OR_RETURN(auto child, services::Subprocess::Spawn(o));
  ASSIGN_OR_RETURN(const int st, child->Wait(300));
  if (st != 0) {
    return absl::InternalError(
        absl::StrCat("ced model make --preset ", preset, " failed: ", services::TailOfFile(o.output_path, 400)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TtftReport> RunTtftBench(const TtftBenchOptions& o, const Progress& progress) {
  TtftReport report;
  report.options = o;
  const std::string model = o.scratch_dir + "/model-" + o.preset;
  RETURN_IF_ERROR(EnsureModel(o.ced_binary, o.preset, model));
  ClusterOptions co;
  co.ced_binary = o.ced_binary;
  co.model_dir = model;
  co.log_path = o.scratch_dir + "/cluster-ttft.log";
  co.flags = {"--prefill", "1", "--decode", "1"};
  if (!o.ucx_tls.empty()) co.env["UCX_TLS"] = o.ucx_tls;
  progress(absl::StrCat("ttft: starting ced cluster on ", o.preset));
  ASSIGN_OR_RETURN(auto cluster, BenchCluster::Start(co));
  report.cluster_startup_s = cluster->startup_s();
  auto stub = ced::v1::Gateway::NewStub(services::MakeChannel(cluster->gateway()));

  const std::vector<ced::v1::ReplayOn> placements = {ced::v1::REPLAY_ON_DECODE,
                                                     ced::v1::REPLAY_ON_PREFILL};
  for (ced::v1::ReplayOn p : placements) {
    TtftRow row;
    row.replay_on = PlacementName(p);
    report.rows.push_back(row);
  }
  uint64_t salt = 1000;
  for (int rep = -1; rep < o.repetitions; ++rep) {  // rep -1: warm-up, not recorded
    for (size_t k = 0; k < placements.size(); ++k) {
      // Alternate the order so that drift in background load hits both alike.
      const size_t i = (rep % 2 == 0) ? k : placements.size() - 1 - k;
      TtftRow& row = report.rows[i];
      ASSIGN_OR_RETURN(const DecodeCounters before, ReadDecode(*cluster));
      GenerateArgs args;
      args.request_id = absl::StrCat("ttft-", salt);
      // The warm-up (connections, first-touch of cache pages) needs no long prompt.
      args.prompt = MakePrompt(rep < 0 ? std::min(o.prompt_tokens, 256) : o.prompt_tokens, salt++);
      args.max_tokens = o.max_tokens;
      args.replay_on = placements[i];
      const StreamResult r = GatewayGenerate(stub.get(), args);
      RETURN_IF_ERROR(r.status);
      ASSIGN_OR_RETURN(const DecodeCounters after, ReadDecode(*cluster));
      if (after.ready_count - before.ready_count != 1) {
        return absl::InternalError("ttft: expected one K/V-ready observation per request");
      }
      TtftSample s;
      s.client_ttft_ms = r.ttft_ms();
      s.second_token_gap_ms = r.token_ms.size() > 1 ? r.token_ms[1] - r.token_ms[0] : -1;
      const ced::v1::Timings& t = r.gateway_timings;
      s.gw_queue_ms = t.queue_ms();
      s.gw_prefill_ms = t.prefill_ms();
      s.gw_transfer_ms = t.transfer_ms();
      s.gw_ttft_ms = t.ttft_ms();
      s.gw_total_ms = t.total_ms();
      s.ready_ms = (after.ready_sum_s - before.ready_sum_s) * 1000.0;
      s.nonoverlap_ms = std::max(0.0, s.ready_ms - s.gw_prefill_ms);
      s.transfer_bytes = after.bytes_in - before.bytes_in;
      row.placement_seen = PlacementName(r.placement.replay_on());
      progress(absl::StrFormat(
          "ttft %s replay=%-7s: client TTFT %.1f ms; gateway queue %.1f prefill %.1f "
          "transfer (exposed) %.1f ttft %.1f; K/V ready after %.1f ms -> not overlapped %.1f ms",
          rep < 0 ? "warm-up" : absl::StrCat("rep ", rep + 1, "/", o.repetitions), row.replay_on,
          s.client_ttft_ms, s.gw_queue_ms, s.gw_prefill_ms, s.gw_transfer_ms, s.gw_ttft_ms,
          s.ready_ms, s.nonoverlap_ms));
      if (rep >= 0) row.samples.push_back(s);
    }
  }
  for (TtftRow& row : report.rows) {
    std::vector<double> ct, gt, pf, tr, rd, no, sg, sn, sgw;
    for (const TtftSample& s : row.samples) {
      ct.push_back(s.client_ttft_ms);
      gt.push_back(s.gw_ttft_ms);
      pf.push_back(s.gw_prefill_ms);
      tr.push_back(s.gw_transfer_ms);
      rd.push_back(s.ready_ms);
      no.push_back(s.nonoverlap_ms);
      sg.push_back(s.second_token_gap_ms);
      // With the replay on prefill the first token leaves before the K/V
      // finishes: none of the transfer is on the TTFT path.
      const bool on_path = row.placement_seen != "prefill";
      sn.push_back(on_path && s.client_ttft_ms > 0 ? s.nonoverlap_ms / s.client_ttft_ms : 0);
      sgw.push_back(on_path && s.client_ttft_ms > 0 ? s.gw_transfer_ms / s.client_ttft_ms : 0);
      row.bytes = s.transfer_bytes;
    }
    row.client_ttft = Summarize(ct);
    row.gw_ttft = Summarize(gt);
    row.prefill = Summarize(pf);
    row.gw_transfer = Summarize(tr);
    row.ready = Summarize(rd);
    row.nonoverlap = Summarize(no);
    row.second_gap = Summarize(sg);
    row.share_nonoverlap = Summarize(sn);
    row.share_gateway = Summarize(sgw);
  }
  cluster->Stop();
  return report;
}

}  // namespace ced::bench
