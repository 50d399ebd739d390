// Prefix cache of global K/V blocks (DESIGN.md §1.6).
//
// Every global block of the KV cache is handed out by this cache. A block is
// private to the sequence that allocated it until the sequence publishes it
// under its hash-chain identity (a full block whose K/V is final); published
// blocks are shared by reference between sequences whose prompts start with
// the same tokens, and stay cached after the last reference goes (LRU) until
// an allocation needs their room. Local (sliding window) K/V is never cached.
//
// Block identity: h_0 = H(model fingerprint, kv format, block size),
// h_i = H(h_{i-1}, token ids of block i): 128 bits of SHA-256, so a prompt
// cannot be crafted to collide with another tenant's blocks.
//
// Thread-safe: every method takes the cache's mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/block_allocator.h"

namespace ced {

struct BlockHash {
  uint64_t hi = 0, lo = 0;
  bool operator==(const BlockHash& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const BlockHash& o) const { return !(*this == o); }
  std::string Hex() const;  // 32 hex digits
};

// h_0: `identity` names the model (its fingerprint) and the cache format.
BlockHash RootBlockHash(std::string_view identity, int block_size);
// h_i from h_{i-1} and the token ids of block i (block_size of them).
BlockHash ChainBlockHash(const BlockHash& prev, absl::Span<const int32_t> tokens);
// The chain of every full block of `tokens`: element i is h_{i+1}.
std::vector<BlockHash> ChainBlockHashes(const BlockHash& root, int block_size,
                                        absl::Span<const int32_t> tokens);

struct PrefixCacheStats {
  int cached_blocks = 0;      // published blocks (referenced or not)
  int evictable_blocks = 0;   // published, unreferenced (reclaimable at once)
  int64_t evicted_total = 0;  // blocks evicted to make room
  int64_t published_total = 0;
};

// Routing reports (DESIGN.md 1.6): a publish or an eviction of a block hash.
struct PrefixCacheEvent {
  BlockHash hash;
  bool published = false;  // false: evicted
};

// What EventsSince returns. Events are numbered 1, 2, ... in the order the
// cache changed; end_seq is the number the next event will get.
struct PrefixCacheEventLog {
  uint64_t end_seq = 1;
  // true: `events` are exactly those numbered [from_seq, end_seq). false: the
  // log no longer holds them all (or from_seq is 0 or from the future), and
  // `published` is every block published now, as of end_seq (a resync).
  bool complete = false;
  std::vector<PrefixCacheEvent> events;
  std::vector<BlockHash> published;
};

class PrefixCache {
 public:
  // `allocator` (not owned) is the pool of global blocks.
  explicit PrefixCache(BlockAllocator* allocator);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest run of published blocks matching hashes[0..], at most
  // `max_blocks`, each with a reference taken for the caller.
  std::vector<int> Acquire(absl::Span<const BlockHash> hashes, int max_blocks);
  // The length of that run, without taking references (routing hints).
  int Lookup(absl::Span<const BlockHash> hashes) const;
  // `count` private blocks (one reference each), evicting unreferenced
  // published blocks, least recently used first, when the pool is short.
  // RESOURCE_EXHAUSTED when even eviction cannot make room.
  absl::StatusOr<std::vector<int>> Allocate(int count);
  // Publishes a private block the caller references, whose K/V is final, as
  // `hash`. No-op when the block is already published or another block holds
  // this hash (the caller's block stays private and is freed on release).
  void Publish(int block, const BlockHash& hash);
  // Drops one reference from each block: unreferenced published blocks stay
  // cached (most recently used, the first of `blocks` most of all: pass a
  // sequence's blocks in order and eviction takes its chain from the tail),
  // unreferenced private blocks are freed.
  absl::Status Release(absl::Span<const int> blocks);
  // Evicts every unreferenced published block (tests, memory pressure).
  int EvictAll();
  // Evicts up to `max_blocks` of them, least recently used first; returns
  // how many.
  int EvictUpTo(int max_blocks);

  // Blocks referenced by at least one sequence.
  int referenced_blocks() const;
  // Of `blocks` (with repeats: one per reference a holder has), those whose
  // every reference is in the list: what releasing them all would make
  // reclaimable.
  int OnlyReferencedBy(absl::Span<const int> blocks) const;
  // Blocks an Allocate can obtain now (free + evictable).
  int available_blocks() const;
  PrefixCacheStats stats() const;

  // KV tiers (engine/kv/kv_tiers.h): called with each published block an
  // eviction is about to free, under the cache's mutex, while its bytes are
  // still intact; the hook copies them and must not call back into the cache.
  // Set once, before the cache is shared between threads.
  using EvictHook = std::function<void(int block, const BlockHash& hash)>;
  void SetEvictHook(EvictHook hook) { evict_hook_ = std::move(hook); }

  // Keeps the last `capacity` publish/evict events for EventsSince (0, the
  // default, keeps none: EventsSince always answers with a full resync).
  void EnableEventLog(size_t capacity);
  // Events numbered >= from_seq, at most `max_events` of them (end_seq then
  // stops after the last one returned); see PrefixCacheEventLog.
  PrefixCacheEventLog EventsSince(uint64_t from_seq, size_t max_events) const;

 private:
  struct Hasher {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ h.hi); }
  };
  struct Entry {
    int refs = 0;
    bool published = false;
    BlockHash hash;
    std::list<int>::iterator lru;  // valid when published && refs == 0
  };
  void EvictLocked(int count);
  void LogEventLocked(const BlockHash& hash, bool published);

  BlockAllocator* allocator_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // per block index
  std::unordered_map<BlockHash, int, Hasher> by_hash_;
  std::list<int> lru_;  // unreferenced published blocks, least recent first
  int referenced_ = 0;
  int64_t evicted_total_ = 0, published_total_ = 0;
  EvictHook evict_hook_;
  // Event log: events_[i] is number event_seq_ - events_.size() + i.
  size_t event_capacity_ = 0;
  uint64_t event_seq_ = 1;  // number of the next event
  std::deque<PrefixCacheEvent> events_;
};

}  // namespace ced
