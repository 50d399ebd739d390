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
// Reserve retries: a decode worker that refuses the Reserve with
// RESOURCE_EXHAUSTED (no K/V room for prompt + max_tokens, or a full queue)
// holds nothing of the request; the call routes it again away from every
// decode worker that refused it, at most GatewaySettings::reserve_retries
// times. When none takes it the client gets RESOURCE_EXHAUSTED naming them.
//
// Threads: Run() executes on a thread of its own (one of CallThreads'): the
// decisions between attempts are its own, and so are the clean-up Cancels
// (synchronous). An attempt's placement does not wait for it: the Route, the
// Reserve and the start of the worker streams each start from the completion
// of the one before (the first attempt's from the thread that received the
// request, while the call is handed to its thread), and the Run thread waits
// for the outcome. The decode and prefill streams complete on the gateway's shared
// StreamRelay: while an attempt streams, the relay's threads assemble its
// tokens and write them to the client (the Run thread waits for the
// attempt's outcome), so a token reaches the client from the thread that
// polled it, with no hand-off per request. Cancel() may be called from any
// thread (the reactor's OnCancel, an HTTP connection that saw its client
// leave).
#pragma once

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
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
#include "services/gateway/token_mux.h"

namespace ced::gateway {

class GenerateCall final : public StreamRelay::Handler, public TokenMux::Receiver {
 public:
  // `core` must outlive the call (GatewayCore::WaitForCalls). The request
  // must already hold its request id and be admitted (GatewayCore::TryAdmit);
  // StartGenerate does both. `api` labels the call's metrics.
  GenerateCall(GatewayCore* core, Api api, ValidatedRequest request,
               std::shared_ptr<GenerateSink> sink,
               std::chrono::system_clock::time_point client_deadline, absl::Time received);
  ~GenerateCall();

  // Runs the call on a thread of the core's CallThreads, which owns `call`. The admission
  // slot is released just before the client gets the final status;
  // GatewayCore::CallEnded is signalled once the thread no longer uses the call.
  static void Launch(std::shared_ptr<GenerateCall> call);

  // Client cancellation or deadline: stops the work on both workers.
  void Cancel();

  // StreamRelay::Handler: an operation of one of this call's streams (or
  // timers) completed, on a relay thread.
  void OnCompletion(void* tag, bool ok) override;
  // TokenMux::Receiver: a chunk or the end of an attempt's request (`key`)
  // on its decode worker's multiplexed stream.
  void OnMuxChunk(void* key, ced::internal::TokenChunk* chunk) override;
  void OnMuxEnd(void* key, const grpc::Status& status) override;

