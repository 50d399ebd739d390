// K/V bytes per prompt token on the wire, CED vs its decoder-only twin, for
// every cache format: one `ced cluster --kv-format F` per (preset, format);
// the bytes are the deltas of the workers' ced_kv_transfer_bytes_total
// counters (decode "in" and prefill "out", which must agree) around single
// requests of two prompt lengths. The per-token slope (B(N2) - B(N1)) /
// (N2 - N1) is the global K/V; the rest, B(N) - N * slope, is the
// per-sequence tail (local windows, or h_E for a replay on decode). Both are
// compared with accounting's GlobalKvBytesPerToken and hand arithmetic.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/services/transport_bench.h"

namespace ced::bench {

struct KvBytesBenchOptions {
  std::string ced_binary;
  std::string scratch_dir;
  std::vector<std::string> presets = {"tiny", "tiny-dec"};
  std::vector<std::string> formats = {"f32", "bf16", "fp8_e4m3", "fp4_e2m1"};
  int short_prompt = 128;
  int long_prompt = 512;
  std::string ucx_tls;
};

struct KvBytesRow {
  std::string preset, format;
  bool decoder_only = false;
  int short_prompt = 0, long_prompt = 0;
  double bytes_short = 0, bytes_long = 0;  // replay on decode (CED); decoder-only: no replay
  double bytes_long_replay_prefill = -1;   // CED only
  double prefill_out_long = 0;             // the prefill worker's count, same request
  double slope = 0;                        // measured bytes per prompt token
  double tail_decode = 0, tail_prefill = -1;
  int64_t accounting_per_token = 0;  // GlobalKvBytesPerToken
  int64_t hand_per_token = 0;        // 2 * G * D * own-source layers * bytes/value
  std::string hand_formula;
  // Expected tails: a 32-byte descriptor, local K/V windows (W tokens x 2 rows,
  // per layer that has them on the receiving side's behalf) and, for a replay
  // on decode, h_E of the R replayed tokens in f32.
  int64_t hand_tail_decode = 0, hand_tail_prefill = -1;
  std::string hand_tail_decode_formula, hand_tail_prefill_formula;
};

struct KvBytesReport {
  KvBytesBenchOptions options;
  std::vector<KvBytesRow> rows;
};

absl::StatusOr<KvBytesReport> RunKvBytesBench(const KvBytesBenchOptions& options,
                                              const Progress& progress);

}  // namespace ced::bench
