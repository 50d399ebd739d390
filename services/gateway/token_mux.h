// Multiplexed token streams from the decode workers (DecodeWorker.Subscribe):
// one stream per decode worker carries the tokens of every request this
// gateway reserved there, a batch step's tokens in one message when the
// gateway reads slower than they come, instead of one Stream call and one
// message per request and token. The per-token cost of a Stream (a message,
// a read completion and a thread wake-up on both sides) was most of the
// gateway's CPU at tens of concurrent streams.
//
// A call registers its request before the Reserve (so no chunk is lost),
// attaches when it starts relaying (chunks that came earlier are delivered
// then, in order) and detaches when it ends. A stream that breaks ends every
// request on it with UNAVAILABLE (the call's migration takes it from there)
// and the next request opens a new one. A worker without Subscribe
// (UNIMPLEMENTED) is served with per-request Streams.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/decode_worker.grpc.pb.h"

namespace ced::gateway {

class TokenMux {
 public:
  // What a registered request's events are delivered to, on the mux's
  // reader thread (or the attaching thread for events that came earlier);
  // never two at once for one registration.
  class Receiver {
   public:
    virtual ~Receiver() = default;
    virtual void OnMuxChunk(void* key, ced::internal::TokenChunk* chunk) = 0;
    // The request's last event: its end on the worker, or the stream's loss.
    virtual void OnMuxEnd(void* key, const grpc::Status& status) = 0;
  };
  struct Entry;

  TokenMux(std::string address, std::shared_ptr<grpc::Channel> channel, std::string subscriber_id);
  ~TokenMux();  // cancels the stream and joins its reader
  TokenMux(const TokenMux&) = delete;
  TokenMux& operator=(const TokenMux&) = delete;

  const std::string& subscriber_id() const { return subscriber_id_; }
  const std::string& address() const { return address_; }
  // Waits until the stream is open or failed, at most until `deadline`;
  // OK when open. UNIMPLEMENTED: the worker has no Subscribe.
  grpc::Status WaitOpen(absl::Time deadline);
  // True once the stream broke or ended: register nothing more on it.
  bool broken() const;
  // True while the stream is open (opened and not broken).
  bool open() const;

  // Registers `request_id` (its chunks are kept until Attach); nullptr when
  // the stream is broken.
  std::shared_ptr<Entry> Register(const std::string& request_id);
  // Delivers the kept events, then the later ones as they come, to
  // `receiver` with `key`. Not with a lock the receiver's callbacks take.
  void Attach(Entry* entry, Receiver* receiver, void* key);
  // No event reaches the receiver once this returns. Idempotent.
  void Detach(Entry* entry);

 private:
  void ReadLoop();
  void Deliver(const std::shared_ptr<Entry>& entry, ced::internal::TokenChunk* chunk,
               const grpc::Status* end);

  const std::string address_;
  const std::string subscriber_id_;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> stub_;
  grpc::ClientContext ctx_;
  std::thread reader_;

  mutable absl::Mutex mu_;
  enum class State { kOpening, kOpen, kEnded };
  State state_ ABSL_GUARDED_BY(mu_) = State::kOpening;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// The gateway's TokenMux per decode worker address. Thread-safe.
class TokenMuxPool {
 public:
  TokenMuxPool() = default;
  ~TokenMuxPool();

  // The open mux of `address`, opening one if needed (waiting at most until
  // `deadline`); nullptr when the worker has no Subscribe or the stream did
  // not open: the caller uses a per-request Stream. `new_id` names a new
  // subscriber.
  std::shared_ptr<TokenMux> Get(const std::string& address,
                                const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& new_id, absl::Time deadline);
  // Without waiting: the open mux of `address`, or nullptr. *must_open (when
  // nullptr is returned) tells whether Get would open or wait for one (true)
  // or the worker has no Subscribe (false: use a per-request Stream).
  std::shared_ptr<TokenMux> GetOpen(const std::string& address, bool* must_open);

 private:
  // Whether `address` answered UNIMPLEMENTED less than a while ago (an
  // expired entry is dropped).
  bool UnsupportedLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<TokenMux>> muxes_ ABSL_GUARDED_BY(mu_);
  // Workers that answered UNIMPLEMENTED, and when to ask again.
  std::map<std::string, absl::Time> unsupported_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ced::gateway
