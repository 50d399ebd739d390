// Which prefix-cache blocks each worker holds, as far as the router knows
// (DESIGN.md 1.6): built from the workers' reports of blocks published and
// evicted, plus the router's own predictions for the requests it placed.
// A hint, never an authority: the worker's own cache decides what is reused.
// Pure C++ (no gRPC): the cluster simulator uses it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ced::router {

// A 128-bit block identity of the hash chain (engine BlockHash hi/lo).
struct BlockKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const BlockKey& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const BlockKey& o) const { return !(*this == o); }
  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    return H::combine(std::move(h), k.hi, k.lo);
  }
};

// One worker's report: the net effect of its cache events [base_seq, end_seq).
// full (or base_seq == 0): `added` is everything it holds as of end_seq.
struct BlockReport {
  uint64_t base_seq = 0;
  uint64_t end_seq = 0;
  bool full = false;
  std::vector<BlockKey> added;
  std::vector<BlockKey> evicted;
};

// Thread-safe: every method may be called concurrently.
//
// Memory: at most max_blocks_per_worker keys per worker. A worker with more
// keeps a recent subset: keys live in two generations; when the current one
// reaches half the cap the older one is dropped (an approximate LRU of what
// was reported or predicted last).
class BlockIndex {
 public:
  struct Options {
    int64_t max_blocks_per_worker = int64_t{1} << 18;  // 16 B keys: ~4M tokens at block 16
  };

  explicit BlockIndex(const Options& options);
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Starts (or restarts) tracking a worker whose chain starts at `root` with
  // `block_size` tokens a block (<= 0: not cache-aware): forgets what it held
  // and waits for a full report.
  void ResetWorker(const std::string& id, const BlockKey& root, int block_size);
  void RemoveWorker(const std::string& id);

  // Applies a report. Returns the event number the router's view of the
  // worker is now current to (the worker's next base_seq), or 0 when the
  // report does not fit that view (events are missing): the worker must send
  // a full report. A delta applies when base_seq <= current <= end_seq (its
  // net effect is idempotent over that overlap); an older duplicate
  // (end_seq < current) is ignored. NOT_FOUND for an untracked worker.
  absl::StatusOr<uint64_t> Apply(const std::string& id, const BlockReport& report);

  // Adds keys the worker is expected to publish (the router just placed a
  // request with this prompt chain there). No-op for an untracked worker or
  // another chain root / block size.
  void Predict(const std::string& id, const BlockKey& root, int block_size,
               absl::Span<const BlockKey> chain);

  // The length, in blocks, of the longest run chain[0..] the worker holds;
  // 0 for an untracked worker or another chain root / block size.
  // O(length of the match).
  int64_t MatchBlocks(const std::string& id, const BlockKey& root, int block_size,
                      absl::Span<const BlockKey> chain) const;

  // The root and block size of a worker's chain; false when untracked or
  // not cache-aware.
  bool ChainOf(const std::string& id, BlockKey* root, int* block_size) const;

  int64_t WorkerBlocks(const std::string& id) const;  // keys held for the worker
  int64_t TotalBlocks() const;                        // over all workers

 private:
  struct Worker {
    BlockKey root;
    int block_size = 0;
    uint64_t seq = 0;  // 0: waiting for a full report
    absl::flat_hash_set<BlockKey> current, previous;
    bool Contains(const BlockKey& k) const { return current.contains(k) || previous.contains(k); }
    int64_t size() const { return static_cast<int64_t>(current.size() + previous.size()); }
  };
  void AddLocked(Worker& w, const BlockKey& k) const;

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ced::router