 private:
  struct Attempt;
  // An operation on the relay's queue: one of a worker stream's (from
  // StartCall until its Finish completed exactly one is outstanding, tagged
  // with one of the stream's three Ops) or the prefill's grace timer.
  struct Op {
    enum class Kind { kStart, kRead, kFinish, kGrace };
    StreamRelay::Tag tag;  // first: the queue's tag points here
    void* stream;          // the AsyncStream<...> this op belongs to (not for kGrace)
    Kind kind;
    bool decode;  // which of the attempt's streams
    Attempt* attempt;
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
  // workers: the first attempt serves the request as sent, each migration,
  // prefill retry or reserve retry starts the next. Filled by the Run thread;
  // the contexts may be cancelled from any thread.
  struct Attempt {
    enum class Cause { kNew, kMigration, kPrefillRetry, kReserveRetry };
    int index = 0;
    Cause cause = Cause::kNew;
    std::string worker_request_id;  // the request's id on the workers
    int base_step = 0;              // tokens streamed before this attempt: its step 0 is this step
    std::vector<int32_t> prompt;  // the request's prompt + the tokens streamed before it
    ced::internal::RouteRequest route_request;
    ced::internal::RouteResponse route;
    ced::internal::ReserveRequest reserve;
    ced::internal::ReserveResponse reserved_response;
    ced::internal::PrefillRequest prefill_request;
    std::unique_ptr<ced::internal::DecodeWorker::Stub> decode_stub;
    std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill_stub;
    // Contexts of every downstream call: TryCancel at any time (before,
    // during or after their call). Declared before the streams: a stream's
    // reader lives in its call's arena, which its context's destruction frees.
    grpc::ClientContext route_ctx, reserve_ctx, decode_ctx, prefill_ctx;
    AsyncStream<ced::internal::TokenChunk> decode;
    // Set when the decode worker's tokens come on the gateway's multiplexed
    // stream to it (no decode Stream call then).
    std::shared_ptr<TokenMux> mux;
    std::shared_ptr<TokenMux::Entry> mux_entry;
    AsyncStream<ced::internal::PrefillResponse> prefill;
    // Fires prefill_grace after the token stream ended without the prefill's.
    std::unique_ptr<grpc::Alarm> grace;
    Op grace_op;
    bool grace_pending = false;
    // The placement's outcome (GenerateCall::place_mu_).
    bool placed = false;
    grpc::Status placement;
    bool reserve_on_run_thread = false;  // its decode worker's mux must be opened first
    bool relay_started = false;
    bool reserve_sent = false;
    bool reserved = false;  // the Reserve succeeded (set by the Run thread)
    bool prefill_started = false;
    bool decode_complete = false;      // final chunk and OK status received
    bool reserve_unavailable = false;  // Reserve: UNAVAILABLE (draining, or gone)
    bool reserve_refused = false;      // ALREADY_EXISTS or RESOURCE_EXHAUSTED: nothing landed
    bool reserve_exhausted = false;    // Reserve: RESOURCE_EXHAUSTED (no room there)
    bool no_decode_room = false;       // the router or a Reserve: no decode room now
    bool route_unavailable = false;    // Route: UNAVAILABLE (no worker for it, or no router)
    bool prefill_complete = false;     // OK status received
    bool worker_unavailable = false;   // Reserve or a worker stream ended UNAVAILABLE
    bool cleaned_up = false;           // CleanUp ran
    int decode_tokens = 0;             // tokens the decode stream delivered
    absl::Time prefill_start;          // Prefill called (or, locally, Reserve returned)
    ced::internal::TokenChunk final_chunk;
    ced::internal::PrefillDone prefill_done;
  };
  // Which of an attempt's workers did not answer the clean-up Cancel.
  struct Gone {
    bool decode = false;
    bool prefill = false;
  };

