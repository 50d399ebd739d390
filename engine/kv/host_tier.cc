#include "engine/kv/host_tier.h"

namespace ced {

absl::Status HostBlockStore::Put(const BlockHash&, absl::Span<const KvStoredBlock> blocks) {
  std::vector<KvStoredBlock> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const KvStoredBlock& b : blocks) {
      const int64_t size = static_cast<int64_t>(b.bytes->size());
      if (size > options_.capacity_bytes) {
        counters_.dropped_writes.fetch_add(1);
        continue;
      }
      auto it = blocks_.find(b.hash);
      if (it != blocks_.end()) {  // held already: the same bytes (block_store.h)
        lru_.splice(lru_.end(), lru_, it->second.lru);
        continue;
      }
      while (bytes_ + size > options_.capacity_bytes && !lru_.empty()) {
        auto victim = blocks_.find(lru_.front());
        bytes_ -= static_cast<int64_t>(victim->second.bytes->size());
        evicted.push_back({victim->first, std::move(victim->second.bytes)});
        blocks_.erase(victim);
        lru_.pop_front();
      }
      blocks_[b.hash] = Entry{b.bytes, lru_.insert(lru_.end(), b.hash)};
      bytes_ += size;
      counters_.written_bytes.fetch_add(size);
      counters_.written_blocks.fetch_add(1);
    }
  }
  if (options_.on_evict) {
    for (const KvStoredBlock& b : evicted) options_.on_evict(b);
  }
  return absl::OkStatus();
}

std::vector<std::string> HostBlockStore::GetPrefix(const BlockHash&,
                                                   absl::Span<const BlockHash> hashes) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const BlockHash& h : hashes) {
    auto it = blocks_.find(h);
    if (it == blocks_.end()) break;
    lru_.splice(lru_.end(), lru_, it->second.lru);  // most recently used
    out.push_back(*it->second.bytes);
  }
  return out;
}

size_t HostBlockStore::VisitPrefix(const BlockHash&, absl::Span<const BlockHash> hashes,
                                   const BlockVisitor& take) {
  size_t i = 0;
  for (; i < hashes.size(); ++i) {
    std::shared_ptr<const std::string> bytes;  // immutable: safe to read unlocked
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(hashes[i]);
      if (it == blocks_.end()) break;
      lru_.splice(lru_.end(), lru_, it->second.lru);
      bytes = it->second.bytes;
    }
    if (!take(i, *bytes)) break;
  }
  return i;
}

int HostBlockStore::Contains(const BlockHash&, absl::Span<const BlockHash> hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && blocks_.count(hashes[n]) > 0) ++n;
  return n;
}

void HostBlockStore::Erase(const BlockHash&, const BlockHash& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(hash);
  if (it == blocks_.end()) return;
  bytes_ -= static_cast<int64_t>(it->second.bytes->size());
  lru_.erase(it->second.lru);
  blocks_.erase(it);
}

int64_t HostBlockStore::resident_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(blocks_.size());
}

int64_t HostBlockStore::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ced
