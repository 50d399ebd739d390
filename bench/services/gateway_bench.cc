#include "bench/services/gateway_bench.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/services/clients.h"
#include "bench/services/cluster.h"
#include "bench/services/ttft_bench.h"
#include "engine/common/status.h"
#include "services/common/grpc_util.h"

namespace ced::bench {
namespace {

struct Targets {
  std::unique_ptr<ced::v1::Gateway::Stub> gateway;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> decode;
  std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill;
  DirectTarget direct;
};

absl::StatusOr<Targets> Connect(const BenchCluster& cluster) {
  Targets t;
  ASSIGN_OR_RETURN(const std::string decode, cluster.Address("decode-0", "grpc"));
  ASSIGN_OR_RETURN(const std::string prefill, cluster.Address("prefill-0", "grpc"));
  ASSIGN_OR_RETURN(t.direct.decode_kv_address, cluster.Address("decode-0", "kv"));
  t.gateway = ced::v1::Gateway::NewStub(services::MakeChannel(cluster.gateway()));
  t.decode = ced::internal::DecodeWorker::NewStub(services::MakeChannel(decode));
  t.prefill = ced::internal::PrefillWorker::NewStub(services::MakeChannel(prefill));
  t.direct.decode = t.decode.get();
  t.direct.prefill = t.prefill.get();
  t.direct.decode_worker_id = "decode-0";
  t.direct.prefill_worker_id = "prefill-0";
  return t;
}

StreamResult RunPath(Targets& t, const std::string& path, const GenerateArgs& args) {
  if (path == "gateway") return GatewayGenerate(t.gateway.get(), args);
  return DirectGenerate(t.direct, args, /*local_prefill=*/path == "local");
}

struct Load {
  double tokens_per_s = 0;
  double ttft_ms = 0, tpot_ms = 0;  // medians over the streams
};

// `c` concurrent streams on `path`.
absl::StatusOr<Load> Throughput(Targets& t, const std::string& path, int c, int prompt_tokens,
                                int tokens, uint64_t* salt) {
  std::vector<StreamResult> results(c);
  std::vector<std::thread> threads;
  std::vector<GenerateArgs> args(c);
  for (int i = 0; i < c; ++i) {
    args[i].request_id = absl::StrCat("tput-", path, "-", *salt);
    args[i].prompt = MakePrompt(prompt_tokens, (*salt)++);
    args[i].max_tokens = tokens;
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < c; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      results[i] = RunPath(t, path, args[i]);
    });
  }
  while (ready.load() < c) std::this_thread::yield();
  const double t0 = NowSeconds();
  go.store(true);
  for (auto& th : threads) th.join();
  const double elapsed = NowSeconds() - t0;
  size_t total = 0;
  std::vector<double> ttft, tpot;
  for (const StreamResult& r : results) {
    RETURN_IF_ERROR(r.status);
    total += r.token_ms.size();
    ttft.push_back(r.ttft_ms());
    tpot.push_back(r.tpot_ms());
  }
  return Load{static_cast<double>(total) / elapsed, Summarize(ttft).median, Summarize(tpot).median};
}

}  // namespace

absl::StatusOr<GatewayReport> RunGatewayBench(const GatewayBenchOptions& o,
                                              const Progress& progress) {
  GatewayReport report;
  report.options = o;
  const std::string model = o.scratch_dir + "/model-" + o.preset;
  RETURN_IF_ERROR(EnsureModel(o.ced_binary, o.preset, model));
  ClusterOptions co;
  co.ced_binary = o.ced_binary;
  co.model_dir = model;
  co.log_path = o.scratch_dir + "/cluster-gateway.log";
  co.flags = {"--prefill", "1", "--decode", "1"};
  if (!o.ucx_tls.empty()) co.env["UCX_TLS"] = o.ucx_tls;
  progress(absl::StrCat("gateway: starting ced cluster on ", o.preset));
  ASSIGN_OR_RETURN(auto cluster, BenchCluster::Start(co));
  ASSIGN_OR_RETURN(Targets t, Connect(*cluster));

  const std::vector<std::string> names = {"gateway", "direct", "local"};
  for (const std::string& n : names) report.paths.push_back(LatencyPath{n, {}, {}, {}, {}});
  uint64_t salt = 50000;
  for (int rep = -1; rep < o.repetitions; ++rep) {  // rep -1 warms every path up
    for (size_t k = 0; k < names.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(rep + 1)) % names.size();  // rotate the order
      GenerateArgs args;
      args.request_id = absl::StrCat("lat-", names[i], "-", salt);
      args.prompt = MakePrompt(o.prompt_tokens, salt++);
      args.max_tokens = o.max_tokens;
      const StreamResult r = RunPath(t, names[i], args);
      RETURN_IF_ERROR(r.status);
      if (rep < 0) continue;
      report.paths[i].ttft_ms.push_back(r.ttft_ms());
      report.paths[i].tpot_ms.push_back(r.tpot_ms());
    }
    if (rep >= 0 && (rep + 1) % std::max(1, o.repetitions / 4) == 0) {
      progress(absl::StrFormat(
          "gateway latency %d/%d: TTFT gateway %.2f / direct %.2f / local %.2f ms; TPOT %.3f / "
          "%.3f / %.3f ms (last)",
          rep + 1, o.repetitions, report.paths[0].ttft_ms.back(), report.paths[1].ttft_ms.back(),
          report.paths[2].ttft_ms.back(), report.paths[0].tpot_ms.back(),
          report.paths[1].tpot_ms.back(), report.paths[2].tpot_ms.back()));
    }
  }
  for (LatencyPath& p : report.paths) {
    p.ttft = Summarize(p.ttft_ms);
    p.tpot = Summarize(p.tpot_ms);
  }
  for (int c : o.concurrency) {
    ThroughputPoint point;
    point.concurrency = c;
    for (int rep = 0; rep < o.throughput_repetitions; ++rep) {
      const bool gateway_first = rep % 2 == 0;
      for (int k = 0; k < 2; ++k) {
        const bool via_gateway = (k == 0) == gateway_first;
        ASSIGN_OR_RETURN(const Load load,
                         Throughput(t, via_gateway ? "gateway" : "direct", c,
                                    o.stream_prompt_tokens, o.stream_tokens, &salt));
        (via_gateway ? point.gateway_tps : point.direct_tps).push_back(load.tokens_per_s);
        (via_gateway ? point.gateway_ttft_ms : point.direct_ttft_ms).push_back(load.ttft_ms);
        (via_gateway ? point.gateway_tpot_ms : point.direct_tpot_ms).push_back(load.tpot_ms);
      }
      progress(absl::StrFormat(
          "gateway throughput c=%d rep %d/%d: gateway %.0f tok/s (TTFT %.0f, TPOT %.2f ms), "
          "direct %.0f tok/s (TTFT %.0f, TPOT %.2f ms)",
          c, rep + 1, o.throughput_repetitions, point.gateway_tps.back(),
          point.gateway_ttft_ms.back(), point.gateway_tpot_ms.back(), point.direct_tps.back(),
          point.direct_ttft_ms.back(), point.direct_tpot_ms.back()));
    }
    point.gateway = Summarize(point.gateway_tps);
    point.direct = Summarize(point.direct_tps);
    report.throughput.push_back(point);
  }
  cluster->Stop();
  return report;
}

}  // namespace ced::bench
