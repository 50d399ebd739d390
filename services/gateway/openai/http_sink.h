// The HTTP front end of a GenerateCall: the call's thread pushes messages,
// the connection's thread takes them, waiting on an eventfd together with
// the client's socket so that a client that hangs up is seen at once.
#pragma once

#include <deque>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/gateway/generate_sink.h"

namespace ced::gateway::openai {

// Thread-safe: one producer (the call) and one consumer (the connection).
class HttpSink final : public GenerateSink {
 public:
  HttpSink();
  ~HttpSink() override;
  HttpSink(const HttpSink&) = delete;
  HttpSink& operator=(const HttpSink&) = delete;

  void Push(ced::v1::GenerateResponse response) override;
  void Close(const grpc::Status& status) override;

  enum class Wake { kReady, kPeerClosed, kTimeout };
  // Blocks until a message or the close is there (kReady), the peer of
  // `socket_fd` hung up (kPeerClosed; never with socket_fd < 0), or
  // `deadline` passed. Moves every queued message into *out.
  Wake Take(int socket_fd, absl::Time deadline, std::deque<ced::v1::GenerateResponse>* out);
  // The status given to Close, once it came (and every message was taken).
  std::optional<grpc::Status> closed() const;

 private:
  void Signal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int event_fd_;
  mutable absl::Mutex mu_;
  std::deque<ced::v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> status_ ABSL_GUARDED_BY(mu_);
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // the consumer sleeps on event_fd_
};

// The socket of the connection whose request this thread is serving
// (found by its addresses among the process's sockets; cached per thread),
// or -1. `local`/`remote` as httplib::Request gives them.
int FindConnectionSocket(const std::string& local_addr, int local_port,
                         const std::string& remote_addr, int remote_port);
// True when the peer of `fd` has closed the connection (or it failed).
bool PeerClosed(int fd);

// Shuts down (both directions) every connected TCP socket of this process
// whose local port is `local_port`: the connections a server on that port
// accepted. A connection thread waiting for a keep-alive client's next
// request then sees the end at once instead of waiting out its timeout.
// Returns how many it shut down.
int ShutdownAcceptedConnections(int local_port);

}  // namespace ced::gateway::openai
