#include "bench/sim/decode_instance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "engine/common/status.h"

namespace ced::sim {
namespace {

SchedulerTime At(double s) {
  return SchedulerTime{} + std::chrono::nanoseconds(std::llround(s * 1e9));
}

std::string Id(int request) { return std::to_string(request); }

int Index(const std::string& id) {
  int i = -1;
  CED_CHECK(absl::SimpleAtoi(id, &i));
  return i;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimDecodeInstance>> SimDecodeInstance::Create(
    const Options& o) {
  if (o.cost == nullptr || o.gpus < 1) {
    return absl::InvalidArgumentError("sim decode instance: needs a cost model and >= 1 GPU");
  }
  SchedulerOptions so;
  so.max_batch = o.max_batch;
  so.max_step_tokens = o.max_step_tokens;
  so.max_queued_requests = o.max_queued_requests;
  so.max_queued_tokens = o.max_queued_tokens;
  so.chunked_start = false;  // the worker's: Engine::Prefill / Replay run whole
  so.kv_timeout = std::chrono::milliseconds(0);
  so.attach_timeout = std::chrono::milliseconds(0);
  so.list_decode = false;  // the batch is priced from its sums, not a list
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> sched, Scheduler::Create(so));
  return std::unique_ptr<SimDecodeInstance>(new SimDecodeInstance(o, std::move(sched)));
}

bool SimDecodeInstance::Reserve(int request, int64_t prompt_tokens, int64_t output_tokens,
                                int64_t generated, double now_s, double local_prefill_s,
                                int64_t work_tokens) {
  const bool local = local_prefill_s >= 0;
  const std::string id = Id(request);
  if (!sched_->Add({id, prompt_tokens, /*awaits_kv=*/!local}, At(now_s)).ok()) return false;
  CED_CHECK(sched_->Activate(id, local ? work_tokens : 0).ok());
  sched_->Attach(id);  // the gateway streams at once
  Seq& s = seqs_[request];
  s.prompt = prompt_tokens;
  s.output = output_tokens;
  s.generated = generated;
  s.local_s = local_prefill_s;
  return true;
}

void SimDecodeInstance::OnKvLanded(int request, bool replay, double now_s) {
  Seq& s = seqs_.at(request);
  s.replay = replay;
  sched_->OnKvLanded(Id(request), At(now_s), replay ? o_.cost->ReplayedTokens(s.prompt) : 0);
}

double SimDecodeInstance::BeginStep(double now_s) {
  CED_CHECK(!in_step_);
  const CostModel& cost = *o_.cost;
  while (true) {
    plan_ = sched_->Schedule(At(now_s));
    CED_CHECK(plan_.ended.empty());  // no cancels, failures or timeouts here
    CED_CHECK(plan_.decode_count == batch_);
    in_step_ = true;
    if (plan_.empty()) {
      sched_->Update({});
      in_step_ = false;
      return -1;
    }
    double seconds = 0;
    Work replays;
    int64_t replayed = 0, replaying = 0;
    bool ends = false;  // an import ends its request
    for (const StartWork& w : plan_.start) {
      CED_CHECK(w.completes);
      const Seq& s = seqs_.at(Index(w.id));
      if (s.local_s < 0 && !s.replay && s.generated >= s.output) ends = true;
      if (s.local_s >= 0) {
        seconds += s.local_s;
      } else if (s.replay) {
        replays += cost.DecodeReplayWork(s.prompt);
        replayed += cost.ReplayedTokens(s.prompt);
        ++replaying;
      }
    }
    if (batch_ > 0 || replaying > 0) {
      Work work = cost.DecodeStepBaseWork(batch_, replayed);
      work += replays;
      work += cost.DecodeBatchWork(batch_, sum_context_, sum_local_);
      seconds += cost.DecodeStepSeconds(work, batch_ + replaying, o_.gpus);
    }
    if (batch_ > 0) ++decode_steps_;
    if (seconds > 0 || ends) return seconds;
    // Imports alone: applied at once (they make no token; see the header).
    std::vector<int> none;
    Apply(&none, &none);
    CED_CHECK(none.empty());
  }
}

void SimDecodeInstance::EndStep(std::vector<int>* first_token, std::vector<int>* finished) {
  CED_CHECK(in_step_);
  first_token->clear();
  finished->clear();
  Apply(first_token, finished);
}

void SimDecodeInstance::Apply(std::vector<int>* first_token, std::vector<int>* finished) {
  in_step_ = false;
  // Every sequence of the batch made one more token.
  ++steps_done_;
  sum_context_ += batch_;
  sum_local_ += below_window_;
  while (!reach_window_at_.empty() && reach_window_at_.top().first <= steps_done_) {
    --below_window_;
    reach_window_at_.pop();
  }
  const int64_t w = o_.cost->config().sliding_window;
  StepResult result;
  while (!finish_at_.empty() && finish_at_.top().first <= steps_done_) {
    const int r = finish_at_.top().second;
    finish_at_.pop();
    const Seq& s = seqs_.at(r);
    const int64_t context = s.prompt + s.output;
    --batch_;
    sum_context_ -= context;
    if (w > 0) {
      sum_local_ -= std::min(w, context);
      if (context < w) --below_window_;
    }
    finished->push_back(r);
  }
  // Starts: a replay or a local prefill made the first token; all join the
  // batch from the next step.
  for (const StartWork& start : plan_.start) {
    const int r = Index(start.id);
    Seq& s = seqs_.at(r);
    if (s.local_s >= 0 || s.replay) {
      s.generated = 1;
      first_token->push_back(r);
    }
    if (s.generated >= s.output) {
      finished->push_back(r);
    } else {
      Join(r, s);
    }
  }
  for (int r : *finished) {
    result.finished.push_back(Id(r));
    seqs_.erase(r);
  }
  sched_->Update(result);
}

void SimDecodeInstance::Join(int request, const Seq& s) {
  const int64_t context = s.prompt + s.generated;  // at its next step
  const int64_t left = s.output - s.generated;
  const int64_t w = o_.cost->config().sliding_window;
  ++batch_;
  sum_context_ += context;
  finish_at_.push({steps_done_ + left, request});
  if (w > 0) {
    sum_local_ += std::min(w, context);
    if (context < w) {
      ++below_window_;
      if (w - context <= left) reach_window_at_.push({steps_done_ + (w - context), request});
    }
  }
}

}  // namespace ced::sim
