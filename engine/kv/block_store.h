// A store of global K/V blocks below the prefix cache (DESIGN.md §1.6, §2 "KV
// tiers"): the seam behind which host memory, local disk and shared stores
// (Redis; later Mooncake, NIXL) live.
//
// A stored block is a fixed 64-byte header followed by the block's bytes
// exactly as the cache holds them ([source slot][K|V][block_size][row_bytes]
// in the cache format): nothing wider, no local K/V. The header names what
// the bytes are, and every read checks it against what the reader expects:
//
//   offset size
//        0    8  magic "CEDKVBLK"
//        8    2  format version (1)
//       10    1  KV cache format (kernels::KvFormat)
//       11    1  0
//       12    4  tokens per block
//       16    8  payload bytes
//       24   16  model fingerprint: the hash chain's root h_0 (model, format, block size)
//       40   16  the block's own hash h_i (its key)
//       56    4  CRC32C of bytes [0, 56) and of the payload
//       60    4  0
//
// (little-endian; the zero bytes must be zero). A block that fails any check is dropped and counted by
// reason, never served.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv/prefix_cache.h"
#include "engine/model/config.h"  // KvFormat

namespace ced {

inline constexpr size_t kKvBlockHeaderBytes = 64;
inline constexpr uint16_t kKvBlockVersion = 1;

// What every block of one engine is.
struct KvBlockLayout {
  BlockHash root;                 // h_0: names the model, the format and the block size
  KvFormat format = KvFormat::kF32;
  int block_size = 0;             // tokens
  size_t payload_bytes = 0;       // the cache's block bytes
};

// Why a stored block was not served.
enum class KvBlockReject : int {
  kNone = 0,
  kMagic,      // not a block, or another format version
  kModel,      // another model (fingerprint)
  kFormat,     // another KV format or block size
  kLength,     // truncated, or another payload size
  kKey,        // stored under a key that is not its hash
  kChecksum,   // bytes changed at rest or on the way
};
inline constexpr int kKvBlockRejectReasons = 7;
const char* KvBlockRejectName(KvBlockReject reason);

// Header + payload (`layout.payload_bytes` bytes at `payload`).
std::string EncodeKvBlock(const KvBlockLayout& layout, const BlockHash& hash,
                          const uint8_t* payload);
// Encodes in place: writes the header of block `hash` into
// block[0, kKvBlockHeaderBytes), the payload already lying after it.
void SealKvBlock(const KvBlockLayout& layout, const BlockHash& hash, uint8_t* block);
// kNone when `stored` is a valid block `hash` of `layout`.
KvBlockReject CheckKvBlock(const KvBlockLayout& layout, const BlockHash& hash,
                           std::string_view stored);

// Bucket upper bounds, in seconds, of the tiers' call durations
// (ced_kv_tier_read_seconds, ced_kv_tier_write_seconds): 10 us .. 10 s in a
// 1-2.5-5 series; one more bucket (+Inf) holds the rest.
inline constexpr std::array<double, 19> kKvTierLatencyBounds = {
    1e-5,  2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01,
    0.025, 0.05,   0.1,  0.25, 0.5,    1,    2.5,  5,      10};
inline constexpr size_t kKvTierLatencyBuckets = kKvTierLatencyBounds.size() + 1;

// Durations of one kind of tier call, bucketed by kKvTierLatencyBounds
// (a duration lands in the first bucket whose bound is >= it). Lock-free.
struct KvTierLatency {
  std::array<std::atomic<int64_t>, kKvTierLatencyBuckets> count{};  // per bucket, not cumulative
  std::atomic<int64_t> sum_ns{0};
  void Observe(std::chrono::nanoseconds took);
};

// A copy of a KvTierLatency: every observation counted in `count` is in
// `sum_ns` (the sum is added first and read last).
struct KvTierLatencyStats {
  std::array<int64_t, kKvTierLatencyBuckets> count{};
  int64_t sum_ns = 0;
};

// Counters of one tier; the tiers (kv_tiers.h) and the store both update
// them. Lock-free, monotonic.
struct KvTierCounters {
  std::atomic<int64_t> hit_blocks{0};      // blocks served from this tier
  std::atomic<int64_t> miss_blocks{0};     // blocks asked of this tier and not served
  std::atomic<int64_t> read_bytes{0};      // stored bytes read (served or rejected)
  std::atomic<int64_t> written_bytes{0};   // stored bytes written
  std::atomic<int64_t> written_blocks{0};
  std::atomic<int64_t> errors{0};          // I/O or store failures (each degraded to a miss)
  std::atomic<int64_t> dropped_writes{0};  // writes dropped: queue full, or no room
  std::array<std::atomic<int64_t>, kKvBlockRejectReasons> rejected{};
  // Timed by the tiers (kv_tiers.h), failed calls included: one read per
  // GetPrefix call, one write per Put call.
  KvTierLatency read_latency, write_latency;
};

// A copy of the counters, plus what the tier holds now.
struct KvTierStats {
  std::string tier;
  int64_t hit_blocks = 0, miss_blocks = 0, read_bytes = 0, written_bytes = 0,
          written_blocks = 0, errors = 0, dropped_writes = 0;
  std::map<std::string, int64_t> rejected;  // by KvBlockRejectName
  int64_t resident_blocks = -1, resident_bytes = -1;  // -1: unknown (a shared store)
  KvTierLatencyStats read_latency, write_latency;
};

// An encoded block (header + payload) under its hash.
struct KvStoredBlock {
  BlockHash hash;
  std::shared_ptr<const std::string> bytes;
};

// One tier. Keys are (root, hash): `root` is the model fingerprint every
// block of a caller shares, and a store may use it to keep models apart.
// Implementations are thread-safe; none blocks longer than its own I/O
// timeouts, and none returns an error for a miss: an unreachable store
// counts an error and behaves as empty.
class KvBlockStore {
 public:
  virtual ~KvBlockStore() = default;
  virtual std::string_view name() const = 0;
  // Stores the blocks. A local tier (host, disk) keeps a block it already
  // holds under the same hash and only marks it used: the hash chain names
  // the tokens and the model, so the bytes are the same (a session's prefix
  // is evicted from the hot cache again each turn; rewriting it cost a disk
  // write per block). A shared store may replace it.
  // May block for I/O: callers run it off the request path. OK when every
  // block was stored.
  virtual absl::Status Put(const BlockHash& root, absl::Span<const KvStoredBlock> blocks) = 0;
  // The stored bytes of hashes[0], hashes[1], ... up to the first one not
  // stored (unchecked: the caller checks each).
  virtual std::vector<std::string> GetPrefix(const BlockHash& root,
                                             absl::Span<const BlockHash> hashes) = 0;
  // Reads the same run as GetPrefix, handing each block's stored bytes to
  // `take(i, bytes)` (unchecked; valid only during the call) instead of
  // returning copies; stops at the first block not stored or when `take`
  // returns false. Returns how many blocks `take` was given. The default
  // runs GetPrefix; the host and disk tiers read without a copy into fresh
  // memory (whose page faults made a read of host memory run at ~0.4 GB/s).
  using BlockVisitor = std::function<bool(size_t i, std::string_view stored)>;
  virtual size_t VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                             const BlockVisitor& take);
  // How many of hashes[0..] in a row are stored, without reading them.
  virtual int Contains(const BlockHash& root, absl::Span<const BlockHash> hashes) = 0;
  // Drops a block (one that failed its checks).
  virtual void Erase(const BlockHash& root, const BlockHash& hash) = 0;
  // Marks the stored ones of `hashes` as used now, without reading them: a
  // store that evicts its least recently used blocks would otherwise evict
  // the head of a prefix that is served from the hot cache, which makes the
  // whole prefix unreadable (a read stops at the first missing block).
  // Default: nothing (stores that do not evict by recency). May block for I/O.
  virtual void Touch(const BlockHash& root, absl::Span<const BlockHash> hashes) {
    (void)root;
    (void)hashes;
  }
  virtual int64_t resident_blocks() const { return -1; }
  virtual int64_t resident_bytes() const { return -1; }

  KvTierCounters& counters() { return counters_; }
  KvTierStats stats() const;

 protected:
  KvTierCounters counters_;
};

}  // namespace ced
