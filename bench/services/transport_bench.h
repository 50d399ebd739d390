// KV transfer throughput of the UCX KvTransport against ucx_perftest on the
// same UCX transports and message sizes, measured side by side: for every
// repetition, every (transports, size) cell runs its measurements back to
// back, in an order that rotates from one repetition to the next, so that the
// machine's background load hits all of them alike.
//
// Ours: a receiver process (this binary in its kv_sink role) whose sink lands
// every message in a preallocated per-sender slot, and `threads` sender
// threads in this process, each with one blocking Send in flight. A Send
// returns once the receiver verified the checksum and acknowledged, so the
// figure includes the transport's CRC32C on both sides and the verdict round
// trip. Perftest: `ucx_perftest -t <test>` server + client processes with
// -O = threads outstanding sends, as UCX's defaults make its endpoints (no error
// handling) and, optionally, with -e: peer error handling as the KV transport
// uses. Optionally ours once more with a single Send in flight, as the prefill
// worker sends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/stats.h"
#include "bench/services/ucx_lanes.h"

namespace ced::bench {

struct TransportBenchOptions {
  std::vector<std::string> tls = {"tcp", "shm,tcp"};  // UCX_TLS values
  // A real K/V message is a chunk of many tokens' global K/V: hundreds of KiB
  // to several MiB.
  std::vector<uint64_t> sizes = {256 << 10, 1 << 20, 4 << 20, 16 << 20};
  int threads = 4;                        // our Sends in flight; perftest -O
  uint64_t bytes_per_sample = 256 << 20;  // volume of one timed measurement
  int min_iters = 16;                     // messages per measurement at least
  int repetitions = 3;
  // Also measure ours with a single Send in flight (the prefill worker's sender
  // thread sends one message at a time).
  bool single_flight = true;
  // Also measure ucx_perftest with -e (peer error handling, like ours).
  bool perftest_peer = true;
  // The receiver's TransportOptions::verifier_threads (-1: the transport's default).
  int verifier_threads = -1;
  // The receiver's TransportOptions::fused_receive (-1: by the connection's lanes).
  int fused_receive = -1;
  std::string self_exe;  // this binary (for the kv_sink role)
  std::string perftest = "ucx_perftest";
  std::string perftest_test = "ucp_am_bw";
  int port_base = 0;        // perftest's out-of-band port; 0 picks a free one per run
  std::string scratch_dir;  // perftest logs
};

struct TransportCell {
  std::string tls;
  uint64_t size = 0;
  std::vector<double> ours_gbps, perftest_gbps;  // one per repetition, 1e9 B/s
  std::vector<double> blocking_gbps;             // ours with blocking Sends, one per thread
  std::vector<double> ratio;                     // ours / perftest, per repetition
  std::vector<double> single_gbps;               // ours, one Send in flight
  std::vector<double> perftest_peer_gbps;        // ucx_perftest -e
  std::vector<double> ratio_peer;                // ours / perftest -e, per repetition
  Summary ours, perftest, ratio_summary, single, perftest_peer, ratio_peer_summary, blocking;
  // Best ours / best perftest: the capability of each when the shared machine
  // let it run (perftest busy-polls, so contention hits it harder than ours).
  double best_ratio = 0;
  double best_ratio_peer = 0;  // best ours / best perftest -e
};

// What UCX selects for each UCX_TLS: endpoints as the KV transport makes them
// (peer error handling) and as ucx_perftest makes them (none).
struct LaneRow {
  std::string tls;
  UcxLanes ours, perftest;
};

struct TransportReport {
  TransportBenchOptions options;
  std::vector<TransportCell> cells;
  std::string ucx_version;
  std::vector<LaneRow> lanes;
  // Single-thread CPU rates on a buffer of the largest message size, 1e9 B/s:
  // the transport's CRC32C (run once by the sender, once by the receiver per
  // message) and memcpy (one copy is what a shared-memory transfer costs).
  Summary crc32c_gbps, memcpy_gbps, copy_crc32c_gbps;  // copy_crc32c: CopyCrc32c
  // The implementation those ran (kv_transport::Crc32cImplementation()), and
  // the same two rates for every implementation this CPU supports.
  struct Crc32cImplRates {
    std::string impl;
    Summary crc32c_gbps, copy_crc32c_gbps;
  };
  std::string crc32c_impl;
  std::vector<Crc32cImplRates> crc32c_by_impl;
};

using Progress = std::function<void(const std::string&)>;

absl::StatusOr<TransportReport> RunTransportBench(const TransportBenchOptions& options,
                                                  const Progress& progress);

// The kv_sink role: listens on 127.0.0.1:0 with transports `tls`, prints
// "ADDR host:port" on stdout, lands messages in `slots` slots of `slot_bytes`
// (slot = request_id % slots) and exits when stdin closes. Returns the exit code.
int RunKvSinkRole(const std::string& tls, uint64_t slot_bytes, int slots, int verifier_threads,
                  int fused_receive);

}  // namespace ced::bench
