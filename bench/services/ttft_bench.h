// Share of TTFT spent on K/V transfer that is not hidden behind prefill
// compute, for one long prompt through the real gateway of a `ced cluster`
// (one prefill and one decode worker), with the replay on the decode worker
// and on the prefill worker, alternating.
//
// Per request: the client-measured TTFT and the gateway's timings, whose
// transfer_ms is the exposed transfer the prefill worker measured (from the
// end of its compute until the last K/V message was acknowledged). As a cross-
// check from the other side, the decode worker's metrics give the time from
// reservation until all K/V landed (ced_kv_transfer_seconds; one observation
// per request); the prefill compute starts right after the reservation, so
//   not overlapped = ready - prefill compute  (an upper bound: it also holds
//   the prefill RPC's dispatch).
// With the replay on decode the first token waits for the transfer; with the
// replay on prefill the first token is sent before the K/V finishes and the
// transfer shows up in the gap to the second token instead.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/stats.h"
#include "bench/services/transport_bench.h"

namespace ced::bench {

struct TtftBenchOptions {
  std::string ced_binary;
  std::string scratch_dir;
  std::string preset = "small";
  int prompt_tokens = 2048;
  int max_tokens = 4;
  int repetitions = 3;  // per placement, after one warm-up each
  std::string ucx_tls;  // UCX_TLS for the cluster; empty: inherited
};

struct TtftSample {
  double client_ttft_ms = 0, second_token_gap_ms = 0;
  double gw_queue_ms = 0, gw_prefill_ms = 0, gw_transfer_ms = 0, gw_ttft_ms = 0, gw_total_ms = 0;
  double ready_ms = 0;        // decode: reservation -> all K/V landed
  double nonoverlap_ms = 0;   // max(0, ready - prefill compute)
  double transfer_bytes = 0;  // decode's ced_kv_transfer_bytes_total delta
};

struct TtftRow {
  std::string replay_on;       // "decode" | "prefill"
  std::string placement_seen;  // what the gateway reported
  std::vector<TtftSample> samples;
  Summary client_ttft, gw_ttft, prefill, gw_transfer, ready, nonoverlap, second_gap;
  // Share of the client TTFT, 0 when the first token does not wait for the
  // transfer: the gateway's transfer_ms, and the decode-side cross-check.
  Summary share_gateway, share_nonoverlap;
  double bytes = 0;
};

struct TtftReport {
  TtftBenchOptions options;
  double cluster_startup_s = 0;
  std::vector<TtftRow> rows;
};

absl::StatusOr<TtftReport> RunTtftBench(const TtftBenchOptions& options, const Progress& progress);

// Writes the preset's model into `dir` (with `ced model make`) unless present.
absl::Status EnsureModel(const std::string& ced_binary, const std::string& preset,
                         const std::string& dir);

}  // namespace ced::bench
