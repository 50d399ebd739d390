// The local disk tier: one file per stored block, `<dir>/<hash hex>.kvb`,
// least recently used out first when `capacity_bytes` would be passed. The
// directory is indexed when the store is created (oldest modification first),
// so blocks outlive the process; give every worker its own directory. Files
// are written to a temporary name and renamed, so a reader never sees half a
// block. Thread-safe; Put and GetPrefix block on file I/O.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "engine/kv/block_store.h"

namespace ced {

class DiskBlockStore final : public KvBlockStore {
 public:
  struct Options {
    std::string dir;  // created when missing
    int64_t capacity_bytes = 0;
  };
  static absl::StatusOr<std::unique_ptr<DiskBlockStore>> Create(const Options& options);

  std::string_view name() const override { return "disk"; }
  absl::Status Put(const BlockHash& root, absl::Span<const KvStoredBlock> blocks) override;
  std::vector<std::string> GetPrefix(const BlockHash& root,
                                     absl::Span<const BlockHash> hashes) override;
  // Reads each file into a buffer the calling thread keeps between calls.
  size_t VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                     const BlockVisitor& take) override;
  int Contains(const BlockHash& root, absl::Span<const BlockHash> hashes) override;
  void Erase(const BlockHash& root, const BlockHash& hash) override;
  int64_t resident_blocks() const override;
  int64_t resident_bytes() const override;

  // The file that holds `hash` (tests).
  std::string PathOf(const BlockHash& hash) const;

 private:
  explicit DiskBlockStore(Options options) : options_(std::move(options)) {}
  struct Hasher {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ h.hi); }
  };
  struct Entry {
    int64_t size = 0;
    std::list<BlockHash>::iterator lru;
  };
  absl::Status Index();
  // Reads the file of `hash` (indexed at `size` bytes) into *out; false when
  // it is gone or short (then dropped from the index and counted).
  bool ReadFile(const BlockHash& hash, int64_t size, std::string* out);
  void DropLocked(const BlockHash& hash);

  Options options_;
  mutable std::mutex mu_;
  std::unordered_map<BlockHash, Entry, Hasher> files_;
  std::list<BlockHash> lru_;  // least recent first
  int64_t bytes_ = 0;
  uint64_t tmp_counter_ = 0;
};

}  // namespace ced
