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

#include <cstdint>
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
#include "engine/kv/kv_cache.h"
#include "engine/kv/sequence_state.h"
#include "engine/model/weights.h"

namespace ced {

enum class ReplayMode { kBounded, kExact };
const char* ReplayModeName(ReplayMode mode);
bool ParseReplayMode(std::string_view name, ReplayMode* out);

struct EngineOptions {
  std::string model_dir;
  WeightSet weights = WeightSet::kFull;
  std::string device = "cpu";
  std::optional<KvFormat> kv_format;  // overrides config.kv_cache_dtype
  int64_t kv_cache_bytes = 256ll << 20;  // global blocks budget
  int block_size = 16;                   // tokens per global block
  int max_sequences = 64;                // local rings (sequences alive at once)
};

using SeqId = int64_t;

struct PrefillOptions {
  ReplayMode replay = ReplayMode::kBounded;
  int replay_window = 0;       // > 0 overrides R (at least max(W, 1))
  bool defer_replay = false;   // stop after the encoder; keep h_E for [s, N)
  int chunk_tokens = 256;
  // Called after each chunk's global K/V (all layers) for [begin, end) is final.
  std::function<void(int begin, int end)> on_chunk;
  // Polled between chunks; true aborts with CANCELLED.
  std::function<bool()> cancelled;
};

struct PrefillResult {
  int num_tokens = 0;
  int replay_start = 0;
  bool replay_done = false;
  std::vector<float> logits;  // position N-1, when replay_done
};

struct DecodeInput {
  SeqId seq = 0;
  int32_t token = 0;  // the token at the sequence's next position
};

struct CacheStats {
  int global_blocks_total = 0, global_blocks_used = 0;
  int local_slots_total = 0, local_slots_used = 0;
  int sequences = 0;
  int block_size = 0;
  size_t block_bytes = 0;
};

// A writable/readable byte range of cache memory (backend memory).
struct ByteRegion {
  uint8_t* data = nullptr;
  size_t size = 0;
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
  absl::Status ReleaseSequence(SeqId seq);
  bool HasSequence(SeqId seq) const;
  int NumTokens(SeqId seq) const;  // positions in the cache (0 if unknown)

  absl::StatusOr<PrefillResult> Prefill(SeqId seq, absl::Span<const int32_t> tokens,
                                        const PrefillOptions& options);
  // Runs a deferred replay (after Prefill with defer_replay or ImportTail of
  // an h_E tail); returns the logits of position N-1.
  absl::StatusOr<std::vector<float>> Replay(SeqId seq);
  // One step for each input (distinct sequences): returns logits [B, V].
  absl::StatusOr<std::vector<float>> Decode(absl::Span<const DecodeInput> inputs);

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
  void Logits(const float* x, int rows, float* out);
  void StoreGlobal(Batch& batch, int slot, const float* k, const float* v);

  ModelConfig config_;
  WeightSet set_ = WeightSet::kFull;
  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> cache_;
  // Insertions and erasures hold seq_mu_ exclusively; GlobalRegions and the
  // other cross-thread readers hold it shared.
  mutable std::shared_mutex seq_mu_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> sequences_;
  SeqId next_id_ = 1;
  struct DeviceWeights;
  std::unique_ptr<DeviceWeights> dw_;
};

}  // namespace ced
