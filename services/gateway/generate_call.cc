#include "services/gateway/generate_call.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "services/common/worker_util.h"
#include "services/router_policy/errors.h"

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

// A worker that does not answer a Cancel (connection refused or lost, or
// silent until the deadline) is gone.
// The worker did not answer a Cancel normally: it is gone, or going (a
// server shutting down cancels the calls it still has).
bool Unreachable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

// The replay window of a request continued after `k` generated tokens: the
// replay starts where the original's did (s = max(0, N - R)), so the
// continuation's decoder state equals the one the original built token by
// token, in bounded mode too. 0 (derive from the mode) for a fresh request
// and for decoder-only models, which have no replay.
int ContinuationReplayWindow(const ModelConfig& model, ced::internal::ReplayMode mode,
                             int prompt_tokens, int k) {
  if (k == 0 || model.IsDecoderOnly()) return 0;
  const int r =
      mode == ced::internal::REPLAY_MODE_EXACT ? model.ExactReplayWindow() : model.replay_window;
  const int s = std::max(0, prompt_tokens - r);
  if (s == 0) return std::max({prompt_tokens + k, model.sliding_window, 1});
  return prompt_tokens + k - s;
}

}  // namespace

GenerateCall::GenerateCall(GatewayCore* core, Api api, ValidatedRequest request,
                           std::shared_ptr<GenerateSink> sink,
                           std::chrono::system_clock::time_point client_deadline,
                           absl::Time received)
    : core_(core),
      api_(api),
      api_metrics_(core->metrics().For(api)),
      request_(std::move(request)),
      sink_(std::move(sink)),
      client_deadline_(client_deadline),
      received_(received),
      assembler_(&core->tokenizer(), request_.stop, request_.max_tokens) {}

GenerateCall::~GenerateCall() = default;

AccessRecord RefusedRecord(Api api, absl::Time received, const std::string& outcome,
                           const grpc::Status& status) {
  AccessRecord r;
  r.received = received;
  r.api = ApiLabel(api);
  r.outcome = outcome;
  r.status = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  r.error = status.error_message();
  r.total_ms = absl::ToDoubleMilliseconds(absl::Now() - received);
  return r;
}

AccessRecord RequestRecord(Api api, absl::Time received, const std::string& outcome,
                           const grpc::Status& status, const ValidatedRequest& request) {
  AccessRecord r = RefusedRecord(api, received, outcome, status);
  r.client = request.client;
  r.request_id = request.request_id;
  r.session_id = request.session_id;
  r.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  if (request.sampling.temperature > 0) r.seed = request.sampling.seed;
  return r;
}

grpc::Status StartGenerate(GatewayCore* core, Api api, ValidatedRequest request,
                           std::shared_ptr<GenerateSink> sink,
                           std::chrono::system_clock::time_point client_deadline,
                           absl::Time received, std::shared_ptr<GenerateCall>* call) {
  const GatewayMetrics& metrics = core->metrics();
  auto refuse = [&](const char* outcome, grpc::Status status) {
    metrics.CountRequest(api, outcome);
    core->LogAccess(RequestRecord(api, received, outcome, status, request));
    return status;
  };
  const std::string refused = core->TryAdmit(AdmissionTokens(request));
  if (!refused.empty()) {
    return refuse("resource_exhausted",
                  grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, refused));
  }
  if (request.request_id.empty()) request.request_id = core->NewRequestId();
  if (!core->ClaimRequestId(request.request_id)) {
    core->Release(AdmissionTokens(request));
    return refuse(
        "already_exists",
        grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                     absl::StrCat("request_id: '", request.request_id,
                                  "' is already in flight on this gateway; use a new id per "
                                  "request")));
  }
  auto started = std::make_shared<GenerateCall>(core, api, std::move(request), std::move(sink),
                                                client_deadline, received);
  if (call != nullptr) *call = started;
  GenerateCall::Launch(std::move(started));
  return grpc::Status::OK;
}

