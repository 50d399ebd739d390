// One Generate request at the gateway: route, reserve on the decode worker,
// start the prefill, relay tokens in order, and clean up on every exit.
//
// Threads: Run() executes on a thread of its own (synchronous stubs); two
// reader threads follow the decode and prefill streams and hand their events
// to it. Cancel() may be called from any thread (the reactor's OnCancel).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/v1/gateway.pb.h"
#include "services/common/stream_writer.h"
#include "services/gateway/gateway_core.h"
#include "services/gateway/request_validation.h"
#include "services/gateway/token_assembler.h"

namespace ced::gateway {

class GenerateCall final {
 public:
  using Writer = services::StreamWriter<grpc::ByteBuffer>;

  // `core` must outlive the call (GatewayCore::WaitForCalls). The request
  // must already hold its request id and be admitted (GatewayCore::TryAdmit).
  GenerateCall(GatewayCore* core, ValidatedRequest request, std::shared_ptr<Writer::Handle> out,
               std::chrono::system_clock::time_point client_deadline, absl::Time received);
  ~GenerateCall();

  // Runs the call on a new detached thread that owns `call`. The admission
  // slot is released just before the client gets the final status;
  // GatewayCore::CallEnded is signalled once the thread no longer uses the call.
  static void Launch(std::shared_ptr<GenerateCall> call);

  // Client cancellation or deadline: stops the work on both workers.
  void Cancel();

 private:
  struct Event {
    enum class Kind { kFirstToken, kPrefillDone, kPrefillEnd, kChunk, kDecodeEnd };
    Kind kind;
    ced::internal::PrefillResponse prefill;
    ced::internal::TokenChunk chunk;
    grpc::Status status;
  };
  void Run();
  grpc::Status Execute();
  grpc::Status Relay();
  grpc::Status CheckChunk(const ced::internal::TokenChunk& chunk) const;
  void Emit(const TokenAssembler::Output& output);
  void SendFinal(const std::string& text, ced::internal::FinishReason reason,
                 const std::string& detail);
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ || !events_.empty(); }
  void ReadDecode();
  void ReadPrefill(ced::internal::PrefillRequest request);
  void Push(Event event);
  void TryCancelAll();
  void SendWorkerCancels();
  grpc::Status CancelStatus() const;
  std::chrono::system_clock::time_point Bounded(absl::Duration limit) const;

  GatewayCore* const core_;
  const ValidatedRequest request_;
  const std::shared_ptr<Writer::Handle> out_;
  const std::chrono::system_clock::time_point client_deadline_;
  const absl::Time received_;

  // Filled as the call proceeds (by the Run thread only).
  ced::internal::RouteResponse route_;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> decode_stub_;
  std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill_stub_;
  std::thread decode_thread_, prefill_thread_;
  bool reserved_ = false;
  bool prefill_started_ = false;
  bool decode_complete_ = false;   // final chunk and OK status received
  bool reserve_refused_ = false;   // Reserve: ALREADY_EXISTS (another request's id there)
  bool prefill_complete_ = false;  // OK status received
  absl::Time prefill_start_;       // Prefill called (or, locally, Reserve returned)
  ced::internal::TokenChunk final_chunk_;
  ced::internal::PrefillDone prefill_done_;
  TokenAssembler assembler_;
  absl::Time first_token_at_ = absl::InfinitePast();
  absl::Time last_token_at_ = absl::InfinitePast();

  // Contexts of every downstream call: members so that Cancel() may
  // TryCancel them at any time (before, during or after their call).
  grpc::ClientContext route_ctx_, reserve_ctx_, decode_ctx_, prefill_ctx_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ced::gateway
