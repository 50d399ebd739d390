// Per-operation state of UcxTransport, shared by its .cc files. Internal.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/kv_transport/ucx/ucx_transport.h"

namespace ced::kv_transport::ucx {

// AM ids and the data message's AM header: KvMessageHeader bytes + send id (u64 LE).
inline constexpr unsigned kAmData = 0x4B56;
inline constexpr unsigned kAmAck = 0x4B57;
inline constexpr size_t kEnvelopeBytes = kKvHeaderBytes + 8;

struct UcxTransport::EpContext {
  UcxTransport* self = nullptr;
  ucp_ep_h ep = nullptr;
  std::string peer;        // "host:port" for client endpoints, empty for accepted ones
  bool connected = false;  // client endpoints: wireup finished (first flush completed)
  bool failed = false;
  std::vector<std::shared_ptr<SendOp>> waiting;  // Sends queued until connected
};

struct UcxTransport::SendOp {
  UcxTransport* self = nullptr;
  uint64_t id = 0;
  std::string peer;
  SockAddr addr;
  std::array<uint8_t, kEnvelopeBytes> envelope{};
  std::vector<ucp_dt_iov_t> iov;  // payload pieces; one piece is sent as contiguous
  EpContext* ep = nullptr;        // progress thread only

  absl::Mutex mu;
  bool sent ABSL_GUARDED_BY(mu) = false;     // UCX no longer references the payload
  bool settled ABSL_GUARDED_BY(mu) = false;  // the verdict is known
  absl::Status verdict ABSL_GUARDED_BY(mu);

  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return sent && settled; }
};

struct UcxTransport::RecvOp {
  UcxTransport* self = nullptr;
  KvMessageHeader header;
  uint64_t send_id = 0;
  ucp_ep_h reply_ep = nullptr;
  std::vector<MemSpan> spans;
  std::vector<ucp_dt_iov_t> iov;
  bool abandoned = false;  // completed as CANCELLED at shutdown; UCX may still call back
  bool verifying = false;  // landed; its checksum is with the verifier thread
};

}  // namespace ced::kv_transport::ucx
