// The decode worker's loop: the only thread that runs the engine. Each
// iteration asks the scheduler (engine/scheduler) for a StepPlan, ends what
// it ended, releases finished sequences, starts the planned requests (import
// + replay when deferred, or a local prefill), runs one batched decode step
// over the planned sequences, and reports back which of them finished.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
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
  r->finished_ok = status.ok();
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

void DecodeWorker::Emit(Request* r, int32_t token, const StepLogprobs* logprobs) {
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
  if (logprobs != nullptr) ToProto(*logprobs, chunk.add_logprobs());
  if (r->stream)
    r->stream->Push(std::move(chunk));
  else
    r->pending.push_back(std::move(chunk));
  r->generated += 1;
  r->last_token = token;
  r->history.Add(token);
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
  StepLogprobs first_logprobs;
  bool tail_logprobs = false;
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
      tail_logprobs = !tail->first_logprobs.empty();
      first_logprobs = FromPairs(tail->first_logprobs);
      if (!c.IsDecoderOnly()) m_->replays->WithLabels({{"placement", "prefill"}}).Increment();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok()) {
    Finish(r, ced::internal::FINISH_REASON_ERROR, std::string(status.message()), ToGrpc(status));
    return;
  }
  if (first < 0) {
    first = SampleStep(logits.data(), c.vocab_size, r->sampling, r->history, 0, &first_logprobs);
  } else if (r->sampling.logprobs && !tail_logprobs) {
    // Whoever sampled it sent none (the prefill worker's own stream has them).
    Finish(r, ced::internal::FINISH_REASON_ERROR,
           absl::StrCat("prefill worker ", r->prefill_worker_id,
                        " sent no logprobs with the first token"),
           grpc::Status(grpc::StatusCode::INTERNAL, "first token without logprobs"));
    return;
  }
  Emit(r, first, r->sampling.logprobs ? &first_logprobs : nullptr);
}

void DecodeWorker::EndRequest(Request* r, const EndedRequest& e) {
  // mu_ held by the caller.
  switch (e.reason) {
    case EndReason::kCancelled:
      Finish(r, ced::internal::FINISH_REASON_CANCELLED, e.detail,
             grpc::Status(grpc::StatusCode::CANCELLED, e.detail));
      return;
    case EndReason::kTransferFailed:
      Finish(r, ced::internal::FINISH_REASON_ERROR, e.detail,
             grpc::Status(grpc::StatusCode::UNAVAILABLE, e.detail));
      return;
    case EndReason::kNeverAttached:
      Finish(r, ced::internal::FINISH_REASON_ERROR, "never streamed",
             grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the reservation was not streamed in time"));
      return;
    case EndReason::kKvTimeout: {
      // An inactivity timeout: every K/V message resets it, so a slow but
      // progressing prefill is never cut off; the client's deadline (the
      // gateway's) bounds the request as a whole.
      const std::string why =
          absl::StrCat("no K/V progress from prefill worker ", r->prefill_worker_id, " for ",
                       options_.reservation_timeout_ms, " ms (--reservation-timeout-ms; ",
                       r->received_tokens, " of ", r->prompt.size(), " prompt tokens landed)");
      Finish(r, ced::internal::FINISH_REASON_ERROR, why,
             grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, why));
      return;
    }
  }
}

