// The KV data plane seam (DESIGN.md §2 "KV data plane"): a prefill worker streams
// per-token K/V rows and a final tail to a decode worker. One subfolder per fabric
// (ucx/, inproc/); CreateKvTransport is the only public entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/kv_transport/wire.h"

namespace ced::kv_transport {

// Destination memory for a payload (e.g. KV cache blocks). Not owned.
struct MemSpan {
  uint8_t* data = nullptr;
  size_t size = 0;
};
// Source memory of a payload. Not owned.
struct ConstSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Implemented by the receiving (decode) worker. Calls into one sink are serialized
// (never concurrent) and come from transport threads: keep them short and never call
// back into the transport from them. The sink must outlive the transport it is
// registered with.
class KvSink {
 public:
  virtual ~KvSink() = default;
  // A peer asks to connect in order to send `h` (its first message; wire-checked):
  // OK lets it connect. Called before anything of the peer reaches the fabric
  // library, and must not change state. The default admits every peer: a sink
  // that listens where strangers can reach it (the decode worker's) admits only
  // peers that name a live reservation.
  virtual absl::Status Admit(const KvMessageHeader& h) { return absl::OkStatus(); }
  // Validates the (already wire-checked) header against the reservation named by
  // request_id / transfer_token and returns where the payload must land: spans whose
  // sizes sum to h.payload_bytes, valid until Complete is called. An error rejects
  // the message: its payload is discarded, Complete is not called, and the sender's
  // Send returns this status.
  virtual absl::StatusOr<std::vector<MemSpan>> Accept(const KvMessageHeader& h) = 0;
  // Called exactly once for every accepted message, after its payload has fully
  // landed and its checksum matched (OK), or on failure: DATA_LOSS (checksum
  // mismatch), UNAVAILABLE (connection lost mid-transfer), CANCELLED (transport
  // shutting down), INTERNAL (Accept returned spans of the wrong total size).
  // The sender's Send returns `status` as well when the connection still stands.
  virtual void Complete(const KvMessageHeader& h, absl::Status status) = 0;
};

struct TransportOptions {
  std::string kind = "ucx";  // "ucx" | "inproc" | "nccl" (GPU memory, cuda/cuda_transport.h)
  // Send gives up with DEADLINE_EXCEEDED after this long without the receiver's verdict.
  int64_t send_timeout_ms = 30000;
  // Largest payload accepted, both when sending and when receiving.
  uint64_t max_payload_bytes = uint64_t{1} << 32;
  // UCX transports ("tcp", "shm,tcp", ...). Empty: UCX's own configuration, i.e. the
  // UCX_TLS environment variable or UCX's default. Peers exchange worker
  // addresses over TCP on the listening port, then use whichever of these
  // reach each other (shared memory only between processes on one host).
  std::string ucx_tls;
  // Where a UCX receiver verifies payload checksums: on a verifier thread of its
  // own (1), so that other messages keep landing meanwhile, or on the progress
  // thread right after the payload landed (0), while it is still in that core's
  // cache and without a thread handoff each way. -1 picks 1 when the process may
  // run on at least 4 CPUs, else 0: with fewer, the verifier thread has no core
  // of its own and only adds wakeups.
  int verifier_threads = -1;
  // How a UCX receiver lands a rendezvous payload. 1: through UCX's generic
  // datatype, whose unpack copies each arriving fragment into the sink's spans
  // and checksums it in the same pass (no separate verification read). 0: UCX
  // writes the spans itself (zero-copy where its lanes can), then the payload is
  // read once more to verify it (see verifier_threads). -1 picks 1 on connections
  // whose rendezvous runs over active-message lanes (shared memory with peer
  // error handling, tcp: UCX copies every fragment anyway) and 0 on RMA lanes.
  int fused_receive = -1;
  // Log each connection (peer and the UCX lanes it uses) to stderr once it
  // carries its first message.
  bool log_connections = false;
  // Test only: Send puts a wrong payload checksum on the wire.
  bool corrupt_payload_checksum_for_testing = false;
};

// Moves KV messages between workers. All methods are thread-safe. Destroy it only
// once no call into it is running; destruction stops listening, closes the
// connections and completes the sink's accepted-but-unfinished messages with
// CANCELLED.
class KvTransport {
 public:
  virtual ~KvTransport() = default;
  // Starts receiving on `address` ("host:port"; port 0 picks a free port; for
  // "inproc" any name, ":0" suffix picks a unique one) and delivers to `sink`.
  // Returns the bound address. At most once per transport (FAILED_PRECONDITION).
  virtual absl::StatusOr<std::string> Listen(const std::string& address, KvSink* sink) = 0;
  // Sends `h` with the payload gathered from `payload` (whose sizes must sum to
  // h.payload_bytes; h.payload_checksum is computed here, the caller's value is
  // ignored) to the transport listening at `peer`. Blocks until the receiver's
  // verdict arrives: OK once the payload landed and matched its checksum, the
  // sink's Accept error if rejected, DATA_LOSS on a checksum mismatch, UNAVAILABLE
  // when the peer is unreachable or the connection fails, DEADLINE_EXCEEDED after
  // send_timeout_ms. The payload memory is no longer referenced once Send returns;
  // when it returns the receiver's verdict, the sink's Complete has already run.
  // Connections are cached per peer and re-established after a failure; many Sends
  // may be in flight at once from different threads.
  virtual absl::Status Send(const std::string& peer, const KvMessageHeader& h,
                            const std::vector<ConstSpan>& payload) = 0;
  // Send, with h.payload_checksum already holding the CRC32C of the payload as
  // gathered (Crc32c over the spans in order), computed by the producer while
  // the bytes were still in its cache: the transport does not read the payload
  // once more for it. The receiver verifies it as always, so a wrong value fails
  // the message with DATA_LOSS. Transports that checksum elsewhere (on the
  // device) compute it anyway.
  virtual absl::Status SendChecksummed(const std::string& peer, const KvMessageHeader& h,
                                       const std::vector<ConstSpan>& payload) {
    return Send(peer, h, payload);
  }
  // How SendAsync reports: once, with the status Send would have returned.
  using SendDone = std::function<void(absl::Status)>;
  // Send without blocking: returns at once, and `done` runs later with the
  // verdict, on a transport thread (or on the calling thread, before SendAsync
  // returns, for errors found before anything was sent). The payload must stay
  // valid and unchanged until `done` runs. `checksum_given`: as SendChecksummed.
  // `done` must be short; it may call SendAsync again, never Send, and it may
  // run while the transport is being destroyed (CANCELLED). Keeping several
  // messages in flight this way is what makes a stream of K/V chunks fast: no
  // thread waits out each verdict's round trip. The default sends synchronously.
  virtual void SendAsync(const std::string& peer, const KvMessageHeader& h,
                         const std::vector<ConstSpan>& payload, bool checksum_given,
                         SendDone done) {
    done(checksum_given ? SendChecksummed(peer, h, payload) : Send(peer, h, payload));
  }
  // "ucx" or "inproc".
  virtual std::string name() const = 0;
};

absl::StatusOr<std::unique_ptr<KvTransport>> CreateKvTransport(const TransportOptions& options);

}  // namespace ced::kv_transport