void GenerateCall::Launch(std::shared_ptr<GenerateCall> call) {
  GatewayCore* core = call->core_;
  core->CallStarted();
  // Routing and the Reserve start here, without waiting for a call thread:
  // they overlap the hand-off (the thread waits for their outcome).
  // Behind requests already waiting for K/V room it waits its turn too
  // (first come first served), on its call thread; else it is routed now.
  if (core->settings().kv_wait <= absl::ZeroDuration() || core->kv_waiters().waiting() == 0) {
    call->BeginAttempt(Attempt::Cause::kNew, {});
  }
  core->call_threads().Run([call = std::move(call), core]() mutable {
    call->Run();
    call.reset();
    core->CallEnded();
  });
}

void GenerateCall::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    for (auto& a : attempts_) TryCancel(a.get());
  }
  // Waiting for K/V room: the wait ends now.
  if (const uint64_t ticket = kv_ticket_.load(); ticket != 0) {
    core_->kv_waiters().Notify(ticket);
  }
  // An attempt on the multiplexed stream has no call of its own to cancel:
  // its wait ends here (the Run thread then cancels it on the worker).
  absl::MutexLock lock(&relay_mu_);
  if (relay_attempt_ != nullptr && relay_attempt_->mux_entry != nullptr &&
      !relay_result_.has_value()) {
    SetOutcome(relay_attempt_, CancelStatus());
  }
}

void GenerateCall::TryCancel(Attempt* a) {
  // Not the Reserve: its answer must come back before the decode worker's Cancel is sent.
  for (grpc::ClientContext* ctx : {&a->route_ctx, &a->decode_ctx, &a->prefill_ctx}) {
    ctx->TryCancel();
  }
}

void GenerateCall::TryCancelAll() {
  absl::MutexLock lock(&mu_);
  for (auto& a : attempts_) TryCancel(a.get());
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
  api_metrics_.prompt_tokens->Increment(static_cast<double>(request_.prompt_token_ids.size()));
  grpc::Status status = Execute();
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
  }
  if (cancelled) status = CancelStatus();
  // Only this thread adds attempts: no lock needed to read them.
  for (auto& a : attempts_) {
    if (!(a->decode_complete && (a->prefill_complete || !a->prefill_started))) {
      (void)CleanUp(a.get());
    }
  }
  // No multiplexed-stream event reaches this call from here on.
  for (auto& a : attempts_) {
    if (a->mux_entry != nullptr) a->mux->Detach(a->mux_entry.get());
  }
  DrainStreams();
  LeaveKvQueue();
  // Its decode worker freed what the request held: the longest waiting
  // request tries again.
  if (absl::c_any_of(attempts_, [](const auto& a) { return a->reserved; })) {
    core_->kv_waiters().Released();
  }
  std::string outcome;
  if (status.ok()) {
    outcome = assembler_.stopped() ||
                      current()->final_chunk.finish_reason() == ced::internal::FINISH_REASON_STOP
                  ? "stop"
                  : "length";
    api_metrics_.e2e_latency_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - received_));
  } else {
    outcome = OutcomeLabel(status.error_code());
  }
  metrics.CountRequest(api_, outcome);
  LogAccess(outcome, status);
  // Free the slot and the id before the client learns the outcome: its next
  // request must be admitted.
  core_->Release(AdmissionTokens(request_));
  core_->ReleaseRequestId(request_.request_id);
  sink_->Close(status);
}

void GenerateCall::LogAccess(const std::string& outcome, const grpc::Status& status) const {
  AccessRecord r = RequestRecord(api_, received_, outcome, status, request_);
  r.completion_tokens = assembler_.emitted();
  if (first_token_at_ != absl::InfinitePast()) {
    r.ttft_ms = absl::ToDoubleMilliseconds(first_token_at_ - received_);
  }
  r.cached_prompt_tokens = final_summary_.usage().cached_prompt_tokens();
  const Attempt* a = attempts_.empty() ? nullptr : attempts_.back().get();
  if (a != nullptr && !a->route.decode().worker_id().empty()) {
    r.decode_worker = a->route.decode().worker_id();
    r.prefill_worker = a->route.local_prefill() ? "local" : a->route.prefill().worker_id();
  }
  r.migrations = migrations_;
  r.kv_waits = kv_waits_;
  core_->LogAccess(r);
}

