// GenerateCall, second half: relaying the worker streams to the client.
#include <grpcpp/alarm.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "services/gateway/generate_call.h"
#include "services/gateway/request_parsing.h"

namespace ced::gateway {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

grpc::Status Internal(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INTERNAL, message);
}

}  // namespace

grpc::Status GenerateCall::CheckChunk(const ced::internal::TokenChunk& chunk) const {
  const int vocab = core_->settings().limits.vocab_size;
  if (chunk.start_step() < 0) {
    return Internal(absl::StrCat("start_step ", chunk.start_step(), " is negative"));
  }
  for (int32_t id : chunk.token_ids()) {
    if (id < 0 || id >= vocab) {
      return Internal(absl::StrCat("token id ", id, " is outside [0, ", vocab, ")"));
    }
  }
  if (!ced::internal::FinishReason_IsValid(chunk.finish_reason())) {
    return Internal(absl::StrCat("unknown finish_reason ", chunk.finish_reason()));
  }
  if (request_.sampling.logprobs) {
    if (chunk.logprobs_size() != chunk.token_ids_size()) {
      return Internal(absl::StrCat(chunk.token_ids_size(), " tokens came with ",
                                   chunk.logprobs_size(), " logprobs"));
    }
    for (int i = 0; i < chunk.logprobs_size(); ++i) {
      grpc::Status s = CheckLogprobs(chunk.logprobs(i), chunk.token_ids(i));
      if (!s.ok()) return s;
    }
  }
  return grpc::Status::OK;
}

grpc::Status GenerateCall::CheckLogprobs(const ced::internal::StepLogprobs& l,
                                         int32_t token) const {
  const int vocab = core_->settings().limits.vocab_size;
  auto bad = [](float x) { return !(x <= 0.0f && x >= kMinLogprob); };
  if (l.token().token_id() != token || bad(l.token().logprob())) {
    return Internal(absl::StrCat("logprob of token ", token, ": token ", l.token().token_id(),
                                 ", logprob ", l.token().logprob()));
  }
  if (l.top_size() != request_.sampling.top_logprobs &&
      !(l.top_size() < request_.sampling.top_logprobs && l.top_size() == vocab)) {
    return Internal(
        absl::StrCat(l.top_size(), " top logprobs, asked for ", request_.sampling.top_logprobs));
  }
  for (const auto& t : l.top()) {
    if (t.token_id() < 0 || t.token_id() >= vocab || bad(t.logprob())) {
      return Internal(
          absl::StrCat("top logprob of token ", t.token_id(), ": ", t.logprob(), " is invalid"));
    }
  }
  return grpc::Status::OK;
}

template <typename Message>
void GenerateCall::StartStream(Attempt* a, bool decode, AsyncStream<Message>* stream,
                               std::unique_ptr<grpc::ClientAsyncReader<Message>> reader) {
  stream->reader = std::move(reader);
  stream->start = Op{{this}, stream, Op::Kind::kStart, decode, a};
  stream->read = Op{{this}, stream, Op::Kind::kRead, decode, a};
  stream->finish = Op{{this}, stream, Op::Kind::kFinish, decode, a};
  stream->open = true;
  stream->reader->StartCall(&stream->start);
}

void GenerateCall::StartRelay(Attempt* a, const ced::internal::PrefillRequest* prefill) {
  grpc::CompletionQueue* cq = core_->relay().cq();
  const bool mux = a->mux_entry != nullptr;
  {
    absl::MutexLock lock(&relay_mu_);
    auto st = std::make_unique<RelayState>();
    st->decode_prefix = absl::StrCat("decode worker ", a->route.decode().worker_id(), ": ");
    st->prefill_prefix = absl::StrCat("prefill worker ", a->route.prefill().worker_id(), ": ");
    st->prefill_ended = prefill == nullptr;
    relay_state_ = std::move(st);
    relay_result_.reset();
    relay_attempt_ = a;
    a->grace = std::make_unique<grpc::Alarm>();
    if (!mux) {
      ced::internal::StreamRequest stream_request;
      stream_request.set_request_id(a->worker_request_id);
      StartStream(a, /*decode=*/true, &a->decode,
                  a->decode_stub->PrepareAsyncStream(&a->decode_ctx, stream_request, cq));
      ++open_ops_;
    }
    if (prefill != nullptr) {
      StartStream(a, /*decode=*/false, &a->prefill,
                  a->prefill_stub->PrepareAsyncPrefill(&a->prefill_ctx, *prefill, cq));
      ++open_ops_;
    }
    // A Cancel() that came before relay_attempt_ was set found nothing to
    // wake; with no call of its own to cancel, the multiplexed attempt ends here.
    if (mux && Cancelled()) SetOutcome(a, CancelStatus());
  }
  // Chunks that came on the multiplexed stream since the Reserve, then the
  // later ones (on its reader thread). Not under relay_mu_: each delivery
  // takes it.
  if (mux) a->mux->Attach(a->mux_entry.get(), this, a);
}

