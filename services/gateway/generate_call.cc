#include "services/gateway/generate_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "services/common/worker_util.h"

namespace ced::gateway {
namespace {

grpc::Status WithPrefix(const std::string& prefix, const grpc::Status& status) {
  return grpc::Status(status.error_code(), absl::StrCat(prefix, status.error_message()));
}

std::string OutcomeLabel(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "cancelled";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "invalid_argument";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline_exceeded";
    case grpc::StatusCode::NOT_FOUND:
      return "not_found";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "already_exists";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "failed_precondition";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "resource_exhausted";
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "unimplemented";
    default:
      return "error";
  }
}

}  // namespace

GenerateCall::GenerateCall(GatewayCore* core, ValidatedRequest request,
                           std::shared_ptr<Writer::Handle> out,
                           std::chrono::system_clock::time_point client_deadline,
                           absl::Time received)
    : core_(core),
      request_(std::move(request)),
      out_(std::move(out)),
      client_deadline_(client_deadline),
      received_(received),
      assembler_(&core->tokenizer(), request_.stop, request_.max_tokens) {}

GenerateCall::~GenerateCall() {
  if (decode_thread_.joinable()) decode_thread_.join();
  if (prefill_thread_.joinable()) prefill_thread_.join();
}

void GenerateCall::Launch(std::shared_ptr<GenerateCall> call) {
  GatewayCore* core = call->core_;
  core->CallStarted();
  std::thread([call = std::move(call), core]() mutable {
    call->Run();
    call.reset();
    core->CallEnded();
  }).detach();
}

void GenerateCall::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  TryCancelAll();
}

void GenerateCall::TryCancelAll() {
  // Not the Reserve: its answer must come back before the decode worker's Cancel is sent.
  for (grpc::ClientContext* ctx : {&route_ctx_, &decode_ctx_, &prefill_ctx_}) {
    ctx->TryCancel();
  }
}

grpc::Status GenerateCall::CancelStatus() const {
  // The client's own timer usually fires a little before ours: a cancel that
  // arrives within 50 ms of the deadline is the deadline.
  if (std::chrono::system_clock::now() + std::chrono::milliseconds(50) >= client_deadline_) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
}

std::chrono::system_clock::time_point GenerateCall::Bounded(absl::Duration limit) const {
  return std::min(client_deadline_, absl::ToChronoTime(absl::Now() + limit));
}

void GenerateCall::Run() {
  const GatewayMetrics& metrics = core_->metrics();
  metrics.prompt_tokens->Increment(static_cast<double>(request_.prompt_token_ids.size()));
  grpc::Status status = Execute();
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
  }
  if (cancelled) status = CancelStatus();
  if (!(decode_complete_ && (prefill_complete_ || !prefill_started_))) {
    TryCancelAll();
    SendWorkerCancels();
  }
  if (decode_thread_.joinable()) decode_thread_.join();
  if (prefill_thread_.joinable()) prefill_thread_.join();
  if (status.ok()) {
    metrics.CountRequest(assembler_.stopped() ||
                                 final_chunk_.finish_reason() == ced::internal::FINISH_REASON_STOP
                             ? "stop"
                             : "length");
    metrics.e2e_latency_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - received_));
  } else {
    metrics.CountRequest(OutcomeLabel(status.error_code()));
  }
  // Free the slot and the id before the client learns the outcome: its next
  // request must be admitted.
  core_->Release(AdmissionTokens(request_));
  core_->ReleaseRequestId(request_.request_id);
  out_->Close(status);
}

void GenerateCall::SendWorkerCancels() {
  ced::internal::CancelRequest request;
  request.set_request_id(request_.request_id);
  ced::internal::CancelResponse response;
  const auto deadline = absl::ToChronoTime(absl::Now() + core_->settings().cancel_timeout);
  // A failed Reserve may have landed, unless the worker refused the id as taken.
  if (decode_stub_ != nullptr && !decode_complete_ && !reserve_refused_) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    (void)decode_stub_->Cancel(&ctx, request, &response);
  }
  if (prefill_started_ && !prefill_complete_) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    (void)prefill_stub_->Cancel(&ctx, request, &response);
  }
}

