// Share of TTFT spent on K/V transfer that is not hidden behind prefill
// compute, for one long prompt through the real gateway of a `ced cluster`
// (one prefill and one decode worker), with the replay on the decode worker
// and on the prefill worker, alternating.
//
// Per request: the client-measured TTFT, the gateway's timings, and from the
// decode worker's metrics the time from reservation until all K/V landed
// (ced_kv_transfer_seconds; one observation per request). The prefill compute
// starts right after the reservation, so
//   non-overlapped transfer = ready - prefill compute  (an upper bound: it
//   also holds the prefill RPC's dispatch).
// With the replay on decode the first token waits for it; with the replay on
// prefill the first token is sent before the K/V finishes and the transfer
// shows up in the gap to the second token instead.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/engine/stats.h"
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
  Summary share_nonoverlap;  // nonoverlap / client TTFT (0 when TTFT precedes it)
  Summary share_reported;    // the gateway's transfer_ms / its ttft_ms
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
