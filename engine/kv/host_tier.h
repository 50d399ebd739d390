// The host memory tier: stored blocks in process memory, least recently used
// out first when `capacity_bytes` would be passed. A block pushed out goes to
// `on_evict` (the disk tier below it), called on the Put caller's thread with
// no lock held. Thread-safe.
#pragma once

#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>

#include "engine/kv/block_store.h"

namespace ced {

class HostBlockStore final : public KvBlockStore {
 public:
  struct Options {
    int64_t capacity_bytes = 0;
    std::function<void(const KvStoredBlock&)> on_evict;
  };
  explicit HostBlockStore(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "host"; }
  // A block larger than the whole capacity is dropped (counted).
  absl::Status Put(const BlockHash& root, absl::Span<const KvStoredBlock> blocks) override;
  std::vector<std::string> GetPrefix(const BlockHash& root,
                                     absl::Span<const BlockHash> hashes) override;
  // The held bytes themselves (no copy), the lock not held during `take`.
  size_t VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                     const BlockVisitor& take) override;
  int Contains(const BlockHash& root, absl::Span<const BlockHash> hashes) override;
  void Erase(const BlockHash& root, const BlockHash& hash) override;
  int64_t resident_blocks() const override;
  int64_t resident_bytes() const override;

 private:
  struct Hasher {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ h.hi); }
  };
  struct Entry {
    std::shared_ptr<const std::string> bytes;
    std::list<BlockHash>::iterator lru;
  };

  Options options_;
  mutable std::mutex mu_;
  std::unordered_map<BlockHash, Entry, Hasher> blocks_;
  std::list<BlockHash> lru_;  // least recent first
  int64_t bytes_ = 0;
};

}  // namespace ced
