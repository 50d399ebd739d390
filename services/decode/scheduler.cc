// The decode worker's scheduler: the only thread that runs the engine.
// Each iteration releases finished/cancelled sequences, starts requests whose
// K/V has landed (import + replay when deferred) or that prefill locally,
// then runs one batched decode step over every running sequence.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/decode/request.h"

namespace ced::services {

using ced::internal::FinishReason;
using ced::internal::TokenChunk;

namespace {
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

void DecodeWorker::Finish(Request* r, FinishReason reason, const std::string& detail,
                          const grpc::Status& status) {
  // mu_ held by the caller.
  if (r->finished) return;
  r->finished = true;
  const char* outcome =
      status.ok() ? "ok"
                  : (status.error_code() == grpc::StatusCode::CANCELLED ? "cancelled" : "error");
  m_->requests->WithLabels({{"outcome", outcome}}).Increment();
  if (status.ok()) {
    TokenChunk last;
    last.set_start_step(r->generated);
    last.set_finish_reason(reason);
    last.set_finish_detail(detail);
    last.set_prompt_tokens(static_cast<int>(r->prompt.size()));
    last.set_completion_tokens(r->generated);
    last.set_cached_prompt_tokens(r->cached_tokens);
    last.set_replayed_here(r->replayed_here);
    auto* t = last.mutable_timings();
    // The exposed (not overlapped) transfer time is measured by the prefill
    // worker; reservation-to-ready here would also count the prefill compute.
    t->set_prefill_ms(r->prefill_ms);
    t->set_replay_ms(r->replay_ms);
    if (r->t_first.time_since_epoch().count() != 0) t->set_decode_ms(Ms(r->t_first, Clock::now()));
    if (r->stream)
      r->stream->Push(std::move(last));
    else
      r->pending.push_back(std::move(last));
  }
  if (r->stream)
    r->stream->Close(status);
  else
    r->final_status = status;
}

void DecodeWorker::Emit(Request* r, int32_t token) {
  // mu_ held by the caller.
  const auto now = Clock::now();
  if (r->generated == 0) {
    r->t_first = now;
    m_->ttft_seconds->Observe(std::chrono::duration<double>(now - r->t_reserve).count());
  } else {
    m_->itl_seconds->Observe(std::chrono::duration<double>(now - r->t_last).count());
  }
  r->t_last = now;
  TokenChunk chunk;
  chunk.add_token_ids(token);
  chunk.set_start_step(r->generated);
  if (r->stream)
    r->stream->Push(std::move(chunk));
  else
    r->pending.push_back(std::move(chunk));
  r->generated += 1;
  r->last_token = token;
  m_->generated->Increment();
  const StopConditions& stop = r->stop;
  FinishReason reason = FinishReason::FINISH_REASON_UNSPECIFIED;
  switch (CheckStop(stop, token, r->generated)) {
    case ced::FinishReason::kLength:
      reason = ced::internal::FINISH_REASON_LENGTH;
      break;
    case ced::FinishReason::kStop:
      reason = ced::internal::FINISH_REASON_STOP;
      break;
    case ced::FinishReason::kNone:
      break;
  }
  if (reason != FinishReason::FINISH_REASON_UNSPECIFIED) Finish(r, reason, "", grpc::Status::OK);
}

// Runs with engine_mu_ held, mu_ NOT held (compute). Produces the first token.
void DecodeWorker::StartRequest(Request* r) {
  const ModelConfig& c = engine_->config();
  std::vector<float> logits;
  absl::Status status;
  int32_t first = -1;
  const auto t0 = Clock::now();
  if (r->local_prefill) {
    PrefillOptions po;
    po.replay = r->replay_mode;
    po.replay_window = r->replay_window;
    po.cancelled = [r, this] {
      std::lock_guard<std::mutex> lock(mu_);
      return r->cancelled;
    };
    auto pre = engine_->Prefill(r->seq, r->prompt, po);
    status = pre.status();
    if (pre.ok()) {
      logits = std::move(pre->logits);
      r->replayed_here = !c.IsDecoderOnly();
      if (r->replayed_here) m_->replays->WithLabels({{"placement", "decode"}}).Increment();
    }
    r->prefill_ms = Ms(t0, Clock::now());
  } else {
    std::vector<uint8_t> bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bytes.swap(r->tail_bytes);
    }
    auto tail = DecodeTail(bytes, c);
    status = tail.status();
    if (tail.ok()) status = engine_->ImportTail(r->seq, *tail);
    // All of the prompt's global K/V is here: its full blocks join the cache.
    if (status.ok()) status = engine_->SetPromptTokens(r->seq, r->prompt);
    if (status.ok() && !tail->desc.replay_done) {
      auto rl = engine_->Replay(r->seq);
      status = rl.status();
      if (rl.ok()) logits = std::move(*rl);
      r->replayed_here = true;
      r->replay_ms = Ms(t0, Clock::now());
      m_->replays->WithLabels({{"placement", "decode"}}).Increment();
    } else if (status.ok()) {
      first = tail->desc.first_token;
      if (!c.IsDecoderOnly()) m_->replays->WithLabels({{"placement", "prefill"}}).Increment();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok()) {
    Finish(r, ced::internal::FINISH_REASON_ERROR, std::string(status.message()), ToGrpc(status));
    return;
  }
  if (first < 0) first = SampleToken(logits.data(), c.vocab_size, r->sampling, 0);
  r->state = Request::kRunning;
  Emit(r, first);
}

void DecodeWorker::SchedulerLoop() {
  const int V = engine_->config().vocab_size;
  while (true) {
    std::vector<Request*> to_start, running;
    std::vector<std::unique_ptr<Request>> to_release;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto now = Clock::now();
      for (auto it = requests_.begin(); it != requests_.end();) {
        Request* r = it->second.get();
        if (!r->finished && r->cancelled) {
          Finish(r, ced::internal::FINISH_REASON_CANCELLED, r->cancel_reason,
                 grpc::Status(grpc::StatusCode::CANCELLED, r->cancel_reason));
        } else if (!r->finished && !r->transfer_error.empty()) {
          Finish(r, ced::internal::FINISH_REASON_ERROR, r->transfer_error,
                 grpc::Status(grpc::StatusCode::UNAVAILABLE, r->transfer_error));
        } else if (!r->finished && !r->stream &&
                   now - r->t_reserve >
                       std::chrono::milliseconds(options_.stream_attach_timeout_ms)) {
          Finish(r, ced::internal::FINISH_REASON_ERROR, "never streamed",
                 grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "the reservation was not streamed in time"));
        } else if (!r->finished && r->state == Request::kReserved && !r->local_prefill &&
                   now - r->t_progress >
                       std::chrono::milliseconds(options_.reservation_timeout_ms)) {
          // An inactivity timeout: every K/V message resets it, so a slow but
          // progressing prefill is never cut off; the client's deadline (the
          // gateway's) bounds the request as a whole.
          const std::string why =
              absl::StrCat("no K/V progress from prefill worker ", r->prefill_worker_id, " for ",
                           options_.reservation_timeout_ms, " ms (--reservation-timeout-ms; ",
                           r->received_tokens, " of ", r->prompt.size(), " prompt tokens landed)");
          Finish(r, ced::internal::FINISH_REASON_ERROR, why,
                 grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, why));
        }
        // Release only once no transfer can still land in the blocks and the
        // stream (if any) has the final status.
        const bool stream_settled =
            r->stream || r->cancelled ||
            now - r->t_reserve > std::chrono::milliseconds(options_.stream_attach_timeout_ms);
        if (r->finished && r->inflight_messages == 0 && stream_settled) {
          by_token_.erase(r->transfer_token);
          to_release.push_back(std::move(it->second));
          it = requests_.erase(it);
          continue;
        }
        if (!r->finished) {
          if (r->state == Request::kReady ||
              (r->state == Request::kReserved && r->local_prefill && r->stream)) {
            to_start.push_back(r);
          } else if (r->state == Request::kRunning) {
            running.push_back(r);
          }
        }
        ++it;
      }
      if (to_start.empty() && running.empty() && to_release.empty()) {
        if (stop_) return;
        cv_.wait_for(lock, std::chrono::milliseconds(50));
        continue;
      }
      if (stop_) return;
      // Reserve calls in progress take the engine first: std::mutex is not
      // fair, and this loop re-takes engine_mu_ microseconds after each step,
      // so a waiting Reserve (and the prompts queued behind its prefill) would
      // otherwise wait until the running sequences finish. Bounded: 5 ms.
      cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return admitting_ == 0 || stop_; });
    }
    if (options_.step_delay_ms_for_testing > 0 && !running.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms_for_testing));
    }
    std::lock_guard<std::mutex> elock(engine_mu_);
    for (auto& r : to_release) (void)engine_->ReleaseSequence(r->seq);
    to_release.clear();
    // Sequences started here join the batch next iteration: count them, so
    // the batch never exceeds max_batch (a truncated batch would starve the
    // sequences cut off; the others keep waiting in their queue).
    size_t started = 0;
    for (Request* r : to_start) {
      if (running.size() + started >= static_cast<size_t>(options_.max_batch)) break;
      StartRequest(r);
      ++started;
    }
    if (running.size() > static_cast<size_t>(options_.max_batch))
      running.resize(options_.max_batch);
    if (running.empty()) continue;
    std::vector<DecodeInput> inputs;
    for (Request* r : running) inputs.push_back({r->seq, r->last_token});
    const auto t0 = Clock::now();
    auto logits = engine_->Decode(inputs);
    m_->step_seconds->Observe(std::chrono::duration<double>(Clock::now() - t0).count());
    m_->batch_size->Observe(static_cast<double>(inputs.size()));
    m_->steps->Increment();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < running.size(); ++i) {
      Request* r = running[i];
      if (r->finished) continue;
      if (!logits.ok()) {
        Finish(r, ced::internal::FINISH_REASON_ERROR, std::string(logits.status().message()),
               ToGrpc(logits.status()));
        continue;
      }
      Emit(r, SampleToken(logits->data() + i * V, V, r->sampling, r->generated));
    }
  }
}

}  // namespace ced::services
