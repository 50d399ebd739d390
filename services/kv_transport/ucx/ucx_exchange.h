// How two UCX KV transports find each other: a small TCP exchange of UCP worker
// addresses on the transport's public port, after which both sides create
// endpoints from the other's worker address (no UCX connection manager).
//
// Why not UCX's sockaddr (client-server) connections: with peer error handling,
// UCX 1.13 keeps their rendezvous payloads on tcp even between two processes on
// one host (endpoints made from worker addresses move them over shared
// memory); its TCP connection manager aborts the process on malformed bytes
// from any peer; and a relay in front of it hides the client's address from it,
// which breaks peers on other hosts. Endpoints made from worker addresses get
// every lane UCX_TLS allows (shared memory on one host, tcp across hosts), and
// the only bytes a stranger can send to the public port are parsed here, by
// code that refuses anything malformed and closes that connection only.
//
// The exchange (all integers little-endian):
//   hello  (client -> server): "CEDKVX01", u32 version (1), u32 address_bytes,
//          u64 reserved (0), the 64-byte KvMessageHeader of the message the
//          client wants to send (wire.h), then the client's worker address.
//   reply  (server -> client): "CEDKVX01", u32 status (absl code, 0 = OK),
//          u32 body_bytes, u64 connection id, u64 connection secret,
//          u64 reserved (0), then the server's worker address (OK) or an
//          error message.
// The server hands the KV header to its sink (KvSink::Admit) before it lets UCX
// near the client's address: only a peer that names a live reservation (its
// request id and one-time transfer token) gets an endpoint, so a stranger's
// bytes never reach UCX's address parser. The server creates its endpoint to
// the client before it replies; the client
// creates its endpoint after. Every data message carries the connection id and
// secret, every acknowledgement echoes them: a message naming no live
// connection of this transport is refused.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/kv_transport/wire.h"

namespace ced::kv_transport::ucx {

inline constexpr size_t kHelloBytes = 24 + kKvHeaderBytes;
inline constexpr size_t kReplyBytes = 40;
// Largest worker address accepted (UCX's are a few hundred bytes).
inline constexpr uint32_t kMaxWorkerAddressBytes = 16384;
inline constexpr uint32_t kMaxExchangeMessageBytes = 512;

// What the server grants a client: the connection's id and secret.
struct ConnectionGrant {
  uint64_t id = 0;
  uint64_t secret = 0;
};

// What the client learns.
struct ExchangeResult {
  ConnectionGrant grant;
  std::string server_address;  // the server's UCP worker address
};

// Wire encoding, separate from the sockets so that tests and fuzzers reach it.
std::string EncodeHello(const KvMessageHeader& first, absl::Span<const uint8_t> worker_address);
struct Hello {
  uint32_t address_bytes = 0;  // the worker address that follows
  KvMessageHeader first;       // the message the client wants to send
};
// Checks a hello (its first kHelloBytes bytes; the KV header as DecodeHeader does).
absl::StatusOr<Hello> DecodeHelloHeader(absl::Span<const uint8_t> header,
                                        uint64_t max_payload_bytes);
std::string EncodeReply(const absl::StatusOr<ConnectionGrant>& grant,
                        absl::Span<const uint8_t> server_address);
struct ReplyHeader {
  absl::Status status;  // the server's verdict (its message follows in the body)
  uint32_t body_bytes = 0;
  ConnectionGrant grant;
};
absl::StatusOr<ReplyHeader> DecodeReplyHeader(absl::Span<const uint8_t> header);

// The client side: connects to `peer`, sends `first` and `own_address`, returns the grant
// and the server's worker address. UNAVAILABLE if the peer cannot be reached or
// answers with anything malformed, the server's own status if it refuses,
// DEADLINE_EXCEEDED after `timeout_ms`; CANCELLED as soon as `stop` is set.
absl::StatusOr<ExchangeResult> ExchangeAddresses(const sockaddr* peer, socklen_t peer_length,
                                                 const KvMessageHeader& first,
                                                 absl::Span<const uint8_t> own_address,
                                                 int timeout_ms, const std::atomic<bool>& stop);

// The server side: owns the transport's public port. Each connection is served
// on its own thread (at most kMaxConnections at once): a well-formed hello
// within kHandshakeTimeoutMs is handed to `accept` (which creates the
// endpoint to the client and returns the grant), and the reply goes back.
class AddressExchangeServer {
 public:
  static constexpr int kMaxConnections = 256;
  static constexpr int kHandshakeTimeoutMs = 5000;

  // Called on a connection's thread with a well-formed hello and the client's
  // worker address; must return within kHandshakeTimeoutMs or give up.
  using AcceptFn = std::function<absl::StatusOr<ConnectionGrant>(
      const Hello& hello, const std::string& client_address)>;

  // Listens on `addr` (port 0 picks one). UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<AddressExchangeServer>> Start(const sockaddr* addr,
                                                                      socklen_t length,
                                                                      std::string server_address,
                                                                      uint64_t max_payload_bytes,
                                                                      AcceptFn accept);
  // Stops accepting, closes every connection and joins its threads.
  ~AddressExchangeServer();
  AddressExchangeServer(const AddressExchangeServer&) = delete;
  AddressExchangeServer& operator=(const AddressExchangeServer&) = delete;

  uint16_t port() const { return port_; }
  // Connections refused as malformed, too many or timed out so far.
  uint64_t refused() const { return refused_.load(); }
  // Whether the server is stopping (accept callbacks should give up).
  const std::atomic<bool>& stopping() const { return stop_; }

 private:
  AddressExchangeServer() = default;
  void AcceptLoop();
  void Serve(int client);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stops the accept loop
  uint16_t port_ = 0;
  std::string server_address_;
  uint64_t max_payload_bytes_ = 0;
  AcceptFn accept_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread accept_thread_;

  struct Connection {
    int client = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by mu_
};

}  // namespace ced::kv_transport::ucx
