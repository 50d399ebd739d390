// A guard in front of the UCX listener. UCX's TCP connection manager (tcp_sockcm,
// UCX 1.13) asserts, i.e. aborts the whole process, on malformed bytes from any
// peer that connects to the listening port (e.g. more bytes than its header
// announces). The guard owns the public listening port instead: it reads each
// connection's request message ({u64 length, u8 status, padding} header of 16
// bytes, then `length` bytes of private data), refuses anything that is not
// well-formed (closing that connection only), and only then connects to the
// real UCX listener, on the same local address the client reached (so UCX
// picks the same interface), and relays the connection both ways: the
// server's reply, then at most the client's 16-byte connection notification
// (length 0), held back until the server has replied. Only the connection
// manager's short handshake goes through here; the K/V data lanes connect to
// UCX directly.
//
// Used only on loopback listeners: UCX's connection manager takes the client's
// TCP device address from the socket peer, which a relay replaces with its own,
// so a guarded listener cannot serve peers on other hosts (see
// UcxTransport::Listen). A listener on a routable address is not guarded.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"

namespace ced::kv_transport::ucx {

class HandshakeGuard {
 public:
  // Most concurrent guarded connections; more are closed at once.
  static constexpr int kMaxConnections = 256;
  // The request message must arrive within this long.
  static constexpr int kHandshakeTimeoutMs = 5000;
  // Largest private data accepted: UCX's default tcp_sockcm buffer, or more
  // when UCX_TCP_CM_PRIV_DATA_LEN (bytes, or with a K / M suffix) says so.
  static constexpr uint64_t kMaxPrivateDataBytes = 2048;

  // Listens on `addr` (port 0 picks one) and forwards to the UCX listener's
  // `ucx_port`. UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HandshakeGuard>> Start(const sockaddr* addr,
                                                               socklen_t length, uint16_t ucx_port);
  // Stops accepting, closes every guarded connection and joins its threads.
  ~HandshakeGuard();
  HandshakeGuard(const HandshakeGuard&) = delete;
  HandshakeGuard& operator=(const HandshakeGuard&) = delete;

  uint16_t port() const { return port_; }
  // Connections refused as malformed so far.
  uint64_t refused() const { return refused_.load(); }

 private:
  HandshakeGuard() = default;
  void AcceptLoop();
  void Serve(int client);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stops the accept loop
  uint16_t port_ = 0;
  uint16_t ucx_port_ = 0;
  uint64_t max_private_data_ = kMaxPrivateDataBytes;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread accept_thread_;

  struct Connection {
    int client = -1;
    int upstream = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by mu_
};

}  // namespace ced::kv_transport::ucx
