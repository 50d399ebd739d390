// The CED engine (DESIGN.md §1.3-1.5): one library behind both workers.
//
// An Engine owns a backend, the model weights it was asked to hold and a
// paged KV cache. It runs the full forward (the reference), chunked CED
// prefill with bounded or exact replay (or stops before the replay and hands
// out h_E), the deferred replay, and batched decode steps.
//
// Thread-safety: every method except GlobalRegions, HasSequence and
// cache_stats must be serialized by the owner (one thread, or a lock).
// GlobalRegions may be called from any thread at any time (the KV transport
// does, to land K/V); its spans stay valid until the sequence is released and
// may be read (export) or written (import) concurrently with compute on other
// sequences.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/kv/block_store.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/sequence_state.h"
#include "engine/model/weights.h"

namespace ced {

class KvTiers;

enum class ReplayMode { kBounded, kExact };
const char* ReplayModeName(ReplayMode mode);
bool ParseReplayMode(std::string_view name, ReplayMode* out);

struct EngineOptions {
  std::string model_dir;
  WeightSet weights = WeightSet::kFull;
  std::string device = "cpu";
  std::optional<KvFormat> kv_format;     // overrides config.kv_cache_dtype
  int64_t kv_cache_bytes = 256ll << 20;  // global blocks budget
  int block_size = 16;                   // tokens per global block
  int max_sequences = 64;                // local rings (sequences alive at once)
  // Prefix cache (DESIGN.md §1.6): full global blocks are kept by hash chain
  // and reused by later prompts that start with the same tokens.
  bool prefix_cache = true;
  // Held sequences (§1.6: "a hit that ends where a held sequence ends, with
  // its local rings still in memory, may continue from those rings"): up to
  // this many finished sequences passed to HoldSequence keep their blocks and
  // local rings; a later prompt that extends one continues its encoder from
  // the rings instead of rebuilding them. Held sequences give way, least
  // recently held first, whenever a new sequence needs their blocks or ring
  // slot. 0: HoldSequence releases (needs the prefix cache).
  int max_held_sequences = 0;
  // Names the model in block identities (h_0 hashes it with the cache format
  // and block size); empty: the model's config.json text.
  std::string model_identity;
  // KV tiers below the prefix cache (engine/kv/kv_tiers.h), all off by
  // default: blocks evicted from the cache go to host memory, from there to
  // disk; sequences' blocks go to the shared store once final (as they are
  // published, while the sequence runs); a prompt's cached prefix continues
  // in them (loaded, not recomputed).
  int64_t kv_host_bytes = 0;
  std::string kv_disk_dir;  // one directory per engine
  int64_t kv_disk_bytes = 0;
  std::shared_ptr<KvBlockStore> kv_shared_store;
  int64_t kv_tier_queue_bytes = 64ll << 20;  // writes waiting; more are dropped
};

using SeqId = int64_t;

struct PrefillOptions {
  ReplayMode replay = ReplayMode::kBounded;
  int replay_window = 0;      // > 0 overrides R (at least max(W, 1))
  bool defer_replay = false;  // stop after the encoder; keep h_E for [s, N)
  int chunk_tokens = 256;
  // Called after each chunk's global K/V (all layers) for [begin, end) is final;
  // a resumed prefill first reports its cached prefix [0, P).
  std::function<void(int begin, int end)> on_chunk;
  // Polled between chunks; true aborts with CANCELLED.
  std::function<bool()> cancelled;
};

struct PrefillResult {
  int num_tokens = 0;
  int replay_start = 0;
  int cached_tokens = 0;  // P: prompt tokens whose global K/V came from the prefix cache
  int computed_from = 0;  // a: the first position the encoder ran over
  bool replay_done = false;
  std::vector<float> logits;  // position N-1, when replay_done
};

struct DecodeInput {
  SeqId seq = 0;
  int32_t token = 0;  // the token at the sequence's next position
};

struct CacheStats {
  // used: referenced by live sequences; cached blocks nobody references are
  // not used (an allocation reclaims them, least recently used first).
  int global_blocks_total = 0, global_blocks_used = 0;
  int cached_blocks = 0;     // blocks held under a hash (referenced or not)
  int evictable_blocks = 0;  // cached and unreferenced
  int64_t evicted_blocks_total = 0;
  int local_slots_total = 0, local_slots_used = 0;  // used: by running sequences
  int sequences = 0;                                // running (not held)
  // Held sequences (EngineOptions::max_held_sequences), the blocks only they
  // reference (counted in global_blocks_used, reclaimed on demand), and the
  // prompts that continued one.
  int held_sequences = 0, held_blocks = 0;
  int64_t held_continued_total = 0;
  int block_size = 0;
  size_t block_bytes = 0;
  // Blocks a new sequence can have now: free, cached and unreferenced, or
  // referenced only by held sequences (which give way to it).
  int available_blocks() const { return global_blocks_total - global_blocks_used + held_blocks; }
};

// A writable/readable byte range of cache memory (backend memory).
struct ByteRegion {
  uint8_t* data = nullptr;
  size_t size = 0;
};

// Blocks of a prompt's prefix read from the KV tiers ahead of
// CreateSequenceForPrompt (Engine::PrefetchFromTiers): payloads[i] holds the
// block of chain position first_block + i.
struct TierPrefetch {
  size_t first_block = 0;
  std::vector<std::string> payloads;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // Shares already-loaded weights (tests, benches): no disk access.
  static absl::StatusOr<std::unique_ptr<Engine>> CreateWithWeights(
      const EngineOptions& options, std::shared_ptr<const ModelWeights> weights);
  ~Engine();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  KvFormat kv_format() const { return config_.kv_cache_dtype; }
  Backend& backend() { return *backend_; }