grpc::Status GenerateCall::AwaitRelay(Attempt* a) {
  const bool mux = a->mux_entry != nullptr;
  absl::MutexLock lock(&relay_mu_);
  // The relay threads take it from here until the attempt has an outcome.
  // A per-request stream ends at the client's deadline (its context's); the
  // multiplexed one does not, so the wait does.
  const auto done = absl::Condition(
      +[](std::optional<grpc::Status>* r) { return r->has_value(); }, &relay_result_);
  if (mux) {
    if (!relay_mu_.AwaitWithDeadline(done, absl::FromChrono(client_deadline_))) {
      relay_result_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
    }
  } else {
    relay_mu_.Await(done);
  }
  grpc::Status result = *std::move(relay_result_);
  relay_result_.reset();
  relay_attempt_ = nullptr;
  relay_state_.reset();
  return result;
}

void GenerateCall::OnCompletion(void* tag, bool ok) {
  const Op& op = *static_cast<const Op*>(tag);
  absl::MutexLock lock(&relay_mu_);
  Attempt* current = relay_result_.has_value() ? nullptr : relay_attempt_;
  std::optional<grpc::Status> outcome = Step(op, ok, current, relay_state_.get());
  if (current == nullptr || !outcome.has_value()) return;
  SetOutcome(current, *std::move(outcome));
}

std::optional<grpc::Status> GenerateCall::Step(const Op& op, bool ok, Attempt* a, RelayState* st) {
  const GatewaySettings& settings = core_->settings();
  const bool mine = a != nullptr && op.attempt == a;  // else the rest of an abandoned attempt
  if (op.kind == Op::Kind::kGrace) {
    op.attempt->grace_pending = false;
    --open_ops_;
    // The tokens are complete and the prefill's summary did not follow in
    // time: stop waiting for it.
    if (mine && ok && !st->prefill_ended) {
      st->prefill_given_up = true;
      a->prefill_ctx.TryCancel();
    }
    return std::nullopt;
  }
  std::optional<grpc::Status> end;
  if (op.decode) {
    auto* stream = static_cast<AsyncStream<ced::internal::TokenChunk>*>(op.stream);
    const Got got = Advance(stream, op.kind, ok);
    if (got == Got::kEnd) --open_ops_;
    if (got == Got::kMessage) {
      if (mine) end = DecodeChunk(a, st, &stream->message);
      stream->message.Clear();
      NextRead(stream);
    } else if (got == Got::kEnd && mine) {
      end = DecodeEnd(a, st, stream->status);
    }
  } else {
    auto* stream = static_cast<AsyncStream<ced::internal::PrefillResponse>*>(op.stream);
    const Got got = Advance(stream, op.kind, ok);
    if (got == Got::kEnd) --open_ops_;
    if (got == Got::kMessage) {
      const ced::internal::PrefillResponse& response = stream->message;
      if (mine && response.has_first_token()) {
        const int32_t id = response.first_token().token_id();
        grpc::Status valid = request_.sampling.logprobs
                                 ? CheckLogprobs(response.first_token().logprobs(), id)
                                 : grpc::Status::OK;
        if (id < 0 || id >= settings.limits.vocab_size) {
          end = Internal(absl::StrCat(st->prefill_prefix, "first token id ", id, " is outside [0, ",
                                      settings.limits.vocab_size, ")"));
        } else if (!valid.ok()) {
          end = Internal(st->prefill_prefix + valid.error_message());
        } else if (request_.sampling.logprobs) {
          google::protobuf::RepeatedPtrField<ced::internal::StepLogprobs> one;
          *one.Add() = response.first_token().logprobs();
          assembler_.Add(a->base_step, {id}, &one);
        } else {
          assembler_.Add(a->base_step, {id});
        }
      } else if (mine && response.has_done()) {
        a->prefill_done = response.done();
      }
      stream->message.Clear();
      NextRead(stream);
    } else if (got == Got::kEnd && mine) {
      st->prefill_ended = true;
      const grpc::Status& status = stream->status;
      if (status.ok()) {
        a->prefill_complete = true;
      } else if (!st->prefill_given_up) {
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) a->worker_unavailable = true;
        end = grpc::Status(status.error_code(), st->prefill_prefix + status.error_message());
      }
    }
  }
  if (!mine) return std::nullopt;
  return Progress(a, st, std::move(end));
}

