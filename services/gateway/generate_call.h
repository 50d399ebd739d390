// One Generate request at the gateway: route, reserve on the decode worker,
// start the prefill, relay tokens in order, and clean up on every exit.
//
// Migration (DESIGN.md 2): when the decode worker dies mid-stream (its stream
// or Reserve ends UNAVAILABLE and it no longer answers), the call routes the
// rest of the request again, away from the dead worker: prompt + the tokens
// already streamed, the remaining max_tokens, the same seed with the
// sampler's step offset set to the tokens streamed, and a replay window that
// starts where the original's did. The client's stream goes on with the same
// tokens; at most GatewaySettings::migration_limit times. A prefill worker
// that dies before the decode worker streamed a token is replaced once.
//
// Threads: Run() executes on a thread of its own: the unary calls (Route,
// Reserve, Cancel) are synchronous; the decode and prefill streams are read
// through the call's own completion queue, which this thread polls, so a
// token goes from the socket to the client without another thread's hand-off,
// and the tokens that arrived while it was busy go out as one message.
// Cancel() may be called from any thread (the reactor's OnCancel, an HTTP
// connection that saw its client leave).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/v1/gateway.pb.h"
#include "services/gateway/gateway_core.h"
#include "services/gateway/generate_sink.h"
#include "services/gateway/request_validation.h"
#include "services/gateway/token_assembler.h"

namespace ced::gateway {

class GenerateCall final {
 public:
  // `core` must outlive the call (GatewayCore::WaitForCalls). The request
  // must already hold its request id and be admitted (GatewayCore::TryAdmit);
  // StartGenerate does both. `api` labels the call's metrics.
  GenerateCall(GatewayCore* core, Api api, ValidatedRequest request,
               std::shared_ptr<GenerateSink> sink,
               std::chrono::system_clock::time_point client_deadline, absl::Time received);
  ~GenerateCall();

  // Runs the call on a new detached thread that owns `call`. The admission
  // slot is released just before the client gets the final status;
  // GatewayCore::CallEnded is signalled once the thread no longer uses the call.
  static void Launch(std::shared_ptr<GenerateCall> call);

  // Client cancellation or deadline: stops the work on both workers.
  void Cancel();

 private:
  // One server stream of a worker read through the call's completion queue:
  // from StartCall until its Finish completed exactly one operation is
  // outstanding, tagged with one of the three Op members.
  struct Op {
    enum class Kind { kStart, kRead, kFinish };
    void* stream;  // the AsyncStream<...> this op belongs to
    Kind kind;
    bool decode;  // which of the attempt's streams
    int attempt;  // Attempt::index
  };
  template <typename Message>
  struct AsyncStream {
    std::unique_ptr<grpc::ClientAsyncReader<Message>> reader;
    Message message;      // the last message read (valid until the next Read)
    grpc::Status status;  // once finished
    bool open = false;    // an operation is outstanding
    Op start, read, finish;
  };
  // One placement of the request's remaining tokens and the calls on its
  // workers: the first attempt serves the request as sent, each migration or
  // prefill retry starts the next. Filled by the Run thread; the contexts may
  // be cancelled from any thread.
  struct Attempt {
    enum class Cause { kNew, kMigration, kPrefillRetry };
    int index = 0;
    Cause cause = Cause::kNew;
    std::string worker_request_id;  // the request's id on the workers
    int base_step = 0;              // tokens streamed before this attempt: its step 0 is this step
    ced::internal::RouteResponse route;
    std::unique_ptr<ced::internal::DecodeWorker::Stub> decode_stub;
    std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill_stub;
    AsyncStream<ced::internal::TokenChunk> decode;
    AsyncStream<ced::internal::PrefillResponse> prefill;
    bool reserve_sent = false;
    bool reserved = false;
    bool prefill_started = false;
    bool decode_complete = false;      // final chunk and OK status received
    bool reserve_unavailable = false;  // Reserve: UNAVAILABLE (draining, or gone)
    bool reserve_refused = false;      // Reserve: ALREADY_EXISTS (another request's id there)
    bool prefill_complete = false;     // OK status received
    bool worker_unavailable = false;   // Reserve or a worker stream ended UNAVAILABLE
    bool cleaned_up = false;           // CleanUp ran
    int decode_tokens = 0;             // tokens the decode stream delivered
    absl::Time prefill_start;          // Prefill called (or, locally, Reserve returned)
    ced::internal::TokenChunk final_chunk;
    ced::internal::PrefillDone prefill_done;
    // Contexts of every downstream call: TryCancel at any time (before,
    // during or after their call).
    grpc::ClientContext route_ctx, reserve_ctx, decode_ctx, prefill_ctx;
  };
  // Which of an attempt's workers did not answer the clean-up Cancel.
  struct Gone {
    bool decode = false;
    bool prefill = false;
  };