  void Run();
  grpc::Status Execute();
  // An attempt at the request's remaining tokens (all of them for the first):
  // BeginAttempt adds it and starts its placement without blocking (Route,
  // then the Reserve, then its streams: each step starts the next from the
  // completion of the one before, on whichever thread that completes);
  // FinishAttempt, on the Run thread, waits for the placement's outcome,
  // does what needs the Run thread (opening a worker's multiplexed stream,
  // a Reserve again) and then follows the streams until the attempt ends.
  Attempt* BeginAttempt(Attempt::Cause cause, const std::vector<std::string>& exclude);
  void OnRouted(Attempt* a, grpc::Status status);
  // The placement's outcome: the Run thread's FinishAttempt goes on.
  void Placed(Attempt* a, grpc::Status status);
  // Registers the attempt on its decode worker's mux (a->mux, when it has
  // one) and readies its Reserve; false when the call was cancelled (no
  // Reserve may go out).
  bool ReadyToReserve(Attempt* a);
  grpc::Status ReserveOnRunThread(Attempt* a);
  grpc::Status FinishAttempt(Attempt* a);
  // After a successful Reserve: starts the prefill and follows the tokens.
  void StartStreaming(Attempt* a);
  // Decides, after an attempt that failed with `status`, whether and how to
  // go on: false to end the request with *status (possibly reworded).
  bool PlanNext(grpc::Status* status, Attempt::Cause* cause, std::vector<std::string>* exclude);
  // PlanNext's part for a Reserve refused with RESOURCE_EXHAUSTED, or for a
  // re-placement that found no decode worker: false ends the request with
  // RESOURCE_EXHAUSTED naming the workers that refused it.
  bool PlanReserveRetry(grpc::Status* status, Attempt::Cause* cause,
                        std::vector<std::string>* exclude);
  // After PlanNext declined: a request refused for K/V room (no decode
  // worker has room now, or every one tried refused its Reserve: K/V blocks
  // or its queue bounds) before any token waits (GatewaySettings::kv_wait) and is placed again from
  // scratch; false (with *status saying how long it waited) once the wait
  // is over, the client's deadline is near, or it was cancelled. (One that
  // can never fit failed with INVALID_ARGUMENT, see OnRouted.)
  bool PlanKvWait(grpc::Status* status, Attempt::Cause* cause, std::vector<std::string>* exclude);
  // A migration whose Route failed UNAVAILABLE (no worker to move to, or no
  // router) waits 250 ms and tries again (GatewaySettings::migration_wait),
  // letting a gone decode worker that is back (restarted under its id)
  // take it; false (with *status saying how long it waited) once the
  // wait is over, or when it does not apply.
  bool PlanMigrationWait(grpc::Status* status, std::vector<std::string>* exclude);
  // The request finished before its decode worker died (every token or a
  // stop token streamed): sets up the final chunk; false otherwise.
  bool FinishedBeforeLoss(Attempt* a);
  // Relays the attempt's worker streams to the client until they end:
  // StartRelay starts them on the relay (any thread); AwaitRelay (the Run
  // thread) waits for the outcome OnCompletion decides.
  void StartRelay(Attempt* a, const ced::internal::PrefillRequest* prefill);
  grpc::Status AwaitRelay(Attempt* a);
  // After the attempt's final chunk: the final message, or the error it carried.
  grpc::Status Conclude(Attempt* a);
  grpc::Status CheckChunk(const ced::internal::TokenChunk& chunk) const;
  // A step's logprobs as the request asked for them, for `token`.
  grpc::Status CheckLogprobs(const ced::internal::StepLogprobs& l, int32_t token) const;
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
      case Op::Kind::kGrace:
        break;
    }
    return Got::kNothing;
  }
  template <typename Message>
  static void NextRead(AsyncStream<Message>* stream) {
    stream->reader->Read(&stream->message, &stream->read);
  }
  // The relay's work on a completed operation of the attempt it follows
  // (`current`) or of an abandoned one (its messages are dropped): returns
  // the attempt's outcome once it has one.
  // Where the attempt the relay follows stands.
  struct RelayState {
    std::string decode_prefix, prefill_prefix;  // for error messages
    bool decode_ended = false;
    bool prefill_ended = false;
    bool have_final = false;
    bool prefill_given_up = false;
    absl::Time decode_ended_at;
  };
  std::optional<grpc::Status> Step(const Op& op, bool ok, Attempt* current, RelayState* st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(relay_mu_);
  // The followed attempt's decode chunk, or its decode stream's end: an
  // error that ends the attempt, if any.
  std::optional<grpc::Status> DecodeChunk(Attempt* a, RelayState* st,
                                          ced::internal::TokenChunk* chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(relay_mu_);
  std::optional<grpc::Status> DecodeEnd(Attempt* a, RelayState* st, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(relay_mu_);
  // After an event of the followed attempt: emits what is ready and returns
  // the attempt's outcome once it has one (`end`: an error the event caused).
  std::optional<grpc::Status> Progress(Attempt* a, RelayState* st,
                                       std::optional<grpc::Status> end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(relay_mu_);
  // Hands an outcome to the Run thread waiting in Relay.
  void SetOutcome(Attempt* a, grpc::Status outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(relay_mu_);
  void OnMuxEvent(Attempt* a, ced::internal::TokenChunk* chunk, const grpc::Status* end);
  bool Cancelled() const;
  // Waits until every stream and timer of every attempt finished (their
  // calls were cancelled, or ended).
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

  // The Run thread's, or the relay's while it follows an attempt.
  TokenAssembler assembler_;
  absl::Time first_token_at_ = absl::InfinitePast();
  absl::Time last_token_at_ = absl::InfinitePast();
  int migrations_ = 0;
  int prefill_retries_ = 0;
  // The final message's usage (for the access log); empty before it.
  ced::v1::GenerateResponse final_summary_;
  // Writes the request's line to the access log (GatewaySettings::access_log).
  void LogAccess(const std::string& outcome, const grpc::Status& status) const;
  std::vector<std::string> migrated_from_;  // decode workers that died under the request
  // Of them, those that did not answer, until a new process under the id does.
  std::set<std::string> unreachable_decode_;
  absl::Time migration_wait_from_ = absl::InfinitePast();  // the first wait began
  absl::Time migration_wait_until_ = absl::InfinitePast();
  int migration_tries_ = 0;                 // routings after a wait
  std::vector<std::string> retried_from_;   // prefill workers that died before its first token
  int reserve_retries_ = 0;
  std::vector<std::string> refused_by_;  // decode workers that refused its Reserve for room
  std::string last_refusal_;             // the last one's message
  int kv_waits_ = 0;                     // placements again after waiting for K/V room
  int kv_polls_ = 0;                     // of them in a row after a poll, not a release
  // Its place in the gateway's KvWaitQueue (0: not waiting); left once a
  // Reserve succeeds (on whichever thread made it) or the call ends.
  std::atomic<uint64_t> kv_ticket_{0};
  void LeaveKvQueue();
  // Joins the KvWaitQueue (once) and waits for this call's turn: true when
  // it is to be placed now (counted in kv_waits_ and the metric); false once the wait is over (with
  // *status saying how long it waited) or the call was cancelled.
  bool AwaitKvTurn(grpc::Status* status);

  // The relay's side. While relay_attempt_ is set, the relay threads own the
  // call's output (assembler_, the sink, the attempt's flags); the Run thread
  // waits for relay_result_.
  absl::Mutex relay_mu_;
  Attempt* relay_attempt_ ABSL_GUARDED_BY(relay_mu_) = nullptr;
  std::unique_ptr<RelayState> relay_state_ ABSL_GUARDED_BY(relay_mu_);
  std::optional<grpc::Status> relay_result_ ABSL_GUARDED_BY(relay_mu_);
  int open_ops_ ABSL_GUARDED_BY(relay_mu_) = 0;  // streams and timers not yet finished

  // Guards each attempt's placed and placement (not annotated: they are the attempt's).
  absl::Mutex place_mu_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Appended by the Run thread under mu_ (it reads them without); never shrinks.
  std::vector<std::unique_ptr<Attempt>> attempts_;
};

// An access-log record of a request that ended with `status` at once
// (`outcome`: its ced_gateway_requests_total label); the caller adds what it
// knows of the request.
AccessRecord RefusedRecord(Api api, absl::Time received, const std::string& outcome,
                           const grpc::Status& status);
// The same with what `request` says of itself: client, ids, prompt tokens.
AccessRecord RequestRecord(Api api, absl::Time received, const std::string& outcome,
                           const grpc::Status& status, const ValidatedRequest& request);

// The shared entry of both front ends: validates nothing (the caller did),
// admits `request` (RESOURCE_EXHAUSTED when over the bounds), gives it a
// request id (ALREADY_EXISTS when its own is in flight), and launches its
// call, whose output goes to `sink`. On error nothing was launched and the
// outcome is already counted in the metrics and logged. *call (optional) receives the
// call, for Cancel().
grpc::Status StartGenerate(GatewayCore* core, Api api, ValidatedRequest request,
                           std::shared_ptr<GenerateSink> sink,
                           std::chrono::system_clock::time_point client_deadline,
                           absl::Time received, std::shared_ptr<GenerateCall>* call);

}  // namespace ced::gateway