std::optional<grpc::Status> GenerateCall::DecodeChunk(Attempt* a, RelayState* st,
                                                      ced::internal::TokenChunk* chunk) {
  if (st->have_final) return std::nullopt;  // nothing may follow the final chunk
  grpc::Status valid = CheckChunk(*chunk);
  if (!valid.ok()) return Internal(st->decode_prefix + valid.error_message());
  a->decode_tokens += chunk->token_ids_size();
  // The worker counts steps from the attempt's start.
  assembler_.Add(a->base_step + chunk->start_step(),
                 {chunk->token_ids().data(), static_cast<size_t>(chunk->token_ids_size())},
                 &chunk->logprobs());
  if (chunk->finish_reason() != ced::internal::FINISH_REASON_UNSPECIFIED) {
    st->have_final = true;
    a->final_chunk = std::move(*chunk);
  }
  return std::nullopt;
}

std::optional<grpc::Status> GenerateCall::DecodeEnd(Attempt* a, RelayState* st,
                                                    const grpc::Status& status) {
  st->decode_ended = true;
  st->decode_ended_at = absl::Now();
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) a->worker_unavailable = true;
    return grpc::Status(status.error_code(), st->decode_prefix + status.error_message());
  }
  if (!st->have_final) return Internal(st->decode_prefix + "token stream ended without a final chunk");
  a->decode_complete = true;
  return std::nullopt;
}

void GenerateCall::SetOutcome(Attempt* a, grpc::Status outcome) {
  relay_result_ = std::move(outcome);
  // Its prefill summary is no longer awaited.
  if (a->grace_pending) a->grace->Cancel();
}

void GenerateCall::OnMuxChunk(void* key, ced::internal::TokenChunk* chunk) {
  OnMuxEvent(static_cast<Attempt*>(key), chunk, nullptr);
}

void GenerateCall::OnMuxEnd(void* key, const grpc::Status& status) {
  OnMuxEvent(static_cast<Attempt*>(key), nullptr, &status);
}

void GenerateCall::OnMuxEvent(Attempt* a, ced::internal::TokenChunk* chunk,
                              const grpc::Status* end) {
  absl::MutexLock lock(&relay_mu_);
  // An abandoned attempt's (or one whose outcome is decided): dropped.
  if (relay_result_.has_value() || relay_attempt_ != a) return;
  RelayState* st = relay_state_.get();
  std::optional<grpc::Status> error =
      chunk != nullptr ? DecodeChunk(a, st, chunk) : DecodeEnd(a, st, *end);
  std::optional<grpc::Status> outcome = Progress(a, st, std::move(error));
  if (outcome.has_value()) SetOutcome(a, *std::move(outcome));
}

std::optional<grpc::Status> GenerateCall::Progress(Attempt* a, RelayState* st,
                                                   std::optional<grpc::Status> end) {
  if (Cancelled()) return CancelStatus();
  if (end.has_value()) return end;
  Emit(assembler_.TakeReady());
  if (assembler_.stopped()) {
    SendFinal("", ced::internal::FINISH_REASON_STOP, assembler_.matched_stop());
    return grpc::Status::OK;
  }
  if (st->decode_ended && st->prefill_ended) return Conclude(a);
  if (st->decode_ended && !st->prefill_given_up && !a->grace_pending) {
    a->grace_op = Op{{this}, nullptr, Op::Kind::kGrace, false, a};
    a->grace_pending = true;
    ++open_ops_;
    a->grace->Set(core_->relay().cq(),
                  absl::ToChronoTime(st->decode_ended_at + core_->settings().prefill_grace),
                  &a->grace_op);
  }
  return std::nullopt;
}

grpc::Status GenerateCall::Conclude(Attempt* a) {
  const std::string decode_prefix =
      absl::StrCat("decode worker ", a->route.decode().worker_id(), ": ");
  switch (a->final_chunk.finish_reason()) {
    case ced::internal::FINISH_REASON_LENGTH:
    case ced::internal::FINISH_REASON_STOP:
      break;
    case ced::internal::FINISH_REASON_CANCELLED:
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          decode_prefix + "request cancelled " + a->final_chunk.finish_detail());
    default:
      return Internal(decode_prefix + a->final_chunk.finish_detail());
  }
  if (assembler_.has_gap() || assembler_.emitted() == 0) {
    return Internal(absl::StrCat("the token of step ", assembler_.emitted(),
                                 " never arrived (decode worker ", a->route.decode().worker_id(),
                                 ", prefill worker ", a->route.prefill().worker_id(), ")"));
  }
  const std::string tail = assembler_.Finish();
  if (assembler_.stopped()) {
    SendFinal(tail, ced::internal::FINISH_REASON_STOP, assembler_.matched_stop());
  } else {
    SendFinal(tail, a->final_chunk.finish_reason(), a->final_chunk.finish_detail());
  }
  return grpc::Status::OK;
}