  // Reference: logits [N, V] of every position, lo = 0, f32, no cache.
  absl::StatusOr<std::vector<float>> FullForward(absl::Span<const int32_t> tokens);

  // Reserves global blocks for `capacity_tokens` positions and a local ring.
  // RESOURCE_EXHAUSTED when the cache has no room.
  absl::StatusOr<SeqId> CreateSequence(int capacity_tokens);
  // The same for a prompt: the longest cached prefix of `prompt` (full blocks,
  // at most N - 1 tokens, at most `max_cached_tokens` when >= 0) is shared by
  // reference, and Prefill then computes only what DESIGN.md §1.6 says.
  // *cached_tokens (may be null) receives P.
  // `prefetched` (may be null): blocks PrefetchFromTiers read beforehand (an
  // empty one: the hot cache only, no tier is read); without it the blocks
  // below the hot cache are read here, blocking on the tiers' I/O (a Redis
  // round trip) under whatever lock the caller holds.
  absl::StatusOr<SeqId> CreateSequenceForPrompt(absl::Span<const int32_t> prompt,
                                                int capacity_tokens, int* cached_tokens,
                                                int max_cached_tokens = -1,
                                                const TierPrefetch* prefetched = nullptr);
  // Reads from the KV tiers (host, disk, shared store) the blocks of
  // `prompt`'s cacheable prefix that follow what the hot cache holds now, so
  // that a caller serialising engine calls can do the I/O before taking its
  // lock. Empty without tiers. Thread-safe; blocks on the tiers' I/O.
  TierPrefetch PrefetchFromTiers(absl::Span<const int32_t> prompt,
                                 int max_cached_tokens = -1) const;
  bool has_kv_tiers() const { return tiers_ != nullptr; }
  // P for `prompt` now, without reserving anything (reports, routing).
  int CachedPrefixTokens(absl::Span<const int32_t> prompt) const;
  // P of a sequence made by CreateSequenceForPrompt (0 otherwise).
  int SequenceCachedTokens(SeqId seq) const;
  // Tells the engine which tokens fill positions [0, prompt.size()) of a
  // sequence whose K/V arrived from elsewhere (ImportTail), so that its full
  // blocks join the prefix cache. Call after that K/V has landed.
  absl::Status SetPromptTokens(SeqId seq, absl::Span<const int32_t> prompt);
  // The full blocks of positions [0, tokens) of `seq` are computed by a peer
  // (the prefill worker whose K/V arrives), which writes them to the shared
  // store itself: this engine does not write them again (each block is
  // written by the worker that computed it; DESIGN.md §2, KV tiers).
  absl::Status LeaveSharedWritesToPeer(SeqId seq, int tokens);
  // Drops every cached block nobody references; returns how many.
  int EvictCachedBlocks();
  // The operator's flush (a worker's FlushCache): the same, but with host or
  // disk tiers in batches of half their write queue, each batch's spills
  // written before the next is evicted, so that none is dropped (a single
  // eviction of a cache larger than the queue drops the rest). Returns how
  // many blocks it evicted: at most those cached when it began.
  int FlushPrefixCache();
  // Routing reports (DESIGN.md 1.6). May be called from any thread. h_0 of
  // this engine's block chain; whether the prefix cache is on; the cache's
  // publish/evict event log (PrefixCache::EnableEventLog / EventsSince).
  const BlockHash& prefix_root_hash() const { return root_hash_; }
  bool prefix_cache_enabled() const { return prefix_enabled_; }
  void EnablePrefixCacheEventLog(size_t capacity) { prefix_->EnableEventLog(capacity); }
  PrefixCacheEventLog PrefixCacheEventsSince(uint64_t from_seq, size_t max_events) const {
    return prefix_->EventsSince(from_seq, max_events);
  }
  absl::Status ReleaseSequence(SeqId seq);
  // Releases `seq` like ReleaseSequence, but keeps it, with its blocks and
  // local rings, for a later prompt that extends it (see
  // EngineOptions::max_held_sequences): CreateSequenceForPrompt then takes it
  // over (cached tokens = its positions, not rounded down to a block) and
  // Prefill runs the encoder on from its rings. Only a sequence prefilled by
  // this engine (whose encoder rings are its own) is held; any other, or any
  // with holding off, is released. The id is invalid afterwards either way.
  absl::Status HoldSequence(SeqId seq);
  // Releases every held sequence; returns how many.
  int DropHeldSequences();
  // KV tiers: waits until the writes queued so far are done (tests); the
  // tiers' counters (host, disk, shared: those configured). Any thread.
  void FlushKvTiers();
  std::vector<KvTierStats> kv_tier_stats() const;
  bool HasSequence(SeqId seq) const;
  int NumTokens(SeqId seq) const;  // positions in the cache (0 if unknown)

