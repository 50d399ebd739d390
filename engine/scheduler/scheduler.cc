#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace ced {

const char* EndReasonName(EndReason reason) {
  switch (reason) {
    case EndReason::kCancelled:
      return "cancelled";
    case EndReason::kTransferFailed:
      return "transfer_failed";
    case EndReason::kNeverAttached:
      return "never_attached";
    case EndReason::kKvTimeout:
      return "kv_timeout";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& o) {
  if (o.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch: must be >= 1, got ", o.max_batch));
  }
  if (o.max_step_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_step_tokens: must be >= 1, got ", o.max_step_tokens));
  }
  if (o.min_chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_chunk_tokens: must be >= 1, got ", o.min_chunk_tokens));
  }
  if (o.max_queued_requests < 0 || o.max_queued_tokens < 0) {
    return absl::InvalidArgumentError("max_queued_requests / max_queued_tokens: must be >= 0");
  }
  if (o.kv_timeout.count() < 0 || o.attach_timeout.count() < 0) {
    return absl::InvalidArgumentError("kv_timeout / attach_timeout: must be >= 0");
  }
  return std::unique_ptr<Scheduler>(new Scheduler(o));
}

Scheduler::Entry* Scheduler::Find(const std::string& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  auto w = waiting_.find(it->second);
  return w != waiting_.end() ? &w->second : &running_entries_.at(it->second);
}

void Scheduler::MakeReady(const std::string& id, Entry* e) {
  e->state = State::kReady;
  startable_.insert(by_id_.at(id));
}

void Scheduler::Unqueue(const Entry& e) {
  if (!Queued(e)) return;
  --queued_;
  queued_tokens_ -= e.request.prompt_tokens;
}

void Scheduler::Erase(uint64_t order) {
  Entries* from = &waiting_;
  auto it = waiting_.find(order);
  if (it == waiting_.end()) {
    from = &running_entries_;
    it = running_entries_.find(order);
    if (it == running_entries_.end()) return;
  }
  const Entry& e = it->second;
  Unqueue(e);
  if (e.state == State::kRunning) --running_;
  if (e.state == State::kStarting) --starting_;
  if (e.state == State::kAdmitting) --admitting_;
  watched_.erase(order);
  startable_.erase(order);
  by_id_.erase(e.request.id);
  from->erase(it);
}

absl::Status Scheduler::Add(const ScheduledRequest& request, SchedulerTime now,
                            AddRejection* rejection) {
  AddRejection unused;
  AddRejection& why = rejection ? *rejection : unused;
  why = AddRejection::kNone;
  if (request.id.empty()) return absl::InvalidArgumentError("request id: empty");
  if (request.prompt_tokens < 0) return absl::InvalidArgumentError("prompt_tokens: negative");
  if (by_id_.count(request.id)) {
    why = AddRejection::kDuplicate;
    return absl::AlreadyExistsError(absl::StrCat("request '", request.id, "' is already queued"));
  }
  if (queued_ >= options_.max_queued_requests) {
    why = AddRejection::kQueueRequests;
    return absl::ResourceExhaustedError(
        absl::StrCat(queued_, " requests already queued (max ", options_.max_queued_requests, ")"));
  }
  if (queued_tokens_ + request.prompt_tokens > options_.max_queued_tokens) {
    why = AddRejection::kQueueTokens;
    return absl::ResourceExhaustedError(
        absl::StrCat(queued_tokens_, " prompt tokens already queued and ", request.prompt_tokens,
                     " more would exceed ", options_.max_queued_tokens));
  }
  const uint64_t order = next_order_++;
  Entry& e = waiting_[order];
  e.request = request;
  e.added = e.progress = now;
  by_id_[request.id] = order;
  ++admitting_;
  ++queued_;
  queued_tokens_ += request.prompt_tokens;
  return absl::OkStatus();
}

absl::Status Scheduler::Activate(const std::string& id, int64_t start_tokens) {
  Entry* e = Find(id);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("request '", id, "' is not queued"));
  if (e->state != State::kAdmitting) {
    return absl::FailedPreconditionError(absl::StrCat("request '", id, "' is already active"));
  }
  --admitting_;
  e->work_left = std::max<int64_t>(0, start_tokens);
  if (e->request.awaits_kv) {
    e->state = State::kAwaitingKv;
  } else {
    e->state = State::kAwaitingAttach;
    if (e->attached) MakeReady(id, e);
  }
  return absl::OkStatus();
}

void Scheduler::Remove(const std::string& id) {
  auto it = by_id_.find(id);
  if (it != by_id_.end()) Erase(it->second);
}

void Scheduler::Attach(const std::string& id) {
  Entry* e = Find(id);
  if (e == nullptr) return;
  e->attached = true;
  if (e->state == State::kAwaitingAttach) MakeReady(id, e);
  if (!Watched(*e)) watched_.erase(by_id_.at(id));
}

void Scheduler::OnKvProgress(const std::string& id, SchedulerTime now) {
  Entry* e = Find(id);
  if (e != nullptr) e->progress = std::max(e->progress, now);
}

void Scheduler::OnKvLanded(const std::string& id, SchedulerTime now, int64_t start_tokens) {
  Entry* e = Find(id);
  if (e == nullptr) return;
  e->progress = std::max(e->progress, now);
  if (e->state != State::kAwaitingKv) return;
  e->work_left = std::max<int64_t>(0, start_tokens);
  MakeReady(id, e);
}