void GenerateCall::Emit(const TokenAssembler::Output& output) {
  if (output.token_ids.empty() && output.text.empty()) return;
  const ApiMetrics& metrics = api_metrics_;
  const absl::Time now = absl::Now();
  const size_t n = output.token_ids.size();
  if (n > 0) {
    if (first_token_at_ == absl::InfinitePast()) {
      first_token_at_ = now;
      metrics.ttft_seconds->Observe(absl::ToDoubleSeconds(now - received_));
    } else {
      const double per_token = absl::ToDoubleSeconds(now - last_token_at_) / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) metrics.inter_token_latency_seconds->Observe(per_token);
    }
    last_token_at_ = now;
    metrics.generated_tokens->Increment(static_cast<double>(n));
  }
  ced::v1::GenerateResponse response;
  response.mutable_token_ids()->Add(output.token_ids.begin(), output.token_ids.end());
  for (const ced::internal::StepLogprobs& l : output.logprobs) {
    ced::v1::StepLogprobs* out = response.add_logprobs();
    out->mutable_token()->set_token_id(l.token().token_id());
    out->mutable_token()->set_logprob(l.token().logprob());
    for (const auto& t : l.top()) {
      ced::v1::TokenLogprob* top = out->add_top();
      top->set_token_id(t.token_id());
      top->set_logprob(t.logprob());
    }
  }
  response.set_text(output.text);
  response.set_request_id(request_.request_id);
  sink_->Push(std::move(response));
}

void GenerateCall::SendFinal(const std::string& text, ced::internal::FinishReason reason,
                             const std::string& detail) {
  const ModelConfig& model = core_->settings().model;
  const absl::Time now = absl::Now();
  ced::v1::GenerateResponse response;
  response.set_text(text);
  response.set_finish_reason(static_cast<ced::v1::FinishReason>(reason));
  response.set_finish_detail(detail);
  response.set_request_id(request_.request_id);

  ced::v1::Usage* usage = response.mutable_usage();
  usage->set_prompt_tokens(static_cast<int32_t>(request_.prompt_token_ids.size()));
  usage->set_completion_tokens(assembler_.emitted());
  const Attempt& a = *attempts_.back();
  const ced::internal::RouteResponse& route = a.route;
  const ced::internal::TokenChunk& final_chunk = a.final_chunk;
  const ced::internal::PrefillDone& prefill_done = a.prefill_done;
  const bool local = route.local_prefill();
  // Prompt tokens not computed for this request: the prefix cache of the
  // worker that ran the prefill held them.
  usage->set_cached_prompt_tokens(local ? final_chunk.cached_prompt_tokens()
                                        : prefill_done.cached_tokens());

  const ced::internal::Timings& worker = local ? final_chunk.timings() : prefill_done.timings();
  ced::v1::Timings* timings = response.mutable_timings();
  // Receipt to the first prefill start, waits for K/V room included (the
  // attempts refused before it never started one).
  for (const auto& attempt : attempts_) {
    if (!attempt->relay_started) continue;
    timings->set_queue_ms(Ms(attempt->prefill_start - received_) + worker.queue_ms());
    break;
  }
  timings->set_prefill_ms(worker.prefill_ms());
  timings->set_transfer_ms(
      std::max(prefill_done.timings().transfer_ms(), final_chunk.timings().transfer_ms()));
  if (first_token_at_ != absl::InfinitePast())
    timings->set_ttft_ms(Ms(first_token_at_ - received_));
  timings->set_total_ms(Ms(now - received_));

  ced::v1::Placement* placement = response.mutable_placement();
  if (!local) placement->set_prefill_worker_id(route.prefill().worker_id());
  placement->set_decode_worker_id(route.decode().worker_id());
  ced::internal::ReplayOn replay_on = route.replay_on();
  if (prefill_done.replayed()) {
    replay_on = ced::internal::REPLAY_ON_PREFILL;
  } else if (final_chunk.replayed_here()) {
    replay_on = ced::internal::REPLAY_ON_DECODE;
  }
  placement->set_replay_on(static_cast<ced::v1::ReplayOn>(replay_on));
  placement->set_replay_mode(static_cast<ced::v1::ReplayMode>(route.replay_mode()));
  int window = 0;
  if (!model.IsDecoderOnly()) {
    window = route.replay_mode() == ced::internal::REPLAY_MODE_EXACT ? model.ExactReplayWindow()
                                                                     : model.replay_window;
  }
  placement->set_replay_window(window);
  placement->set_local_prefill(local);
  placement->set_migrations(migrations_);
  for (const std::string& id : migrated_from_) placement->add_migrated_from_decode_worker_ids(id);
  for (const std::string& id : retried_from_) placement->add_retried_from_prefill_worker_ids(id);
  *final_summary_.mutable_usage() = response.usage();
  sink_->Push(std::move(response));
}

}  // namespace ced::gateway