  absl::StatusOr<PrefillResult> Prefill(SeqId seq, absl::Span<const int32_t> tokens,
                                        const PrefillOptions& options);
  // Runs a deferred replay (after Prefill with defer_replay or ImportTail of
  // an h_E tail); returns the logits of position N-1.
  absl::StatusOr<std::vector<float>> Replay(SeqId seq);
  // One step for each input (distinct sequences): returns logits [B, V].
  absl::StatusOr<std::vector<float>> Decode(absl::Span<const DecodeInput> inputs);

  // Runs the model once on a throwaway sequence, so that the first request
  // does not pay for what the backend does on first use (packing every
  // weight for the kernels in use, scratch buffers, first touch of memory:
  // about 0.55 s of a first 12-token request on `small`, CPU): a prefill of
  // `prompt_tokens` positions (capped by the context) in chunks of
  // `chunk_tokens`, the replay when this engine holds the decoder, then
  // `decode_steps` decode steps (decoder held). Nothing of it is cached,
  // held or stored; the sequence is released. Call before serving.
  absl::Status WarmUp(int prompt_tokens, int chunk_tokens, int decode_steps);

  // Cache memory of global K/V for positions [begin, end) in canonical wire
  // order (per block: source slot, K then V, rows of the range). Adjacent
  // regions are merged; full blocks come out as one region each.
  absl::StatusOr<std::vector<ByteRegion>> GlobalRegions(SeqId seq, int begin, int end) const;
  static size_t GlobalRangeBytes(const ModelConfig& c, int begin, int end);
  absl::StatusOr<SequenceTail> ExportTail(SeqId seq, int32_t first_token) const;
  // Installs a tail after every global range [0, N) has landed.
  absl::Status ImportTail(SeqId seq, const SequenceTail& tail);

