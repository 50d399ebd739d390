// The KV tiers below one engine's prefix cache (DESIGN.md §1.6, §2):
//
//   hot cache --evicted--> host memory --evicted--> local disk
//   sequences' final blocks, as published -----------> shared store (Redis)
//
// A prompt whose cached prefix ends in the hot cache continues it here: each
// next block from the first tier that holds it (queued spills, host, disk),
// then the rest as the longest run the shared store holds (one round trip).
// Every block read is checked (block_store.h); one that fails is dropped from
// its tier, counted, and ends the run there: never served.
//
// Writes stay off the request path: the caller copies a block once, into a
// buffer of NewBlock (recycled, so already mapped: block_buffers.h), and
// Spill and WriteShared queue that buffer, bounded, for one writer thread
// (header + CRC32C written in place, host put of the same buffer, disk
// spill, pipelined shared puts); when the queue is full the write is dropped
// and counted (dropped_writes). Reads
// block the caller: host and disk on memory and file I/O, the shared store up
// to its own timeouts (an unreachable store reads as empty and counts an
// error). Thread-safe.
//
// Each call to a tier is timed into its counters (block_store.h): a read is
// one GetPrefix (host and disk: one block, as the run is walked block by
// block; the shared store: the rest of the run, in its own batches), a write
// one Put (host and disk: one block; the shared store: the blocks the writer
// took from the queue at once). A host put's time leaves out the disk writes
// of the blocks it evicts, which count as disk writes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_buffers.h"
#include "engine/kv/block_store.h"

namespace ced {

struct KvTiersOptions {
  KvBlockLayout layout;
  int64_t host_bytes = 0;       // 0: no host tier
  std::string disk_dir;         // empty: no disk tier
  int64_t disk_bytes = 0;
  std::shared_ptr<KvBlockStore> shared;  // null: no shared tier
  int64_t write_queue_bytes = 64ll << 20;  // payload bytes waiting for the writer
};

class KvTiers {
 public:
  static absl::StatusOr<std::unique_ptr<KvTiers>> Create(const KvTiersOptions& options);
  // Finishes the queued writes, then stops the writer.
  ~KvTiers();
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  const KvBlockLayout& layout() const { return options_.layout; }
  // Host or disk present: evicted blocks are worth spilling.
  bool spills() const { return host_ != nullptr || disk_ != nullptr; }
  bool has_shared() const { return shared_ != nullptr; }

  // A buffer for one stored block: the caller copies the payload to
  // data() + kKvBlockHeaderBytes (layout().payload_bytes bytes) and hands the
  // buffer to Spill or WriteShared, which write the header.
  std::shared_ptr<std::string> NewBlock() { return buffers_->Get(); }
  // A NewBlock buffer for a spill when the write queue has room for one
  // now; null when it is full (the spill is counted as dropped, and the
  // caller skips the copy).
  std::shared_ptr<std::string> SpillBuffer();
  // The hot cache evicted block `hash`; `block` is a NewBlock buffer holding
  // a copy of its payload. Queued for the host tier (the disk tier when there
  // is no host tier). Never blocks on I/O.
  void Spill(const BlockHash& hash, std::shared_ptr<std::string> block);
  // The same from a bare payload (copied into a NewBlock buffer; one of
  // another size is ignored).
  void Spill(const BlockHash& hash, std::string_view payload);
  // Whether the shared store may lack `hash` (false once this process wrote
  // or read it there), so the caller copies only blocks worth writing.
  bool WantsShared(const BlockHash& hash) const;
  // A block whose K/V is final, for the shared store, as a NewBlock buffer
  // holding its payload. Never blocks on I/O.
  void WriteShared(const BlockHash& hash, std::shared_ptr<std::string> block);
  void WriteShared(const BlockHash& hash, std::string_view payload);
  // The block buffers (tests: how many were made, how many wait).
  const KvBlockBuffers& buffers() const { return *buffers_; }

  // A prefix of blocks a request found in the hot cache: those this process
  // knows are in the shared store are marked used there (KvBlockStore::Touch),
  // off the request path, by the writer thread. At most kMaxTouches hashes
  // wait at a time; more are dropped (a later request touches them again).
  void TouchShared(absl::Span<const BlockHash> hashes);
  static constexpr size_t kMaxTouches = 4096;

  // The payloads of the longest run hashes[0..k) held below the hot cache,
  // each checked. Blocks as the header says.
  std::vector<std::string> FetchPrefix(absl::Span<const BlockHash> hashes);
  // The same run, each checked payload handed to `take(i, payload)`
  // (layout().payload_bytes bytes, valid only during the call) as it is
  // read, without a copy of its own: host blocks are read where they lie,
  // disk blocks through one reused buffer. Stops where the run ends or
  // `take` returns false (that block is not counted as served). Returns how
  // many blocks `take` accepted.
  using PayloadSink = std::function<bool(size_t i, const uint8_t* payload)>;
  size_t FetchPrefixInto(absl::Span<const BlockHash> hashes, const PayloadSink& take);

  // Waits until every write queued so far has been done (tests, shutdown).
  void Flush();
  // host, disk, shared (those present), in that order.
  std::vector<KvTierStats> stats() const;

 private:
  explicit KvTiers(const KvTiersOptions& options) : options_(options) {}
  struct Hasher {
    size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ h.hi); }
  };
  struct Job {
    bool shared = false;  // else: a spill
    BlockHash hash;
    std::shared_ptr<std::string> block;  // header (written by the writer) + payload
  };
  // A NewBlock buffer holding `payload`; null when the size is wrong.
  std::shared_ptr<std::string> Wrap(std::string_view payload);
  bool Enqueue(Job job, KvBlockStore* target);
  // No room in the write queue for one more block.
  bool QueueFullLocked() const;
  // A NewBlock-sized buffer (header + payload).
  bool IsBlock(const std::shared_ptr<std::string>& block) const;
  void WriterLoop();
  // Checks a block read from `tier`; on failure drops it there and counts.
  bool Accept(KvBlockStore* tier, const BlockHash& hash, std::string_view stored);
  void MarkShared(const BlockHash& hash);
  // tier->Put, timed. Writer thread only.
  absl::Status TimedPut(KvBlockStore* tier, absl::Span<const KvStoredBlock> blocks);

  KvTiersOptions options_;
  std::unique_ptr<KvBlockStore> host_, disk_;
  std::shared_ptr<KvBlockStore> shared_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> queue_;
  std::vector<BlockHash> touches_;  // for the shared store's Touch
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  // Spills queued but not written yet (NewBlock buffers): their payloads are
  // still served to readers.
  std::unordered_map<BlockHash, std::shared_ptr<const std::string>, Hasher> pending_;
  std::unique_ptr<KvBlockBuffers> buffers_;
  // Blocks this process stored in or read from the shared store (bounded).
  std::unordered_set<BlockHash, Hasher> known_shared_;
  std::thread writer_;
  // Writer thread only: time spent in puts made inside the current one (a
  // host put's evictions written to disk).
  std::chrono::nanoseconds nested_put_{0};
};

}  // namespace ced
