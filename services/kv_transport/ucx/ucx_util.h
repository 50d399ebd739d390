// Small helpers for the UCX transport: socket addresses, UCX status conversion and
// the acknowledgement message's fixed layout. Thread-compatible.
#pragma once

#include <sys/socket.h>
#include <ucs/type/status.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::kv_transport::ucx {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

struct HostPort {
  std::string host;  // without IPv6 brackets
  uint16_t port = 0;
};

// Parses "host:port" or "[v6]:port". An empty host means every interface.
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);
// Formats back to "host:port" / "[v6]:port".
std::string FormatHostPort(const std::string& host, uint16_t port);
// Resolves to a socket address (numeric or DNS name; passive = for listening).
absl::StatusOr<SockAddr> Resolve(const HostPort& hp, bool passive);
// The port of an AF_INET / AF_INET6 address, 0 otherwise.
uint16_t PortOf(const sockaddr_storage& addr);

// Whether a UCX_TLS value may enable the shared-memory (mm) transports: "all",
// an exclusion list ("^..."), or a list naming shm / sm / mm / posix / sysv.
bool MayUseSharedMemory(const std::string& tls);

// `what` followed by UCX's description of `status`, as an absl status with `code`.
absl::Status UcsError(absl::StatusCode code, const std::string& what, ucs_status_t status);

// Acknowledgement (receiver -> sender): a fixed 16-byte AM header
// {send_id u64, status code u32, message length u32}, the message as AM data.
inline constexpr size_t kAckHeaderBytes = 16;
inline constexpr size_t kMaxAckMessageBytes = 512;
void EncodeAckHeader(uint64_t send_id, absl::StatusCode code, uint32_t message_bytes,
                     uint8_t out[kAckHeaderBytes]);
struct AckHeader {
  uint64_t send_id = 0;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  uint32_t message_bytes = 0;
};
// Unknown status codes become kUnknown; message_bytes is clamped to kMaxAckMessageBytes.
AckHeader DecodeAckHeader(const uint8_t in[kAckHeaderBytes]);

void PutU64(uint8_t* p, uint64_t v);
uint64_t GetU64(const uint8_t* p);

}  // namespace ced::kv_transport::ucx
