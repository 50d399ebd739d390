// Gateway overhead on one `ced cluster` (one prefill, one decode worker):
//
// Latency: the same kind of request (fresh prompt of equal length, greedy,
// replay on decode) three ways, rotating the order every repetition:
//   gateway  - ced.v1.Gateway.Generate (router, reservation, prefill, relay);
//   direct   - the bench does the gateway's work itself: DecodeWorker.Reserve
//              + Stream and PrefillWorker.Prefill (same placement, no gateway
//              or router hop);
//   local    - DecodeWorker.Reserve with local_prefill + Stream (the decode
//              worker prefills; no prefill worker, no K/V transfer).
// TTFT and time per output token are client-measured.
//
// Throughput: `c` concurrent streams of `stream_tokens` tokens each, through
// the gateway and direct, alternating; tokens received per second of wall time.
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
};

struct LatencyPath {
  std::string name;  // gateway | direct | local
  std::vector<double> ttft_ms, tpot_ms;
  Summary ttft, tpot;
};

struct ThroughputPoint {
  int concurrency = 0;
  std::vector<double> gateway_tps, direct_tps;  // tokens/s per repetition
  // Per repetition, the median over its streams.
  std::vector<double> gateway_ttft_ms, direct_ttft_ms, gateway_tpot_ms, direct_tpot_ms;
  Summary gateway, direct;
};

struct GatewayReport {
  GatewayBenchOptions options;
  std::vector<LatencyPath> paths;
  std::vector<ThroughputPoint> throughput;
};

absl::StatusOr<GatewayReport> RunGatewayBench(const GatewayBenchOptions& options,
                                              const Progress& progress);

}  // namespace ced::bench