grpc::Status GenerateCall::Execute() {
  const GatewaySettings& settings = core_->settings();
  // 1. Placement.
  ced::internal::RouteRequest route_request;
  route_request.set_request_id(request_.request_id);
  route_request.set_prompt_tokens(static_cast<int64_t>(request_.prompt_token_ids.size()));
  route_request.set_max_tokens(request_.max_tokens);
  route_request.set_replay_on(request_.replay_on != ced::internal::REPLAY_ON_UNSPECIFIED
                                  ? request_.replay_on
                                  : settings.default_replay_on);
  route_request.set_replay_mode(request_.replay_mode != ced::internal::REPLAY_MODE_UNSPECIFIED
                                    ? request_.replay_mode
                                    : settings.default_replay_mode);
  route_ctx_.set_deadline(Bounded(settings.route_timeout));
  grpc::Status status = core_->router()->Route(&route_ctx_, route_request, &route_);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        std::chrono::system_clock::now() < client_deadline_) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("router at ", settings.router_address, " did not answer within ",
                       absl::FormatDuration(settings.route_timeout)));
    }
    return WithPrefix(absl::StrCat("router at ", settings.router_address, ": "), status);
  }
  if (route_.decode().grpc_address().empty() ||
      (!route_.local_prefill() && route_.prefill().grpc_address().empty())) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "router: route without worker addresses");
  }

  // 2. Reserve the sequence on the decode worker.
  const std::string& decode_id = route_.decode().worker_id();
  decode_stub_ =
      ced::internal::DecodeWorker::NewStub(core_->Channel(route_.decode().grpc_address()));
  ced::internal::ReserveRequest reserve;
  reserve.set_request_id(request_.request_id);
  *reserve.mutable_prompt_token_ids() = {request_.prompt_token_ids.begin(),
                                         request_.prompt_token_ids.end()};
  services::ToProto(request_.sampling, reserve.mutable_sampling());
  reserve.set_max_tokens(request_.max_tokens);
  for (int32_t id : request_.stop_token_ids) reserve.add_stop_token_ids(id);
  if (!request_.ignore_eos) reserve.add_stop_token_ids(core_->tokenizer().eos_id());
  reserve.set_ignore_eos(request_.ignore_eos);
  ced::internal::ReplayPlan* plan = reserve.mutable_replay();
  plan->set_replay_on(route_.replay_on());
  plan->set_mode(route_.replay_mode());
  reserve.set_local_prefill(route_.local_prefill());
  if (!route_.local_prefill()) reserve.set_prefill_worker_id(route_.prefill().worker_id());
  ced::internal::ReserveResponse reserved;
  reserve_ctx_.set_deadline(Bounded(settings.reserve_timeout));
  status = decode_stub_->Reserve(&reserve_ctx_, reserve, &reserved);
  // The id is another request's on that worker (another gateway's client
  // chose it too): nothing of ours landed there, and a Cancel would end theirs.
  if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) reserve_refused_ = true;
  if (!status.ok()) return WithPrefix(absl::StrCat("decode worker ", decode_id, ": "), status);
  reserved_ = true;
  prefill_start_ = absl::Now();

  // 3. Follow the token stream, then start the prefill.
  decode_ctx_.set_deadline(client_deadline_);
  decode_thread_ = std::thread([this] { ReadDecode(); });
  if (!route_.local_prefill()) {
    prefill_stub_ =
        ced::internal::PrefillWorker::NewStub(core_->Channel(route_.prefill().grpc_address()));
    ced::internal::PrefillRequest prefill;
    prefill.set_request_id(request_.request_id);
    *prefill.mutable_token_ids() = reserve.prompt_token_ids();
    prefill.set_decode_worker_id(decode_id);
    prefill.set_decode_kv_address(route_.decode().kv_address());
    prefill.set_transfer_token(reserved.transfer_token());
    *prefill.mutable_replay() = reserve.replay();
    *prefill.mutable_sampling() = reserve.sampling();
    prefill.set_skip_prefix_tokens(reserved.cached_prefix_tokens());
    prefill.set_kv_format(reserved.kv_format());
    prefill_ctx_.set_deadline(client_deadline_);
    prefill_started_ = true;
    prefill_thread_ = std::thread(
        [this, prefill = std::move(prefill)]() mutable { ReadPrefill(std::move(prefill)); });
  }
  return Relay();
}

void GenerateCall::Push(Event event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

void GenerateCall::ReadDecode() {
  ced::internal::StreamRequest request;
  request.set_request_id(request_.request_id);
  auto reader = decode_stub_->Stream(&decode_ctx_, request);
  Event event{Event::Kind::kChunk, {}, {}, {}};
  while (reader->Read(&event.chunk)) {
    Push(event);
    event.chunk.Clear();
  }
  Push(Event{Event::Kind::kDecodeEnd, {}, {}, reader->Finish()});
}

void GenerateCall::ReadPrefill(ced::internal::PrefillRequest request) {
  auto reader = prefill_stub_->Prefill(&prefill_ctx_, request);
  ced::internal::PrefillResponse response;
  while (reader->Read(&response)) {
    if (response.has_first_token()) {
      Push(Event{Event::Kind::kFirstToken, response, {}, {}});
    } else if (response.has_done()) {
      Push(Event{Event::Kind::kPrefillDone, response, {}, {}});
    }
    response.Clear();
  }
  Push(Event{Event::Kind::kPrefillEnd, {}, {}, reader->Finish()});
}

}  // namespace ced::gateway
