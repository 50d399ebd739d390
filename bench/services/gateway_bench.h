// Gateway overhead on one `ced cluster` (one prefill, one decode worker):
//
// Latency: the same kind of request (fresh prompt of equal length, greedy,
// replay on decode) four ways, rotating the order every repetition:
//   gateway  - ced.v1.Gateway.Generate (router, reservation, prefill, relay);
//   openai   - the gateway's OpenAI-compatible HTTP API, POST /v1/completions
//              with stream: true (server-sent events);
//   direct   - the bench does the gateway's work itself: DecodeWorker.Reserve
//              + Stream and PrefillWorker.Prefill (same placement, no gateway
//              or router hop);
//   local    - DecodeWorker.Reserve with local_prefill + Stream (the decode
//              worker prefills; no prefill worker, no K/V transfer).
// TTFT and time per output token are client-measured.
//
// Throughput: `c` concurrent streams of `stream_tokens` tokens each, through
// the gateway (both APIs) and direct, the order rotated every repetition;
// tokens received per second of wall time, and the CPU time each process
// (gateway, router, decode and prefill workers, the bench's clients) spent
// per streamed token: the cost of a path, which the wall-clock ratio on a
// small shared machine shows only through contention.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/stats.h"
#include "bench/services/transport_bench.h"

namespace ced::bench {

struct GatewayBenchOptions {
  std::string ced_binary;
  std::string scratch_dir;
  std::string preset = "tiny";
  int prompt_tokens = 128;
  int max_tokens = 32;
  int repetitions = 10;  // latency requests per path
  std::vector<int> concurrency = {1, 16, 48};
  int stream_prompt_tokens = 16;
  int stream_tokens = 128;
  int throughput_repetitions = 3;
  std::string ucx_tls;
  // More `ced cluster` flags (e.g. "--http-direct-stream=false"), space-separated.
  std::string cluster_flags;
  // Also a second cluster (same flags + --embed-router), up at the same time:
  // paths "gateway-embedded" and "openai-embedded" take turns with the others.
  bool embedded_router = true;
};

struct LatencyPath {
  std::string name;  // gateway | openai | direct | local | gateway-embedded | openai-embedded
  std::vector<double> ttft_ms, tpot_ms;
  Summary ttft, tpot;
};

// Processes whose CPU time the throughput section reads (ced_process_cpu_
// seconds_total of each service; the bench's own for its clients).
inline const std::vector<std::string>& CpuProcesses() {
  static const std::vector<std::string> names = {"gateway", "router", "decode-0", "prefill-0",
                                                 "client"};
  return names;
}

struct ThroughputSide {
  std::string path;         // gateway | openai | direct | gateway-embedded | openai-embedded
  std::vector<double> tps;  // tokens/s per repetition
  // Per repetition, the median over its streams.
  std::vector<double> ttft_ms, tpot_ms;
  // Per repetition, per CpuProcesses() entry: CPU ms per 1000 streamed tokens.
  std::vector<std::vector<double>> cpu_ms_per_ktok;
  // Per repetition: tokens per message the clients received (messages or
  // events that carried tokens; more than 1 when the sender coalesced).
  std::vector<double> tokens_per_message;
  Summary tokens_per_s;
};

struct ThroughputPoint {
  int concurrency = 0;
  std::vector<ThroughputSide> sides;  // gateway, openai, direct
  const ThroughputSide* Side(const std::string& path) const {
    for (const ThroughputSide& s : sides) {
      if (s.path == path) return &s;
    }
    return nullptr;
  }
};

struct GatewayReport {
  GatewayBenchOptions options;
  std::vector<LatencyPath> paths;
  std::vector<ThroughputPoint> throughput;
};

absl::StatusOr<GatewayReport> RunGatewayBench(const GatewayBenchOptions& options,
                                              const Progress& progress);

}  // namespace ced::bench