GenerateCall::Gone GenerateCall::CleanUp(Attempt* a) {
  Gone gone;
  if (a->cleaned_up) return gone;
  a->cleaned_up = true;
  {
    absl::MutexLock lock(&mu_);
    TryCancel(a);
  }
  ced::internal::CancelRequest request;
  request.set_request_id(a->worker_request_id);
  ced::internal::CancelResponse response;
  const auto deadline = absl::ToChronoTime(absl::Now() + core_->settings().cancel_timeout);
  // A failed Reserve may have landed, unless the worker refused the id as taken.
  if (a->reserve_sent && !a->decode_complete && !a->reserve_refused) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    gone.decode = Unreachable(a->decode_stub->Cancel(&ctx, request, &response));
  }
  if (a->prefill_started && !a->prefill_complete) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    gone.prefill = Unreachable(a->prefill_stub->Cancel(&ctx, request, &response));
  }
  return gone;
}

grpc::Status GenerateCall::Execute() {
  const GatewayMetrics& metrics = core_->metrics();
  Attempt::Cause cause = Attempt::Cause::kNew;
  std::vector<std::string> exclude;
  // Launch began the first attempt on the thread that received the request,
  // unless requests were waiting for K/V room: then this one waits behind
  // them before its first placement.
  if (attempts_.empty()) {
    grpc::Status queued(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "no decode worker had K/V room for the request: it waited behind the "
                        "requests that came before it");
    if (!AwaitKvTurn(&queued)) return queued;
  }
  Attempt* begun = attempts_.empty() ? nullptr : attempts_.front().get();
  while (true) {
    Attempt* a = begun != nullptr ? begun : BeginAttempt(cause, exclude);
    begun = nullptr;
    grpc::Status status = FinishAttempt(a);
    // Still the same migration (counted once, below, when it ends).
    if (!status.ok() && PlanMigrationWait(&status, &exclude)) continue;
    const char* outcome = current()->reserved ? "ok" : "failed";
    if (cause == Attempt::Cause::kMigration) {
      metrics.migrations->WithLabelValues({outcome}).Increment();
    } else if (cause == Attempt::Cause::kPrefillRetry) {
      metrics.prefill_retries->WithLabelValues({outcome}).Increment();
    } else if (cause == Attempt::Cause::kReserveRetry) {
      metrics.reserve_retries->WithLabelValues({outcome}).Increment();
    }
    if (status.ok()) return status;
    if (PlanNext(&status, &cause, &exclude)) continue;
    if (!PlanKvWait(&status, &cause, &exclude)) return status;
  }
}

bool GenerateCall::PlanNext(grpc::Status* status, Attempt::Cause* cause,
                            std::vector<std::string>* exclude) {
  Attempt* a = current();
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
  }
  if (a->reserve_exhausted || (a->cause == Attempt::Cause::kReserveRetry && !a->reserve_sent)) {
    return PlanReserveRetry(status, cause, exclude);
  }
  if (!a->worker_unavailable) return false;
  const GatewaySettings& settings = core_->settings();
  // The Cancel of what is left of the attempt tells which worker is gone.
  Gone gone = CleanUp(a);
  const bool decode_unreachable = gone.decode;
  // A decode worker that refused the Reserve as unavailable takes no new
  // work (draining, or going): place the request elsewhere, even though it
  // still answers the Cancel.
  if (a->reserve_unavailable) gone.decode = true;
  const std::string decode_id = a->route.decode().worker_id();
  const std::string prefill_id = a->route.local_prefill() ? "" : a->route.prefill().worker_id();
  // Everything the client asked for already streamed: nothing to move.
  if (settings.migration_limit > 0 && (gone.decode || gone.prefill) && FinishedBeforeLoss(a)) {
    *status = Conclude(a);
    return false;
  }
  if (gone.decode) {
    if (migrations_ >= settings.migration_limit) {
      core_->metrics().migrations->WithLabelValues({"limit"}).Increment();
      if (settings.migration_limit > 0) {
        *status = grpc::Status(status->error_code(),
                               absl::StrCat(status->error_message(), " (the request already moved ",
                                            migrations_, " times: --migration-limit)"));
      }
      return false;
    }
    ++migrations_;
    migrated_from_.push_back(decode_id);
    if (decode_unreachable) unreachable_decode_.insert(decode_id);
    exclude->push_back(decode_id);
    if (gone.prefill && !prefill_id.empty()) exclude->push_back(prefill_id);
    *cause = Attempt::Cause::kMigration;
    std::fprintf(stderr,
                 "gateway: request %s: decode worker %s is gone after %d tokens; migrating (%d "
                 "of at most %d)\n",
                 request_.request_id.c_str(), decode_id.c_str(), assembler_.emitted(), migrations_,
                 settings.migration_limit);
    return true;
  }
  if (gone.prefill && a->decode_tokens == 0 && settings.migration_limit > 0 &&
      prefill_retries_ == 0) {
    ++prefill_retries_;
    retried_from_.push_back(prefill_id);
    exclude->push_back(prefill_id);
    *cause = Attempt::Cause::kPrefillRetry;
    std::fprintf(stderr, "gateway: request %s: prefill worker %s is gone; retrying the prefill\n",
                 request_.request_id.c_str(), prefill_id.c_str());
    return true;
  }
  return false;
}