void DecodeWorker::SchedulerLoop() {
  const int V = engine_->config().vocab_size;
  const auto attach_timeout = std::chrono::milliseconds(options_.stream_attach_timeout_ms);
  while (true) {
    std::vector<Request*> starts, decodes;
    std::vector<std::unique_ptr<Request>> to_release;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      const auto now = Clock::now();
      const StepPlan plan = sched_->Schedule(now);
      auto find = [this](const std::string& id) {
        auto it = requests_.find(id);
        CED_CHECK(it != requests_.end());  // activated together with its insertion
        return it->second.get();
      };
      for (const EndedRequest& e : plan.ended) EndRequest(find(e.id), e);
      for (const StartWork& w : plan.start) starts.push_back(find(w.id));
      for (const std::string& id : plan.decode) decodes.push_back(find(id));
      // Release only once no transfer can still land in the blocks and the
      // stream (if any) has the final status. The scheduler already forgot
      // every finished request.
      for (auto it = requests_.begin(); it != requests_.end();) {
        Request* r = it->second.get();
        const bool stream_settled =
            r->stream || r->cancelled || now - r->t_reserve > attach_timeout;
        if (r->finished && r->inflight_messages == 0 && stream_settled) {
          by_token_.erase(r->transfer_token);
          to_release.push_back(std::move(it->second));
          it = requests_.erase(it);
          continue;
        }
        ++it;
      }
      if (starts.empty() && decodes.empty() && to_release.empty()) {
        sched_->Update({});
        cv_.wait_for(lock, std::chrono::milliseconds(50));
        continue;
      }
      // Reserve calls in progress take the engine first: std::mutex is not
      // fair, and this loop re-takes engine_mu_ microseconds after each step,
      // so a waiting Reserve (and the prompts queued behind its prefill) would
      // otherwise wait until the running sequences finish. Bounded: 5 ms.
      cv_.wait_for(lock, std::chrono::milliseconds(5),
                   [this] { return sched_->admitting() == 0 || stop_; });
      if (stop_) {
        sched_->Update({});
        return;
      }
    }
    if (options_.step_delay_ms_for_testing > 0 && !decodes.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms_for_testing));
    }
    std::lock_guard<std::mutex> elock(engine_mu_);
    // A sequence that ended well is held for the session's next turn (the
    // engine releases it when it holds none).
    for (auto& r : to_release) {
      (void)(r->finished_ok ? engine_->HoldSequence(r->seq) : engine_->ReleaseSequence(r->seq));
    }
    const bool room_freed = !to_release.empty() || !starts.empty();
    to_release.clear();
    // Started sequences decode from the next step (the scheduler counted
    // them against max_batch and the step's token budget).
    for (Request* r : starts) StartRequest(r);
    if (room_freed && router_ != nullptr &&
        (refused_for_room_.exchange(false) || reported_tight_.load())) {
      router_->ReportSoon();
    }
    absl::StatusOr<std::vector<float>> logits;
    if (!decodes.empty()) {
      std::vector<DecodeInput> inputs;
      for (Request* r : decodes) inputs.push_back({r->seq, r->last_token});
      const auto t0 = Clock::now();
      logits = engine_->Decode(inputs);
      m_->step_seconds->Observe(std::chrono::duration<double>(Clock::now() - t0).count());
      m_->batch_size->Observe(static_cast<double>(inputs.size()));
      m_->steps->Increment();
    }
    // Sampling reads only what this thread owns (history, step count): done
    // before taking mu_, so Reserve and Stream calls do not wait behind a
    // batch's sampling (milliseconds at a large vocabulary). A request
    // cancelled meanwhile is sampled for nothing.
    std::vector<int32_t> sampled(decodes.size(), -1);
    std::vector<StepLogprobs> step_logprobs(decodes.size());
    if (logits.ok()) {
      for (size_t i = 0; i < decodes.size(); ++i) {
        Request* r = decodes[i];
        sampled[i] = SampleStep(logits->data() + i * V, V, r->sampling, r->history, r->generated,
                                &step_logprobs[i]);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    StepResult result;
    for (Request* r : starts) {
      if (r->finished) result.finished.push_back(r->id);
    }
    for (size_t i = 0; i < decodes.size(); ++i) {
      Request* r = decodes[i];
      if (!r->finished) {
        if (logits.ok()) {
          Emit(r, sampled[i], r->sampling.logprobs ? &step_logprobs[i] : nullptr);
        } else {
          Finish(r, ced::internal::FINISH_REASON_ERROR, std::string(logits.status().message()),
                 ToGrpc(logits.status()));
        }
      }
      if (r->finished) result.finished.push_back(r->id);
    }
    sched_->Update(result);
  }
}

}  // namespace ced::services
