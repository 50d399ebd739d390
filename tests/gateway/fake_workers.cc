#include "tests/gateway/fake_workers.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace ced::gateway::testing {
namespace {

bool Contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Blocks until the server call is cancelled (client cancel, deadline, or
// the gateway's TryCancel).
void WaitUntilCancelled(grpc::ServerContext* context) {
  while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
}

}  // namespace

ced::internal::TokenChunk Chunk(int start_step, const std::string& text,
                                ced::internal::FinishReason finish) {
  ced::internal::TokenChunk chunk;
  chunk.set_start_step(start_step);
  for (unsigned char c : text) chunk.add_token_ids(c);
  chunk.set_finish_reason(finish);
  if (finish != ced::internal::FINISH_REASON_UNSPECIFIED) {
    chunk.set_completion_tokens(start_step + static_cast<int>(text.size()));
    chunk.mutable_timings()->set_decode_ms(4);
    chunk.mutable_timings()->set_transfer_ms(0.5);
  }
  return chunk;
}

void FakeDecodeWorker::SetScript(Script script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

grpc::Status FakeDecodeWorker::Reserve(grpc::ServerContext*,
                                       const ced::internal::ReserveRequest* request,
                                       ced::internal::ReserveResponse* response) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    reserves_.push_back(*request);
    delay = script_.reserve_delay;
  }
  absl::SleepFor(delay);
  absl::MutexLock lock(&mu_);
  if (!script_.reserve_status.ok()) return script_.reserve_status;
  response->set_transfer_token(42);
  response->set_kv_address("inproc://d0");
  response->set_block_size(16);
  response->set_num_blocks(4);
  response->set_kv_format("bf16");
  return grpc::Status::OK;
}

grpc::Status FakeDecodeWorker::Stream(grpc::ServerContext* context,
                                      const ced::internal::StreamRequest*,
                                      grpc::ServerWriter<ced::internal::TokenChunk>* writer) {
  Script script;
  {
    absl::MutexLock lock(&mu_);
    ++streams_;
    last_deadline_ = context->deadline();
    script = script_;
  }
  for (const ced::internal::TokenChunk& chunk : script.chunks) {
    if (!writer->Write(chunk)) break;
  }
  if (!script.hold_open) return grpc::Status::OK;
  WaitUntilCancelled(context);
  absl::MutexLock lock(&mu_);
  ++cancelled_streams_;
  return grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
}

grpc::Status FakeDecodeWorker::Cancel(grpc::ServerContext*,
                                      const ced::internal::CancelRequest* request,
                                      ced::internal::CancelResponse* response) {
  absl::MutexLock lock(&mu_);
  cancels_.push_back(request->request_id());
  response->set_found(true);
  return grpc::Status::OK;
}

std::vector<ced::internal::ReserveRequest> FakeDecodeWorker::reserves() const {
  absl::MutexLock lock(&mu_);
  return reserves_;
}

std::vector<std::string> FakeDecodeWorker::cancels() const {
  absl::MutexLock lock(&mu_);
  return cancels_;
}

std::chrono::system_clock::time_point FakeDecodeWorker::last_stream_deadline() const {
  absl::MutexLock lock(&mu_);
  return last_deadline_;
}

bool FakeDecodeWorker::WaitForCancel(const std::string& request_id, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return Contains(cancels_, request_id); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeDecodeWorker::WaitForStreams(int count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return streams_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeDecodeWorker::WaitForCancelledStreams(int count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return cancelled_streams_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeDecodeWorker::WaitForReserves(int count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(reserves_.size()) >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

void FakePrefillWorker::SetScript(Script script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

grpc::Status FakePrefillWorker::Prefill(
    grpc::ServerContext* context, const ced::internal::PrefillRequest* request,
    grpc::ServerWriter<ced::internal::PrefillResponse>* writer) {
  Script script;
  {
    absl::MutexLock lock(&mu_);
    prefills_.push_back(*request);
    script = script_;
  }
  if (script.hold_open) {
    WaitUntilCancelled(context);
    return grpc::Status(grpc::StatusCode::CANCELLED, "prefill cancelled");
  }
  ced::internal::PrefillResponse response;
  if (script.first_token.has_value()) {
    response.mutable_first_token()->set_token_id(*script.first_token);
    response.mutable_first_token()->set_ttft_ms(2);
    writer->Write(response);
  }
  if (script.send_done) {
    response.Clear();
    ced::internal::PrefillDone* done = response.mutable_done();
    done->set_prompt_tokens(request->token_ids_size());
    done->set_replayed(script.replayed);
    done->mutable_timings()->set_queue_ms(1);
    done->mutable_timings()->set_prefill_ms(2);
    done->mutable_timings()->set_transfer_ms(3);
    writer->Write(response);
  }
  return script.status;
}

grpc::Status FakePrefillWorker::Cancel(grpc::ServerContext*,
                                       const ced::internal::CancelRequest* request,
                                       ced::internal::CancelResponse* response) {
  absl::MutexLock lock(&mu_);
  cancels_.push_back(request->request_id());
  response->set_found(true);
  return grpc::Status::OK;
}

std::vector<ced::internal::PrefillRequest> FakePrefillWorker::prefills() const {
  absl::MutexLock lock(&mu_);
  return prefills_;
}

bool FakePrefillWorker::WaitForCancel(const std::string& request_id, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return Contains(cancels_, request_id); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace ced::gateway::testing