bool Scheduler::Cancel(const std::string& id, const std::string& reason) {
  Entry* e = Find(id);
  if (e == nullptr) return false;
  if (!e->cancelled) {
    Unqueue(*e);
    e->cancelled = true;
    e->detail = reason;
  }
  watched_.insert(by_id_.at(id));
  return true;
}

bool Scheduler::FailTransfer(const std::string& id, const std::string& detail) {
  Entry* e = Find(id);
  if (e == nullptr) return false;
  if (!e->failed && !e->cancelled) e->detail = detail;
  e->failed = true;
  watched_.insert(by_id_.at(id));
  return true;
}

std::optional<EndReason> Scheduler::EndsNow(const Entry& e, SchedulerTime now) const {
  if (e.state == State::kAdmitting) return std::nullopt;  // left alone until activated
  if (e.cancelled) return EndReason::kCancelled;
  if (e.failed) return EndReason::kTransferFailed;
  if (!e.attached && options_.attach_timeout.count() > 0 &&
      now - e.added > options_.attach_timeout) {
    return EndReason::kNeverAttached;
  }
  if (e.state == State::kAwaitingKv && options_.kv_timeout.count() > 0 &&
      now - e.progress > options_.kv_timeout) {
    return EndReason::kKvTimeout;
  }
  return std::nullopt;
}

StepPlan Scheduler::Schedule(SchedulerTime now) {
  CED_CHECK(!in_step_);  // Update the previous plan first
  StepPlan plan;
  // 1. Ends, in Add order: cancelled, failed, never attached, no K/V
  // progress. Running requests can end only when watched.
  // Running requests and, without timeouts, waiting ones can end only when
  // watched.
  std::vector<uint64_t> candidates(watched_.begin(), watched_.end());
  if (options_.kv_timeout.count() > 0 || options_.attach_timeout.count() > 0) {
    for (const auto& [order, e] : waiting_) {
      if (!watched_.count(order)) candidates.push_back(order);
    }
    std::sort(candidates.begin(), candidates.end());
  }
  std::vector<uint64_t> ending;
  for (uint64_t order : candidates) {
    auto w = waiting_.find(order);
    const Entry* e = w != waiting_.end() ? &w->second : &running_entries_.at(order);
    const std::optional<EndReason> why = EndsNow(*e, now);
    if (!why) continue;
    const bool detailed = *why == EndReason::kCancelled || *why == EndReason::kTransferFailed;
    plan.ended.push_back({e->request.id, *why, detailed ? e->detail : std::string()});
    ending.push_back(order);
  }
  for (uint64_t order : ending) Erase(order);
  // 2. Decode: every running sequence, one token each; never cut.
  plan.decode_count = running_;
  if (options_.list_decode) {
    plan.decode.reserve(running_entries_.size());
    for (const auto& [order, e] : running_entries_) plan.decode.push_back(e.request.id);
  }
  // 3. Start work, FIFO, in the slots and the budget left. Strict FIFO:
  // the first request that does not fit stops the scan (no overtaking), and
  // the first start of a step always runs, so no request starves.
  int free_slots = options_.max_batch - running_ - starting_;
  int64_t left = options_.max_step_tokens - plan.decode_count;
  for (uint64_t order : startable_) {
    const Entry& e = waiting_.at(order);
    const bool holds_slot = e.state == State::kStarting;
    if (!holds_slot && free_slots <= 0) continue;
    int64_t tokens = e.work_left;
    if (options_.chunked_start) {
      const int64_t allowed = plan.start.empty() ? std::max(left, options_.min_chunk_tokens) : left;
      if (e.work_left > 0 && allowed <= 0) break;
      tokens = std::min(e.work_left, std::max<int64_t>(allowed, 0));
    } else if (!plan.start.empty() && tokens > left) {
      break;
    }
    plan.start.push_back({e.request.id, tokens, tokens == e.work_left});
    plan.start_tokens += tokens;
    left -= tokens;
    if (!holds_slot) --free_slots;
  }
  planned_starts_ = plan.start;
  in_step_ = true;
  return plan;
}

void Scheduler::Update(const StepResult& result) {
  CED_CHECK(in_step_);  // Schedule first
  in_step_ = false;
  const std::vector<std::string>& finished = result.finished;
  for (const StartWork& s : planned_starts_) {
    Entry* e = Find(s.id);
    if (e == nullptr || std::find(finished.begin(), finished.end(), s.id) != finished.end()) {
      continue;  // a step's starts are few: a scan beats building a set
    }
    e->work_left = std::max<int64_t>(0, e->work_left - s.tokens);
    if (e->state == State::kStarting) --starting_;
    if (s.completes) {
      Unqueue(*e);
      e->state = State::kRunning;
      ++running_;
      const uint64_t order = by_id_.at(s.id);
      if (Watched(*e)) watched_.insert(order);
      startable_.erase(order);
      running_entries_.insert(waiting_.extract(order));
    } else {
      e->state = State::kStarting;
      ++starting_;
    }
  }
  planned_starts_.clear();
  for (const std::string& id : result.finished) Remove(id);
}

}  // namespace ced