  CacheStats cache_stats() const;
  // Replay start s for a prompt of n tokens under these options.
  int ReplayStart(int n, ReplayMode mode, int replay_window) const;
  // First position a resumed prefill runs the encoder from, for a prompt of
  // n tokens with p cached: a = max(0, min(p, n - R_d) - R_e) (§1.6).
  int ResumeStart(int n, int p, ReplayMode mode, int replay_window) const;

 private:
  struct Sequence;
  struct Batch;
  Engine() = default;
  absl::Status Init(const EngineOptions& options, std::shared_ptr<const ModelWeights> weights);
  absl::StatusOr<Sequence*> Find(SeqId seq);
  absl::StatusOr<const Sequence*> Find(SeqId seq) const;
  absl::Status CheckTokens(absl::Span<const int32_t> tokens) const;
  // Runs layers [l0, l1) on x [rows, d] for the batch's segments.
  void RunLayers(Batch& batch, int l0, int l1, float* x);
  void ProjectDecoderGlobal(Batch& batch, const float* h_e);
  // x [rows, d] += the MoE FFN of `layer` applied to b = rmsnorm(x, ffn_norm)
  // (engine/runtime/moe.cc).
  void MoeFfn(int layer, const float* b, int rows, float* x);
  void Logits(const float* x, int rows, float* out);
  void StoreGlobal(Batch& batch, int slot, const float* k, const float* v);
  // Publishes the sequence's full blocks whose tokens are known and whose
  // K/V is final (positions < num_tokens), and queues them for the shared
  // store (WriteBehind) while the sequence is still running.
  void PublishBlocks(Sequence* seq);
  // KV tiers (kv_tiers_hooks.cc): creates them; continues `shared` (blocks
  // acquired for hashes[0..]) with blocks loaded from the tiers, published;
  // queues the sequence's published blocks not offered yet for the shared
  // store (from PublishBlocks, and at release).
  absl::Status InitKvTiers(const EngineOptions& options);
  void LoadFromTiers(absl::Span<const BlockHash> hashes, std::vector<int>* shared,
                     const TierPrefetch* prefetched);
  // The chain hashes of `prompt`'s cacheable full blocks (at most N - 1
  // tokens, at most max_cached_tokens when >= 0).
  std::vector<BlockHash> CacheableHashes(absl::Span<const int32_t> prompt,
                                         int max_cached_tokens) const;
  void WriteBehind(Sequence* seq);
  // Held sequences; each takes seq_mu_ held exclusively. Release frees the
  // sequence's blocks and ring; DropOldestHeld releases the least recently
  // held one (false: none); BestHeld finds the held sequence that `prompt`
  // extends furthest (at most N - 1 and max_cached_tokens positions; end()
  // if none); TakeHeld re-keys it, when it holds at least `min_tokens`
  // positions, as a new running sequence of `capacity_tokens`, or returns 0.
  absl::Status ReleaseLocked(SeqId id);
  bool DropOldestHeld();
  std::deque<SeqId>::iterator BestHeld(absl::Span<const int32_t> prompt, int max_cached_tokens);
  SeqId TakeHeld(absl::Span<const int32_t> prompt, int capacity_tokens, int max_cached_tokens,
                 int min_tokens);

  ModelConfig config_;
  WeightSet set_ = WeightSet::kFull;
  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<PrefixCache> prefix_;
  bool prefix_enabled_ = true;
  BlockHash root_hash_;
  std::unique_ptr<KvTiers> tiers_;  // null: no tiers
  int tier_flush_batch_ = 1;        // FlushPrefixCache's blocks per batch
  // Insertions and erasures hold seq_mu_ exclusively; GlobalRegions and the
  // other cross-thread readers hold it shared.
  mutable std::shared_mutex seq_mu_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> sequences_;
  SeqId next_id_ = 1;
  int max_held_ = 0;
  std::deque<SeqId> held_;  // least recently held first; keys < 0
  SeqId next_held_id_ = -1;
  std::atomic<int64_t> held_continued_{0};
  struct DeviceWeights;
  std::unique_ptr<DeviceWeights> dw_;
};

}  // namespace ced
