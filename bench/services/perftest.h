// Runs one ucx_perftest bandwidth measurement on loopback: a server process
// and a client process, both with UCX_TLS set, and reads the client's final
// "overall" bandwidth. Blocking. When the server dies before the client
// connected (its port got taken), retries on another free port.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ced::bench {

struct PerftestRun {
  std::string binary = "ucx_perftest";
  std::string test = "ucp_am_bw";
  std::string tls;  // UCX_TLS for both processes
  uint64_t size = 0;
  int iters = 0;
  int warmup = 0;
  int outstanding = 1;  // -O
  // -e: endpoints with peer error handling, as the KV transport makes them (and,
  // where UCX_TLS may select shared memory, UCX_MM_ERROR_HANDLING=y as it sets).
  bool error_handling = false;
  int port = 0;         // -p, the out-of-band port; 0 picks a free one
  std::string log_dir;  // server/client logs
  double timeout_s = 120;
};

// Bandwidth in 1e9 bytes per second (perftest prints MiB/s; converted here).
absl::StatusOr<double> RunPerftest(const PerftestRun& run);

// First line of `ucx_info -v` without the leading "# ", or "" when unavailable.
std::string UcxVersionString();

}  // namespace ced::bench