  void Run();
  grpc::Status Execute();
  // Routes, reserves and streams the request's remaining tokens (all of them
  // for the first attempt) on a new attempt, until it ends.
  grpc::Status RunAttempt(Attempt::Cause cause, const std::vector<std::string>& exclude);
  // Decides, after an attempt that failed with `status`, whether and how to
  // go on: false to end the request with *status (possibly reworded).
  bool PlanNext(grpc::Status* status, Attempt::Cause* cause, std::vector<std::string>* exclude);
  // The request finished before its decode worker died (every token or a
  // stop token streamed): sets up the final chunk; false otherwise.
  bool FinishedBeforeLoss(Attempt* a);
  // Relays the attempt's worker streams to the client until they end.
  grpc::Status Relay(Attempt* a);
  // After the attempt's final chunk: the final message, or the error it carried.
  grpc::Status Conclude(Attempt* a);
  grpc::Status CheckChunk(const ced::internal::TokenChunk& chunk) const;
  void Emit(const TokenAssembler::Output& output);
  void SendFinal(const std::string& text, ced::internal::FinishReason reason,
                 const std::string& detail);
  // What a completed operation means for the relay.
  enum class Got { kNothing, kMessage, kEnd };
  // Advances the stream of a completed operation: after a successful StartCall
  // the first Read, after a failed StartCall or Read the Finish. kMessage: the
  // stream's message is there (the caller reads the next with NextRead);
  // kEnd: the stream finished with its status.
  template <typename Message>
  void StartStream(Attempt* a, bool decode, AsyncStream<Message>* stream,
                   std::unique_ptr<grpc::ClientAsyncReader<Message>> reader);
  template <typename Message>
  static Got Advance(AsyncStream<Message>* stream, Op::Kind kind, bool ok) {
    switch (kind) {
      case Op::Kind::kStart:
        if (ok) {
          NextRead(stream);
        } else {
          stream->reader->Finish(&stream->status, &stream->finish);
        }
        return Got::kNothing;
      case Op::Kind::kRead:
        if (ok) return Got::kMessage;
        stream->reader->Finish(&stream->status, &stream->finish);
        return Got::kNothing;
      case Op::Kind::kFinish:
        stream->open = false;
        return Got::kEnd;
    }
    return Got::kNothing;
  }
  template <typename Message>
  static void NextRead(AsyncStream<Message>* stream) {
    stream->reader->Read(&stream->message, &stream->read);
  }
  // Advances the stream of the operation `tag` completed; the relay's own
  // streams are `current`'s; messages of the others (abandoned attempts) are
  // dropped. Returns an error that ends the attempt, or nullopt.
  struct RelayState;
  std::optional<grpc::Status> OnCompletion(void* tag, bool ok, Attempt* current, RelayState* st);
  bool Cancelled() const;
  // Waits until every stream of every attempt finished (their calls were
  // cancelled, or ended).
  void DrainStreams();
  void TryCancel(Attempt* a);
  void TryCancelAll();
  // Cancels the attempt's calls and its request on its workers (once).
  Gone CleanUp(Attempt* a);
  grpc::Status CancelStatus() const;
  std::chrono::system_clock::time_point Bounded(absl::Duration limit) const;
  Attempt* current() { return attempts_.back().get(); }

  GatewayCore* const core_;
  const Api api_;
  const ApiMetrics& api_metrics_;
  const ValidatedRequest request_;
  const std::shared_ptr<GenerateSink> sink_;
  const std::chrono::system_clock::time_point client_deadline_;
  const absl::Time received_;

  // Run thread only.
  TokenAssembler assembler_;
  absl::Time first_token_at_ = absl::InfinitePast();
  absl::Time last_token_at_ = absl::InfinitePast();
  int migrations_ = 0;
  int prefill_retries_ = 0;
  std::vector<std::string> migrated_from_;  // decode workers that died under the request
  std::vector<std::string> retried_from_;   // prefill workers that died before its first token

  // The worker streams' operations; polled by the Run thread only.
  grpc::CompletionQueue cq_;
  bool cq_shut_down_ = false;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Appended by the Run thread under mu_ (it reads them without); never shrinks.
  std::vector<std::unique_ptr<Attempt>> attempts_;
};

// The shared entry of both front ends: validates nothing (the caller did),
// admits `request` (RESOURCE_EXHAUSTED when over the bounds), gives it a
// request id (ALREADY_EXISTS when its own is in flight), and launches its
// call, whose output goes to `sink`. On error nothing was launched and the
// outcome is already counted in the metrics. *call (optional) receives the
// call, for Cancel().
grpc::Status StartGenerate(GatewayCore* core, Api api, ValidatedRequest request,
                           std::shared_ptr<GenerateSink> sink,
                           std::chrono::system_clock::time_point client_deadline,
                           absl::Time received, std::shared_ptr<GenerateCall>* call);

}  // namespace ced::gateway
