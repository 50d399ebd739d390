#include "services/router_policy/block_index.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ced::router {

BlockIndex::BlockIndex(const Options& options) : options_(options) {}

void BlockIndex::AddLocked(Worker& w, const BlockKey& k) const {
  if (w.current.contains(k)) return;
  w.previous.erase(k);
  const int64_t half = std::max<int64_t>(1, options_.max_blocks_per_worker / 2);
  if (static_cast<int64_t>(w.current.size()) >= half) {
    w.previous = std::move(w.current);
    w.current = absl::flat_hash_set<BlockKey>();
  }
  w.current.insert(k);
}

void BlockIndex::ResetWorker(const std::string& id, const BlockKey& root, int block_size) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[id];
  w = Worker();
  w.root = root;
  w.block_size = block_size;
}

void BlockIndex::RemoveWorker(const std::string& id) {
  absl::MutexLock lock(&mu_);
  workers_.erase(id);
}

absl::StatusOr<uint64_t> BlockIndex::Apply(const std::string& id, const BlockReport& report) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("prefix report from untracked worker '", id, "'"));
  }
  Worker& w = it->second;
  if (w.block_size <= 0) return report.end_seq;  // not cache-aware: nothing to keep
  if (report.full || report.base_seq == 0) {
    w.current.clear();
    w.previous.clear();
    for (const BlockKey& k : report.added) AddLocked(w, k);
    w.seq = report.end_seq;
    return w.seq;
  }
  if (w.seq == 0 || report.base_seq > w.seq) return uint64_t{0};  // events missing
  if (report.end_seq < w.seq) return w.seq;                       // an old duplicate
  for (const BlockKey& k : report.evicted) {
    w.current.erase(k);
    w.previous.erase(k);
  }
  for (const BlockKey& k : report.added) AddLocked(w, k);
  w.seq = report.end_seq;
  return w.seq;
}

void BlockIndex::Predict(const std::string& id, const BlockKey& root, int block_size,
                         absl::Span<const BlockKey> chain) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  if (w.block_size <= 0 || w.block_size != block_size || w.root != root) return;
  for (const BlockKey& k : chain) AddLocked(w, k);
}

int64_t BlockIndex::MatchBlocks(const std::string& id, const BlockKey& root, int block_size,
                                absl::Span<const BlockKey> chain) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return 0;
  const Worker& w = it->second;
  if (w.block_size <= 0 || w.block_size != block_size || w.root != root) return 0;
  int64_t n = 0;
  while (n < static_cast<int64_t>(chain.size()) && w.Contains(chain[n])) ++n;
  return n;
}

bool BlockIndex::ChainOf(const std::string& id, BlockKey* root, int* block_size) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.block_size <= 0) return false;
  *root = it->second.root;
  *block_size = it->second.block_size;
  return true;
}

int64_t BlockIndex::WorkerBlocks(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it == workers_.end() ? 0 : it->second.size();
}

int64_t BlockIndex::TotalBlocks() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [id, w] : workers_) n += w.size();
  return n;
}

}  // namespace ced::router
