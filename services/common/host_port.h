// "host:port" addresses as every flag and peer list spells them. Pure
// functions; thread-safe. No gRPC here: the KV transports, the metrics and
// HTTP servers, the benches and the tests all link it (ced_net).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ced::services {

struct HostPort {
  std::string host;  // without IPv6 brackets; empty means every interface
  uint16_t port = 0;
};

// Parses "host:port" or "[v6]:port" (port 0..65535; 0 asks for any free
// port). INVALID_ARGUMENT quoting the address otherwise.
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);
// A peer to connect to, given by --`flag`: "host:port" with a host and a
// port in 1..65535. INVALID_ARGUMENT naming the flag otherwise.
absl::Status CheckPeerAddress(const std::string& flag, const std::string& address);
// Formats back to "host:port" / "[v6]:port".
std::string FormatHostPort(const std::string& host, uint16_t port);

}  // namespace ced::services
