// Test doubles of the prefill and decode worker gRPC services: they stream
// predetermined messages and record what the gateway asked of them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"

namespace ced::gateway::testing {

// Thread-safe.
class FakeDecodeWorker final : public ced::internal::DecodeWorker::Service {
 public:
  struct Script {
    grpc::Status reserve_status;
    std::vector<ced::internal::TokenChunk> chunks;  // streamed in order
    bool hold_open = false;  // after the chunks, keep the stream open until cancelled
    absl::Duration reserve_delay = absl::ZeroDuration();  // Reserve answers after this long
  };
  void SetScript(Script script);

  grpc::Status Reserve(grpc::ServerContext* context, const ced::internal::ReserveRequest* request,
                       ced::internal::ReserveResponse* response) override;
  grpc::Status Stream(grpc::ServerContext* context, const ced::internal::StreamRequest* request,
                      grpc::ServerWriter<ced::internal::TokenChunk>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context, const ced::internal::CancelRequest* request,
                      ced::internal::CancelResponse* response) override;

  std::vector<ced::internal::ReserveRequest> reserves() const;
  std::vector<std::string> cancels() const;
  // The deadline the last Stream call carried (time_point::max() for none).
  std::chrono::system_clock::time_point last_stream_deadline() const;
  // Wait up to `timeout`; false when it did not happen.
  bool WaitForCancel(const std::string& request_id, absl::Duration timeout) const;
  bool WaitForStreams(int count, absl::Duration timeout) const;
  bool WaitForCancelledStreams(int count, absl::Duration timeout) const;
  // Waits until `count` Reserve calls arrived.
  bool WaitForReserves(int count, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  std::vector<ced::internal::ReserveRequest> reserves_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancels_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::system_clock::time_point last_deadline_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe.
class FakePrefillWorker final : public ced::internal::PrefillWorker::Service {
 public:
  struct Script {
    std::optional<int32_t> first_token;  // sent first when set
    bool send_done = true;
    bool replayed = true;
    bool hold_open = false;  // before anything, wait until cancelled
    grpc::Status status;     // the call's final status
  };
  void SetScript(Script script);

  grpc::Status Prefill(grpc::ServerContext* context, const ced::internal::PrefillRequest* request,
                       grpc::ServerWriter<ced::internal::PrefillResponse>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context, const ced::internal::CancelRequest* request,
                      ced::internal::CancelResponse* response) override;

  std::vector<ced::internal::PrefillRequest> prefills() const;
  bool WaitForCancel(const std::string& request_id, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  std::vector<ced::internal::PrefillRequest> prefills_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancels_ ABSL_GUARDED_BY(mu_);
};

// A chunk of `text`'s bytes as token ids starting at `start_step`.
ced::internal::TokenChunk Chunk(
    int start_step, const std::string& text,
    ced::internal::FinishReason finish = ced::internal::FINISH_REASON_UNSPECIFIED);

}  // namespace ced::gateway::testing
