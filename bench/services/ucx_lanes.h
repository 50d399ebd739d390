// Diagnostic for the transport section: which UCX lanes an endpoint made from
// an exchanged worker address gets for a UCX_TLS value, with peer error
// handling (how the KV transport creates its endpoints, including its
// MM_ERROR_HANDLING switch for shared memory) and without (how ucx_perftest
// connects by default). Two UCP contexts in this process; blocking; not
// thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ced::bench {

struct UcxLanes {
  std::string am;            // transports carrying active messages ("sysv/memory", "tcp/lo", ...)
  std::string rndv;          // transports carrying rendezvous (large) payloads, then
                             // "(RMA)" for RMA lanes or "(AM)" for the bulk
                             // active-message lanes (used when there are no RMA lanes)
  std::string am_protocols;  // "0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)"
};

absl::StatusOr<UcxLanes> ProbeUcxLanes(const std::string& tls, bool peer_error_handling);

}  // namespace ced::bench