bool GenerateCall::PlanReserveRetry(grpc::Status* status, Attempt::Cause* cause,
                                    std::vector<std::string>* exclude) {
  Attempt* a = current();
  const int limit = core_->settings().reserve_retries;
  // Off: the worker's refusal reaches the client as it is (it names the worker).
  if (limit == 0) return false;
  if (a->reserve_exhausted) {
    const std::string decode_id = a->route.decode().worker_id();
    refused_by_.push_back(decode_id);
    last_refusal_ = status->error_message();
    if (reserve_retries_ < limit) {
      ++reserve_retries_;
      exclude->push_back(decode_id);
      *cause = Attempt::Cause::kReserveRetry;
      std::fprintf(stderr,
                   "gateway: request %s: decode worker %s refused the reservation (%s); placing "
                   "it elsewhere (%d of at most %d)\n",
                   request_.request_id.c_str(), decode_id.c_str(), status->error_message().c_str(),
                   reserve_retries_, limit);
      return true;
    }
  }
  // Every decode worker tried refused, or routing it again failed (the router
  // has no other decode worker with room): no room for the request now.
  a->no_decode_room = true;
  *status = grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat(
          "no decode worker could take the request: ",
          refused_by_.size() == 1 ? "decode worker " : "decode workers ",
          absl::StrJoin(refused_by_, ", "), " refused the reservation (last: ", last_refusal_, ")",
          a->reserve_exhausted ? absl::StrCat("; --reserve-retries ", limit, " reached")
                               : absl::StrCat("; routing it again: ", status->error_message())));
  return false;
}

bool GenerateCall::PlanKvWait(grpc::Status* status, Attempt::Cause* cause,
                              std::vector<std::string>* exclude) {
  const absl::Duration wait = core_->settings().kv_wait;
  // Only the decode side's refusals wait: a full prefill queue or the
  // gateway's own bounds are admission control, refused at once.
  if (wait <= absl::ZeroDuration() || !current()->no_decode_room ||
      status->error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || assembler_.emitted() > 0) {
    LeaveKvQueue();
    return false;
  }
  if (!AwaitKvTurn(status)) return false;
  exclude->clear();
  refused_by_.clear();
  last_refusal_.clear();
  reserve_retries_ = 0;
  *cause = Attempt::Cause::kNew;
  return true;
}

