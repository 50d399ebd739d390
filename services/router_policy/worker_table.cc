#include "services/router_policy/worker_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ced::router {
namespace {

bool IsLive(const WorkerLoad& load, absl::Time now, absl::Duration timeout) {
  return now - load.last_heartbeat <= timeout;
}

}  // namespace

WorkerTable::WorkerTable(const Options& options) : options_(options) {}

absl::Status WorkerTable::Register(const WorkerInfo& info, absl::Time now) {
  if (info.id.empty()) return absl::InvalidArgumentError("register: worker id is empty");
  if (info.total_kv_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register ", info.id, ": total_kv_blocks is negative"));
  }
  if (info.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register ", info.id, ": block_size is negative"));
  }
  if (info.role == Role::kDecode) {
    if (info.weights != WeightsHeld::kFull) {
      return absl::InvalidArgumentError(
          absl::StrCat("register ", info.id, ": a decode worker must hold the full weights"));
    }
    if (info.block_size <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("register ", info.id, ": a decode worker needs block_size > 0"));
    }
  }
  Entry entry;
  entry.info = info;
  entry.load.free_kv_blocks = info.total_kv_blocks;
  entry.load.last_heartbeat = now;
  absl::MutexLock lock(&mu_);
  workers_[info.id] = std::move(entry);
  return absl::OkStatus();
}

absl::Status WorkerTable::Update(const std::string& id, const WorkerLoad& load) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("load report from unknown worker '", id, "'"));
  }
  Entry& entry = it->second;
  if (load.last_heartbeat < entry.load.last_heartbeat) return absl::OkStatus();
  entry.load = load;
  entry.pending = PendingWork();
  entry.reported_stale = false;
  return absl::OkStatus();
}

absl::Status WorkerTable::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("remove: unknown worker '", id, "'"));
  }
  workers_.erase(it);
  return absl::OkStatus();
}

std::vector<std::string> WorkerTable::MarkStale(absl::Time now) {
  std::vector<std::string> stale;
  absl::MutexLock lock(&mu_);
  for (auto& [id, entry] : workers_) {
    if (entry.reported_stale || IsLive(entry.load, now, options_.heartbeat_timeout)) continue;
    entry.reported_stale = true;
    stale.push_back(id);
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

absl::Status WorkerTable::AddPending(const std::string& id, const PendingWork& work) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker '", id, "' is gone"));
  }
  PendingWork& pending = it->second.pending;
  pending.prefill_tokens += work.prefill_tokens;
  pending.kv_blocks += work.kv_blocks;
  pending.sequences += work.sequences;
  return absl::OkStatus();
}

std::vector<WorkerState> WorkerTable::Snapshot(absl::Time now) const {
  std::vector<WorkerState> states;
  {
    absl::MutexLock lock(&mu_);
    states.reserve(workers_.size());
    for (const auto& [id, entry] : workers_) {
      states.push_back(WorkerState{entry.info, entry.load, entry.pending,
                                   IsLive(entry.load, now, options_.heartbeat_timeout)});
    }
  }
  std::sort(states.begin(), states.end(),
            [](const WorkerState& a, const WorkerState& b) { return a.info.id < b.info.id; });
  return states;
}

}  // namespace ced::router
