// The HTTP front end of a GenerateCall: the call's thread pushes messages,
// the connection's thread takes them, waiting on an eventfd together with
// the client's socket so that a client that hangs up is seen at once.
//
// A streamed response on a plain TCP connection goes direct once its headers
// are out (StreamDirect): the pushing thread renders each message and sends
// it as one HTTP/1.1 chunk without blocking, so a token costs one send()
// instead of a wake-up of the connection's thread and its four system calls
// (eventfd read, httplib's two writability polls, the send). Bytes the socket
// does not take at once are left to the connection's thread, which otherwise
// sleeps until the call ends or the client goes.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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
  // Wakes the consumer once (Take returns kReady, maybe with no message).
  void Started() override;
  // Whether Started came: the response may commit to a stream.
  bool started() const;

  enum class Wake { kReady, kPeerClosed, kTimeout };
  // Blocks until a message or the close is there, or Started came and was
  // not reported yet (kReady), the peer of
  // `socket_fd` hung up (kPeerClosed; never with socket_fd < 0), or
  // `deadline` passed. Moves every queued message into *out.
  Wake Take(int socket_fd, absl::Time deadline, std::deque<ced::v1::GenerateResponse>* out);
  // Take over several sinks (the choices of one request; Take is it over
  // one): waits until one of them is ready as Take means it, then moves
  // every sink's messages to (*out)[i] (resized to sinks.size()). Pass only
  // sinks not yet seen closed: a closed one is always ready.
  static Wake TakeAny(const std::vector<HttpSink*>& sinks, int socket_fd, absl::Time deadline,
                      std::vector<std::deque<ced::v1::GenerateResponse>>* out);
  // The status given to Close, once it came (and every message was taken).
  std::optional<grpc::Status> closed() const;

  // Appends the events of a message to the string (the response's renderer).
  using Render = std::function<void(const ced::v1::GenerateResponse&, std::string*)>;
  // The events that end the stream after the call closed with a status.
  using RenderEnd = std::function<std::string(const grpc::Status&)>;
  // Called on the connection's thread once the response's headers (and
  // anything before) are written with chunked transfer encoding on the plain
  // TCP socket `socket_fd`: from now on every message is rendered (under this
  // sink's lock, so the renderers need no lock of their own) and written to
  // the socket as one chunk, by the pushing thread when the socket takes it at
  // once, else by this thread (each write bounded by `write_timeout`).
  // Messages still queued are written first. Returns true once the close's
  // events are written (the caller then ends the chunked body), false when
  // the client hung up, a write failed or timed out, or `deadline` passed.
  // Nothing is rendered after it returns.
  bool StreamDirect(int socket_fd, absl::Time deadline, absl::Duration write_timeout,
                    Render render, RenderEnd render_end);

 private:
  void Signal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frames `events` as one chunk and sends it without blocking, or appends
  // it (or what the socket did not take) to backlog_ for the connection's thread.
  void WriteDirect(const std::string& events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The direct mode is over: nothing more is rendered or sent.
  void EndDirect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int event_fd_;
  mutable absl::Mutex mu_;
  std::deque<ced::v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> status_ ABSL_GUARDED_BY(mu_);
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // the consumer sleeps on event_fd_
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool started_taken_ ABSL_GUARDED_BY(mu_) = false;  // a Take reported it
  // Direct mode (StreamDirect): the socket, the renderers, the framed bytes
  // the connection's thread still has to write, whether it is writing some
  // now (then nothing else may be sent before them), and whether the
  // connection failed.
  int direct_fd_ ABSL_GUARDED_BY(mu_) = -1;
  Render render_ ABSL_GUARDED_BY(mu_);
  RenderEnd render_end_ ABSL_GUARDED_BY(mu_);
  std::string backlog_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

// `data` as one chunk of a chunked HTTP/1.1 body: size in hex, CRLF, the
// bytes, CRLF.
std::string HttpChunk(const std::string& data);

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