bool GenerateCall::PlanMigrationWait(grpc::Status* status, std::vector<std::string>* exclude) {
  const absl::Duration wait = core_->settings().migration_wait;
  Attempt* a = current();
  if (wait <= absl::ZeroDuration() || migrations_ == 0 || !a->route_unavailable) return false;
  const absl::Time now = absl::Now();
  if (migration_wait_from_ == absl::InfinitePast()) {
    migration_wait_from_ = now;
    migration_wait_until_ = std::min(now + wait, absl::FromChrono(client_deadline_));
    std::fprintf(stderr,
                 "gateway: request %s: no worker to migrate to (%s); trying again every 250 ms "
                 "for up to %s (--migration-wait-ms)\n",
                 request_.request_id.c_str(), status->error_message().c_str(),
                 absl::FormatDuration(migration_wait_until_ - now).c_str());
  }
  if (now + absl::Milliseconds(250) >= migration_wait_until_) {
    *status = grpc::Status(status->error_code(),
                           absl::StrCat(status->error_message(), " (the request's decode worker ",
                                        migrated_from_.back(), " is gone; no worker took it in ",
                                        absl::ToInt64Milliseconds(now - migration_wait_from_),
                                        " ms, ", migration_tries_, " tries: --migration-wait-ms)"));
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    // Cancel() wakes the wait; the next attempt then ends with the cancel.
    mu_.AwaitWithTimeout(absl::Condition(&cancelled_), absl::Milliseconds(250));
    if (cancelled_) return true;
  }
  ++migration_tries_;
  // A gone decode worker is back when the router lists its id live and a
  // process answers at the address listed: a new one (restarted under the
  // same id by its supervisor, on the same address or another). Until then
  // the router may still list the dead one (its heartbeat timeout), which
  // does not answer.
  if (!unreachable_decode_.empty()) {
    ced::internal::ListWorkersResponse workers;
    grpc::ClientContext list_ctx;
    list_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    if (core_->router()->ListWorkers(&list_ctx, {}, &workers).ok()) {
      for (const ced::internal::WorkerStatus& w : workers.workers()) {
        const std::string& id = w.info().worker_id();
        if (!w.live() || unreachable_decode_.count(id) == 0) continue;
        ced::internal::CancelRequest request;
        request.set_request_id(a->worker_request_id);
        ced::internal::CancelResponse response;
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
        auto stub = ced::internal::DecodeWorker::NewStub(core_->Channel(w.info().grpc_address()));
        if (Unreachable(stub->Cancel(&ctx, request, &response))) continue;
        exclude->erase(std::remove(exclude->begin(), exclude->end(), id), exclude->end());
        unreachable_decode_.erase(id);
      }
    }
  }
  return true;
}

bool GenerateCall::AwaitKvTurn(grpc::Status* status) {
  // In line behind the requests that waited before it. At the head it is
  // placed again as soon as one of this gateway's requests ends, else 20 ms
  // after its last try, doubling to 500 ms while nothing ends (the decode
  // worker frees a request's blocks just after its last token, and reports
  // them to the router then; room freed by other gateways' requests).
  const absl::Duration poll = std::min(
      absl::Milliseconds(20) * (int64_t{1} << std::min(kv_polls_, 5)), absl::Milliseconds(500));
  const absl::Time until =
      std::min(received_ + core_->settings().kv_wait, absl::FromChrono(client_deadline_));
  uint64_t ticket = kv_ticket_.load();
  if (ticket == 0) {
    ticket = core_->kv_waiters().Join();
    kv_ticket_.store(ticket);
  }
  const KvWaitQueue::Wake wake = core_->kv_waiters().Wait(ticket, poll, until, [this] {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  });
  kv_polls_ = wake == KvWaitQueue::Wake::kPoll ? kv_polls_ + 1 : 0;
  if (wake == KvWaitQueue::Wake::kTry || wake == KvWaitQueue::Wake::kPoll) {
    ++kv_waits_;  // a placement after a wait
    core_->metrics().kv_waits->Increment();
    return true;
  }
  LeaveKvQueue();
  if (wake == KvWaitQueue::Wake::kDeadline) {
    *status =
        grpc::Status(status->error_code(),
                     absl::StrCat(status->error_message(), " (waited ",
                                  absl::ToInt64Milliseconds(absl::Now() - received_),
                                  " ms for K/V room, ", kv_waits_, " placements: --kv-wait-ms)"));
  }
  return false;
}

