// Per-operation state of UcxTransport, shared by its .cc files. Internal.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/kv_transport/ucx/ucx_transport.h"

namespace ced::kv_transport::ucx {

// AM ids and the data message's AM header: KvMessageHeader bytes + send id +
// connection id + connection secret (u64 LE each; ucx_exchange.h).
inline constexpr unsigned kAmData = 0x4B56;
inline constexpr unsigned kAmAck = 0x4B57;
// Receiver -> sender when the receiving transport shuts down: {connection id,
// connection secret} (u64 LE each) as the AM header, no data.
inline constexpr unsigned kAmBye = 0x4B58;
inline constexpr size_t kByeBytes = 16;
inline constexpr size_t kEnvelopeBytes = kKvHeaderBytes + 24;

// One connection: a client endpoint (made by Send toward `peer`) or an accepted
// one (made by the listener toward a client that exchanged addresses with it).
struct UcxTransport::EpContext {
  UcxTransport* self = nullptr;
  ucp_ep_h ep = nullptr;   // null while the addresses are being exchanged
  std::string peer;        // "host:port" for client endpoints, empty for accepted ones
  ConnectionGrant grant;   // the listener's id and secret for this connection
  bool connected = false;  // client endpoints: wireup finished (first flush completed)
  bool failed = false;
  bool close_queued = false;      // in to_close_ (or closing already)
  bool described = false;         // its lanes were logged (TransportOptions::log_connections)
  std::optional<bool> fused;      // accepted ones: receive through the fused datatype
  std::thread exchange;           // client endpoints: the address exchange (joined when done)
  uint64_t exchange_send_id = 0;  // the Send whose header the exchange presented
  std::vector<std::shared_ptr<SendOp>> waiting;  // Sends queued until connected
};

struct UcxTransport::SendOp {
  UcxTransport* self = nullptr;
  uint64_t id = 0;
  std::string peer;
  SockAddr addr;
  KvMessageHeader header;  // as sent (with its payload checksum)
  std::array<uint8_t, kEnvelopeBytes> envelope{};
  std::vector<ucp_dt_iov_t> iov;  // payload pieces; one piece is sent as contiguous
  EpContext* ep = nullptr;        // progress thread only

  absl::Mutex mu;
  bool sent ABSL_GUARDED_BY(mu) = false;      // UCX no longer references the payload
  bool settled ABSL_GUARDED_BY(mu) = false;   // the verdict is known
  bool finished ABSL_GUARDED_BY(mu) = false;  // Finish ran
  absl::Status verdict ABSL_GUARDED_BY(mu);
  KvTransport::SendDone on_done;  // SendAsync: runs once, from Finish
  // SendAsync: its entry in deadlines_ (progress thread only).
  std::optional<std::multimap<absl::Time, uint64_t>::iterator> deadline;

  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return sent && settled; }
};

struct UcxTransport::RecvOp {
  UcxTransport* self = nullptr;
  KvMessageHeader header;
  uint64_t send_id = 0;
  uint64_t conn_id = 0;  // the accepted connection it came on (acknowledged there)
  std::vector<MemSpan> spans;
  std::vector<ucp_dt_iov_t> iov;
  // Fused receives: the runs of the payload landed so far, each with the
  // checksum of its bytes (one run when fragments arrive in order).
  struct Landed {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint32_t crc = 0;
  };
  bool fused = false;
  std::vector<Landed> landed;
  uint32_t landed_crc = 0;  // their checksum, when handed to the verifier thread
  bool abandoned = false;  // completed as CANCELLED at shutdown; UCX may still call back
  bool verifying = false;  // landed; its checksum is with the verifier thread
};

}  // namespace ced::kv_transport::ucx
