// The completion queue every call's worker streams (and their timers) report
// to, polled by a few threads of the gateway's own. A burst of tokens (one
// per stream at each decode step) is handled by the thread that polled it,
// in one pass, instead of waking one thread per request for each token.
#pragma once

#include <grpcpp/grpcpp.h>

#include <thread>
#include <vector>

namespace ced::gateway {

class StreamRelay {
 public:
  // What a completed operation is handed to. An operation's tag must point
  // to a Tag (the first member of the caller's own op struct).
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void OnCompletion(void* tag, bool ok) = 0;
  };
  struct Tag {
    Handler* handler;
  };

  // `threads` <= 0: one per four CPUs, between 1 and 8.
  explicit StreamRelay(int threads = 0);
  // Shuts the queue down and joins the threads: every operation on it must
  // have completed (the calls ended).
  ~StreamRelay();
  StreamRelay(const StreamRelay&) = delete;
  StreamRelay& operator=(const StreamRelay&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  grpc::CompletionQueue cq_;
  std::vector<std::thread> threads_;
};

}  // namespace ced::gateway