void GenerateCall::LeaveKvQueue() {
  const uint64_t ticket = kv_ticket_.exchange(0);
  if (ticket != 0) core_->kv_waiters().Leave(ticket);
}

bool GenerateCall::FinishedBeforeLoss(Attempt* a) {
  const int n = assembler_.emitted();
  if (n == 0 || assembler_.has_gap()) return false;
  ced::internal::FinishReason reason = ced::internal::FINISH_REASON_UNSPECIFIED;
  const int32_t last = assembler_.emitted_ids().back();
  const bool eos = !request_.ignore_eos && last == core_->tokenizer().eos_id();
  if (eos || absl::c_linear_search(request_.stop_token_ids, last)) {
    reason = ced::internal::FINISH_REASON_STOP;
  } else if (n >= request_.max_tokens) {
    reason = ced::internal::FINISH_REASON_LENGTH;
  } else {
    return false;
  }
  a->final_chunk.Clear();
  a->final_chunk.set_finish_reason(reason);
  a->decode_complete = true;
  return true;
}

GenerateCall::Attempt* GenerateCall::BeginAttempt(Attempt::Cause cause,
                                                  const std::vector<std::string>& exclude) {
  const GatewaySettings& settings = core_->settings();
  Attempt* a;
  bool cancelled;
  {
    auto attempt = std::make_unique<Attempt>();
    a = attempt.get();
    absl::MutexLock lock(&mu_);
    a->index = static_cast<int>(attempts_.size());
    attempts_.push_back(std::move(attempt));
    cancelled = cancelled_;
  }
  a->cause = cause;
  if (cancelled) {
    Placed(a, CancelStatus());
    return a;
  }
  // A continuation gets an id of its own: the old one may still be held (a
  // live decode worker cancelling it, a prefill worker finishing it).
  a->worker_request_id =
      a->index == 0 ? request_.request_id : absl::StrCat(request_.request_id, "~", a->index);
  // Continue after the tokens the client has: they join the prompt.
  const int k = assembler_.emitted();
  a->base_step = k;
  const std::vector<int32_t>& streamed = assembler_.emitted_ids();
  a->prompt = request_.prompt_token_ids;
  a->prompt.insert(a->prompt.end(), streamed.begin(), streamed.begin() + k);

  // 1. Placement.
  ced::internal::RouteRequest& route_request = a->route_request;
  route_request.set_request_id(a->worker_request_id);
  route_request.set_prompt_tokens(static_cast<int64_t>(a->prompt.size()));
  route_request.set_max_tokens(request_.max_tokens - k);
  route_request.set_replay_on(request_.replay_on != ced::internal::REPLAY_ON_UNSPECIFIED
                                  ? request_.replay_on
                                  : settings.default_replay_on);
  ced::internal::ReplayMode mode = request_.replay_mode != ced::internal::REPLAY_MODE_UNSPECIFIED
                                       ? request_.replay_mode
                                       : settings.default_replay_mode;
  // A continuation replays as the original did (the router's default may change).
  if (a->index > 0) mode = attempts_.front()->route.replay_mode();
  route_request.set_replay_mode(mode);
  for (const std::string& id : exclude) route_request.add_exclude_worker_ids(id);
  route_request.set_session_id(request_.session_id);
  core_->prefix_chain().Fill(a->prompt, &route_request);
  a->route_ctx.set_deadline(Bounded(settings.route_timeout));
  core_->RouteAsync(&a->route_ctx, &a->route_request, &a->route,
                    [this, a](grpc::Status status) { OnRouted(a, std::move(status)); });
  return a;
}

