// Small helpers for the UCX transport: socket addresses, UCX status conversion and
// the acknowledgement message's fixed layout. Thread-compatible.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <ucs/type/status.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/common/host_port.h"

namespace ced::kv_transport::ucx {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Resolves to a socket address (numeric or DNS name; passive = for listening).
absl::StatusOr<SockAddr> Resolve(const services::HostPort& hp, bool passive);
// The port of an AF_INET / AF_INET6 address, 0 otherwise.
uint16_t PortOf(const sockaddr_storage& addr);

// Whether a UCX_TLS value may enable the shared-memory (mm) transports: "all",
// an exclusion list ("^..."), or a list naming shm / sm / mm / posix / sysv.
bool MayUseSharedMemory(const std::string& tls);

// Which UCX transports an endpoint uses, from ucp_ep_print_info: for active
// messages and for rendezvous payloads ("sysv/memory", "cma/memory",
// "tcp/lo", ... joined by " + "; the rendezvous runs on the RMA lanes, or on
// the bulk active-message lanes when there are none).
struct EpLanes {
  std::string am;
  std::string rndv;
  bool rndv_rma = false;     // rndv names RMA lanes (zero-copy get/put), not AM lanes
  std::string am_protocols;  // "0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)"
};
EpLanes DescribeLanes(ucp_ep_h ep);

// `what` followed by UCX's description of `status`, as an absl status with `code`.
absl::Status UcsError(absl::StatusCode code, const std::string& what, ucs_status_t status);

// Acknowledgement (receiver -> sender): a fixed 40-byte AM header {send_id u64,
// connection id u64, connection secret u64 (both echoed from the data message),
// status code u32, message length u32, flags u32, reserved u32}, the message as
// AM data.
inline constexpr size_t kAckHeaderBytes = 40;
inline constexpr size_t kMaxAckMessageBytes = 512;
// The receiver knows no live connection by the message's id and secret: the
// sender must reconnect.
inline constexpr uint32_t kAckConnectionClosed = 1;
struct AckHeader {
  uint64_t send_id = 0;
  uint64_t conn_id = 0;
  uint64_t conn_secret = 0;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  uint32_t message_bytes = 0;
  uint32_t flags = 0;
};
void EncodeAckHeader(const AckHeader& ack, uint8_t out[kAckHeaderBytes]);
// Unknown status codes become kUnknown; message_bytes is clamped to kMaxAckMessageBytes.
AckHeader DecodeAckHeader(const uint8_t in[kAckHeaderBytes]);

void PutU64(uint8_t* p, uint64_t v);
uint64_t GetU64(const uint8_t* p);

}  // namespace ced::kv_transport::ucx