void GenerateCall::OnRouted(Attempt* a, grpc::Status status) {
  const GatewaySettings& settings = core_->settings();
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        std::chrono::system_clock::now() < client_deadline_) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("router at ", settings.router_address,
                                         " did not answer within ",
                                         absl::FormatDuration(settings.route_timeout)));
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
               status.error_message().find(router::kLargerThanEveryCache) != std::string::npos) {
      // Not a matter of load: the request as sent can never run here.
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("max_tokens: ", status.error_message(),
                                         "; lower max_tokens or shorten the prompt"));
    } else {
      // The router's only RESOURCE_EXHAUSTED: no decode worker has room now.
      a->no_decode_room = status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      status = WithPrefix(absl::StrCat("router at ", settings.router_address, ": "), status);
    }
    a->route_unavailable = status.error_code() == grpc::StatusCode::UNAVAILABLE;
    Placed(a, status);
    return;
  }
  core_->prefix_chain().Learn(a->route);
  const ced::internal::RouteResponse& route = a->route;
  if (route.decode().grpc_address().empty() ||
      (!route.local_prefill() && route.prefill().grpc_address().empty())) {
    Placed(a, grpc::Status(grpc::StatusCode::INTERNAL, "router: route without worker addresses"));
    return;
  }

  // 2. Reserve the sequence on the decode worker.
  const int k = a->base_step;
  a->decode_stub =
      ced::internal::DecodeWorker::NewStub(core_->Channel(route.decode().grpc_address()));
  ced::internal::ReserveRequest& reserve = a->reserve;
  reserve.set_request_id(a->worker_request_id);
  *reserve.mutable_prompt_token_ids() = {a->prompt.begin(), a->prompt.end()};
  SamplingParams sampling = request_.sampling;
  sampling.step_offset = static_cast<uint64_t>(k);
  services::ToProto(sampling, reserve.mutable_sampling());
  reserve.set_max_tokens(request_.max_tokens - k);
  for (int32_t id : request_.stop_token_ids) reserve.add_stop_token_ids(id);
  if (!request_.ignore_eos) reserve.add_stop_token_ids(core_->tokenizer().eos_id());
  reserve.set_ignore_eos(request_.ignore_eos);
  ced::internal::ReplayPlan* plan = reserve.mutable_replay();
  plan->set_replay_on(route.replay_on());
  plan->set_mode(route.replay_mode());
  plan->set_replay_window(ContinuationReplayWindow(
      settings.model, route.replay_mode(), static_cast<int>(request_.prompt_token_ids.size()), k));
  reserve.set_local_prefill(route.local_prefill());
  if (!route.local_prefill()) reserve.set_prefill_worker_id(route.prefill().worker_id());
  // The tokens come on the gateway's multiplexed stream to this worker when
  // it has one (registered before the Reserve: none is lost). One that is
  // not open yet is opened (and waited for) on the call's thread.
  if (settings.decode_mux) {
    bool must_open = false;
    a->mux = core_->muxes().GetOpen(route.decode().grpc_address(), &must_open);
    if (a->mux == nullptr && must_open) {
      a->reserve_on_run_thread = true;
      Placed(a, grpc::Status::OK);
      return;
    }
  }
  if (!ReadyToReserve(a)) {
    Placed(a, CancelStatus());
    return;
  }
  a->decode_stub->async()->Reserve(&a->reserve_ctx, &a->reserve, &a->reserved_response,
                                   [this, a](grpc::Status status) {
                                     // 3. Follow the token stream and start the prefill
                                     // (not for a request cancelled meanwhile).
                                     if (status.ok() && !Cancelled()) StartStreaming(a);
                                     Placed(a, status);
                                   });
}

void GenerateCall::Placed(Attempt* a, grpc::Status status) {
  absl::MutexLock lock(&place_mu_);
  a->placement = std::move(status);
  a->placed = true;
}

bool GenerateCall::ReadyToReserve(Attempt* a) {
  if (a->mux != nullptr) a->mux_entry = a->mux->Register(a->worker_request_id);
  if (a->mux_entry != nullptr) a->reserve.set_subscriber_id(a->mux->subscriber_id());
  if (Cancelled()) return false;
  a->reserve_ctx.set_deadline(Bounded(core_->settings().reserve_timeout));
  a->reserve_sent = true;
  return true;
}

grpc::Status GenerateCall::ReserveOnRunThread(Attempt* a) {
  const std::string& address = a->route.decode().grpc_address();
  a->mux = core_->muxes().Get(address, core_->Channel(address),
                              absl::StrCat("mux-", core_->NewRequestId()),
                              absl::FromChrono(Bounded(core_->settings().mux_open_timeout)));
  if (!ReadyToReserve(a)) return CancelStatus();
  return a->decode_stub->Reserve(&a->reserve_ctx, a->reserve, &a->reserved_response);
}

grpc::Status GenerateCall::FinishAttempt(Attempt* a) {
  grpc::Status status;
  {
    absl::MutexLock lock(&place_mu_);
    place_mu_.Await(absl::Condition(&a->placed));
    status = a->placement;
  }
  if (a->reserve_on_run_thread && status.ok()) status = ReserveOnRunThread(a);
  // Routing failed, or the call was cancelled before its Reserve.
  if (!a->reserve_sent) return status;
  const std::string& decode_id = a->route.decode().worker_id();
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION && a->mux_entry != nullptr) {
    // The multiplexed stream ended between its open and the Reserve: the
    // worker took nothing; reserve again with a stream of the request's own.
    a->mux->Detach(a->mux_entry.get());
    a->mux_entry.reset();
    a->reserve.clear_subscriber_id();
    grpc::ClientContext again;
    again.set_deadline(Bounded(core_->settings().reserve_timeout));
    status = a->decode_stub->Reserve(&again, a->reserve, &a->reserved_response);
  }
  // The id is another request's on that worker (another gateway's client
  // chose it too): nothing of ours landed there, and a Cancel would end theirs.
  if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) a->reserve_refused = true;
  // No room (K/V blocks, queue bounds): the worker took nothing of the request.
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    a->reserve_refused = true;
    a->reserve_exhausted = true;
    a->no_decode_room = true;
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    a->worker_unavailable = true;
    a->reserve_unavailable = true;
  }
  if (!status.ok()) return WithPrefix(absl::StrCat("decode worker ", decode_id, ": "), status);
  a->reserved = true;
  LeaveKvQueue();  // placed: the next waiting request may take what room is left
  if (!a->relay_started) {
    // Cancelled while the Reserve was on its way: the clean-up cancels it
    // on the decode worker; the prefill never starts.
    if (Cancelled()) return CancelStatus();
    StartStreaming(a);
  }
  return AwaitRelay(a);
}

void GenerateCall::StartStreaming(Attempt* a) {
  const ced::internal::RouteResponse& route = a->route;
  a->prefill_start = absl::Now();
  a->relay_started = true;
  a->decode_ctx.set_deadline(client_deadline_);
  if (route.local_prefill()) {
    StartRelay(a, nullptr);
    sink_->Started();
    return;
  }
  a->prefill_stub =
      ced::internal::PrefillWorker::NewStub(core_->Channel(route.prefill().grpc_address()));
  ced::internal::PrefillRequest& prefill = a->prefill_request;
  prefill.set_request_id(a->worker_request_id);
  *prefill.mutable_token_ids() = a->reserve.prompt_token_ids();
  prefill.set_decode_worker_id(route.decode().worker_id());
  prefill.set_decode_kv_address(route.decode().kv_address());
  prefill.set_transfer_token(a->reserved_response.transfer_token());
  *prefill.mutable_replay() = a->reserve.replay();
  *prefill.mutable_sampling() = a->reserve.sampling();
  prefill.set_skip_prefix_tokens(a->reserved_response.cached_prefix_tokens());
  prefill.set_kv_format(a->reserved_response.kv_format());
  a->prefill_ctx.set_deadline(client_deadline_);
  a->prefill_started = true;
  StartRelay(a, &prefill);
  sink_->Started();
}

bool GenerateCall::Cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void GenerateCall::DrainStreams() {
  bool open;
  {
    absl::MutexLock lock(&relay_mu_);
    open = open_ops_ > 0;
    // No attempt's prefill summary is awaited any more.
    for (auto& a : attempts_) {
      if (a->grace_pending) a->grace->Cancel();
    }
  }
  // The request is over: a stream still open has nobody to relay to.
  if (open) TryCancelAll();
  absl::MutexLock lock(&relay_mu_);
  relay_mu_.Await(absl::Condition(
      +[](int* ops) { return *ops == 0; }, &open_ops_));
}

}  // namespace ced::gateway
