#include "engine/runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kv/kv_tiers.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

const char* ReplayModeName(ReplayMode mode) {
  return mode == ReplayMode::kExact ? "exact" : "bounded";
}

bool ParseReplayMode(std::string_view name, ReplayMode* out) {
  if (name == "bounded")
    *out = ReplayMode::kBounded;
  else if (name == "exact")
    *out = ReplayMode::kExact;
  else
    return false;
  return true;
}

Engine::~Engine() {
  sequences_.clear();
  prefix_.reset();
  cache_.reset();
  tiers_.reset();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights,
                   LoadModelWeights(options.model_dir, options.weights));
  return CreateWithWeights(options, std::shared_ptr<const ModelWeights>(std::move(weights)));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::CreateWithWeights(
    const EngineOptions& options, std::shared_ptr<const ModelWeights> weights) {
  std::unique_ptr<Engine> engine(new Engine());
  RETURN_IF_ERROR(engine->Init(options, std::move(weights)));
  return engine;
}

absl::Status Engine::Init(const EngineOptions& options,
                          std::shared_ptr<const ModelWeights> weights) {
  if (weights == nullptr) return absl::InvalidArgumentError("engine: no weights");
  weights_ = std::move(weights);
  config_ = weights_->config();
  set_ = weights_->set();
  if (options.kv_format.has_value()) config_.kv_cache_dtype = *options.kv_format;
  RETURN_IF_ERROR(ValidateConfig(config_));
  if (options.block_size <= 0 || options.block_size > 4096) {
    return absl::InvalidArgumentError("engine: block_size must be in [1, 4096]");
  }
  if (options.max_sequences <= 0) {
    return absl::InvalidArgumentError("engine: max_sequences must be positive");
  }
  if (options.max_held_sequences < 0) {
    return absl::InvalidArgumentError("engine: max_held_sequences must be >= 0");
  }
  ASSIGN_OR_RETURN(backend_, CreateBackend(options.device));

  auto upload = [&](const Tensor& t, const char* name) -> absl::StatusOr<const float*> {
    if (!t.loaded()) return static_cast<const float*>(nullptr);
    auto r = backend_->UploadWeights(t.data, static_cast<size_t>(t.rows) * t.cols);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("uploading ", name, ": ", r.status().message()));
    }
    return r;
  };
  dw_ = std::make_unique<DeviceWeights>();
  ASSIGN_OR_RETURN(dw_->embed, upload(weights_->embed, "embed"));
  ASSIGN_OR_RETURN(dw_->encoder_norm, upload(weights_->encoder_norm, "encoder_norm"));
  ASSIGN_OR_RETURN(dw_->final_norm, upload(weights_->final_norm, "final_norm"));
  ASSIGN_OR_RETURN(dw_->lm_head, upload(weights_->lm_head, "lm_head"));
  dw_->layers.resize(config_.num_layers);
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = weights_->layers[l];
    auto& o = dw_->layers[l];
    ASSIGN_OR_RETURN(o.attn_norm, upload(w.attn_norm, "attn_norm"));
    ASSIGN_OR_RETURN(o.wq, upload(w.wq, "wq"));
    ASSIGN_OR_RETURN(o.local_k, upload(w.local_k, "local_k"));
    ASSIGN_OR_RETURN(o.local_v, upload(w.local_v, "local_v"));
    ASSIGN_OR_RETURN(o.global_k, upload(w.global_k, "global_k"));
    ASSIGN_OR_RETURN(o.global_v, upload(w.global_v, "global_v"));
    ASSIGN_OR_RETURN(o.wo, upload(w.wo, "wo"));
    ASSIGN_OR_RETURN(o.ffn_norm, upload(w.ffn_norm, "ffn_norm"));
    ASSIGN_OR_RETURN(o.w_gate, upload(w.w_gate, "w_gate"));
    ASSIGN_OR_RETURN(o.w_up, upload(w.w_up, "w_up"));
    ASSIGN_OR_RETURN(o.w_down, upload(w.w_down, "w_down"));
    // MoE layers (§1.7): router, routed experts, shared experts.
    ASSIGN_OR_RETURN(o.router, upload(w.router, "router"));
    o.experts.resize(w.experts.size());
    for (size_t e = 0; e < w.experts.size(); ++e) {
      ASSIGN_OR_RETURN(o.experts[e].w_gate, upload(w.experts[e].w_gate, "experts.w_gate"));
      ASSIGN_OR_RETURN(o.experts[e].w_up, upload(w.experts[e].w_up, "experts.w_up"));
      ASSIGN_OR_RETURN(o.experts[e].w_down, upload(w.experts[e].w_down, "experts.w_down"));
    }
    ASSIGN_OR_RETURN(o.shared.w_gate, upload(w.shared.w_gate, "shared.w_gate"));
    ASSIGN_OR_RETURN(o.shared.w_up, upload(w.shared.w_up, "shared.w_up"));
    ASSIGN_OR_RETURN(o.shared.w_down, upload(w.shared.w_down, "shared.w_down"));
  }

  KvCacheOptions co;
  co.format = config_.kv_cache_dtype;
  co.kv_dim = config_.KvDim();
  co.num_source_layers = config_.NumGlobalSourceLayers();
  co.num_layers = config_.num_layers;
  co.window = config_.sliding_window;
  co.block_size = options.block_size;
  co.num_local_slots = options.max_sequences;
  const size_t block_bytes = static_cast<size_t>(co.num_source_layers) * 2 * co.block_size *
                             kernels::KvRowBytes(co.format, co.kv_dim);
  co.num_blocks = static_cast<int>(
      std::min<int64_t>(1 << 30, std::max<int64_t>(1, options.kv_cache_bytes / block_bytes)));
  ASSIGN_OR_RETURN(cache_, KvCache::Create(co, backend_.get()));
  prefix_ = std::make_unique<PrefixCache>(&cache_->global_blocks());
  prefix_enabled_ = options.prefix_cache;
  max_held_ = prefix_enabled_ ? options.max_held_sequences : 0;
  root_hash_ =
      RootBlockHash(options.model_identity.empty() ? ConfigToJson(config_) : options.model_identity,
                    co.block_size);
  RETURN_IF_ERROR(InitKvTiers(options));
  return absl::OkStatus();
}

absl::StatusOr<Engine::Sequence*> Engine::Find(SeqId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq, " does not exist"));
  }
  return it->second.get();
}

absl::StatusOr<const Engine::Sequence*> Engine::Find(SeqId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq, " does not exist"));
  }
  return it->second.get();
}

bool Engine::HasSequence(SeqId seq) const {
  std::shared_lock<std::shared_mutex> lock(seq_mu_);
  return sequences_.count(seq) > 0;
}

int Engine::NumTokens(SeqId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second->num_tokens;
}

absl::Status Engine::CheckTokens(absl::Span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " at index ", i,
                                                     " is outside [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SeqId> Engine::CreateSequence(int capacity_tokens) {
  return CreateSequenceForPrompt({}, capacity_tokens, nullptr);  // no prompt: nothing shared
}

std::vector<BlockHash> Engine::CacheableHashes(absl::Span<const int32_t> prompt,
                                               int max_cached_tokens) const {
  const int bs = cache_->options().block_size;
  const int n = static_cast<int>(prompt.size());
  // At most N - 1 tokens: the last prompt position is always computed (its
  // logits give the first token).
  int max_blocks = prefix_enabled_ && n > 0 ? (n - 1) / bs : 0;
  if (max_cached_tokens >= 0) max_blocks = std::min(max_blocks, max_cached_tokens / bs);
  return max_blocks > 0 ? ChainBlockHashes(root_hash_, bs, prompt.first(max_blocks * bs))
                        : std::vector<BlockHash>();
}

TierPrefetch Engine::PrefetchFromTiers(absl::Span<const int32_t> prompt,
                                       int max_cached_tokens) const {
  TierPrefetch out;
  if (tiers_ == nullptr) return out;
  const std::vector<BlockHash> hashes = CacheableHashes(prompt, max_cached_tokens);
  out.first_block = static_cast<size_t>(prefix_->Lookup(hashes));
  if (out.first_block < hashes.size()) {
    out.payloads = tiers_->FetchPrefix(absl::MakeConstSpan(hashes).subspan(out.first_block));
  }
  return out;
}

absl::StatusOr<SeqId> Engine::CreateSequenceForPrompt(absl::Span<const int32_t> prompt,
                                                      int capacity_tokens, int* cached_tokens,
                                                      int max_cached_tokens,
                                                      const TierPrefetch* prefetched) {
  if (cached_tokens != nullptr) *cached_tokens = 0;
  if (capacity_tokens <= 0 || capacity_tokens > config_.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence capacity ", capacity_tokens,
                     " is outside [1, max_position=", config_.max_position, "]"));
  }
  const int n = static_cast<int>(prompt.size());
  if (n > capacity_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt of ", n, " tokens exceeds the ", capacity_tokens, " reserved"));
  }
  RETURN_IF_ERROR(CheckTokens(prompt));
  const int bs = cache_->options().block_size;
  const std::vector<BlockHash> hashes = CacheableHashes(prompt, max_cached_tokens);
  // A held sequence the prompt extends is taken over unless cached blocks
  // (here or in the tiers) reach further than its positions.
  TierPrefetch read_here;
  if (max_held_ > 0) {
    std::unique_lock<std::shared_mutex> lock(seq_mu_);
    if (BestHeld(prompt, max_cached_tokens) != held_.end()) {
      size_t reach = static_cast<size_t>(prefix_->Lookup(hashes));
      if (tiers_ != nullptr && reach < hashes.size()) {
        if (prefetched == nullptr) {
          lock.unlock();  // the tiers' I/O, once: the block path below uses it too
          read_here = PrefetchFromTiers(prompt, max_cached_tokens);
          prefetched = &read_here;
          lock.lock();
        }
        reach = std::max(reach, prefetched->first_block + prefetched->payloads.size());
      }
      const SeqId held =
          TakeHeld(prompt, capacity_tokens, max_cached_tokens, static_cast<int>(reach) * bs);
      if (held != 0) {
        if (cached_tokens != nullptr) *cached_tokens = sequences_.at(held)->cached_tokens;
        return held;
      }
    }
  }
  std::vector<int> shared = prefix_->Acquire(hashes, static_cast<int>(hashes.size()));
  if (tiers_ != nullptr) LoadFromTiers(hashes, &shared, prefetched);
  absl::StatusOr<SeqId> created = [&]() -> absl::StatusOr<SeqId> {
    // The shared blocks stay referenced while the rest is allocated.
    const int total = (capacity_tokens + bs - 1) / bs;
    auto rest = prefix_->Allocate(total - static_cast<int>(shared.size()));
    // Held sequences give way to running ones (only then is the lock taken
    // around the allocation).
    std::unique_lock<std::shared_mutex> lock(seq_mu_, std::defer_lock);
    if (!rest.ok() && max_held_ > 0) {
      lock.lock();
      while (!rest.ok() && DropOldestHeld()) {
        rest = prefix_->Allocate(total - static_cast<int>(shared.size()));
      }
    }
    if (!rest.ok()) return rest.status();
    auto seq = std::make_unique<Sequence>();
    seq->id = next_id_++;
    seq->capacity = capacity_tokens;
    seq->blocks = shared;
    seq->blocks.insert(seq->blocks.end(), rest->begin(), rest->end());
    if (config_.sliding_window > 0) {
      auto slot = cache_->local_slots().Allocate(1);
      if (!slot.ok() && max_held_ > 0) {
        if (!lock.owns_lock()) lock.lock();
        while (!slot.ok() && DropOldestHeld()) slot = cache_->local_slots().Allocate(1);
      }
      if (!slot.ok()) {
        (void)prefix_->Release(*rest);
        return absl::ResourceExhaustedError(absl::StrCat("no free local window slot (",
                                                         cache_->local_slots().num_total(),
                                                         " sequences already running)"));
      }
      seq->local_slot = (*slot)[0];
    }
    const SeqId sid = seq->id;
    if (!lock.owns_lock()) lock.lock();
    sequences_.emplace(sid, std::move(seq));
    return sid;
  }();
  if (!created.ok()) {
    (void)prefix_->Release(shared);
    return created.status();
  }
  const SeqId id = *created;
  Sequence* seq = sequences_.at(id).get();
  const int p = static_cast<int>(shared.size()) * bs;
  seq->cached_tokens = p;
  seq->write_from = p;
  seq->tokens.assign(prompt.begin(), prompt.begin() + p);
  seq->hashes.assign(hashes.begin(), hashes.begin() + shared.size());
  if (cached_tokens != nullptr) *cached_tokens = p;
  return id;
}

int Engine::CachedPrefixTokens(absl::Span<const int32_t> prompt) const {
  if (!prefix_enabled_ || prompt.empty()) return 0;
  const int bs = cache_->options().block_size;
  const int max_blocks = (static_cast<int>(prompt.size()) - 1) / bs;
  if (max_blocks <= 0) return 0;
  return prefix_->Lookup(ChainBlockHashes(root_hash_, bs, prompt.first(max_blocks * bs))) * bs;
}

int Engine::SequenceCachedTokens(SeqId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? 0 : it->second->cached_tokens;
}

void Engine::PublishBlocks(Sequence* seq) {
  if (!prefix_enabled_ || seq->throwaway) return;
  const int bs = cache_->options().block_size;
  const int known = std::min<int>(seq->num_tokens, static_cast<int>(seq->tokens.size()));
  for (int b = static_cast<int>(seq->hashes.size()); (b + 1) * bs <= known; ++b) {
    const BlockHash prev = b == 0 ? root_hash_ : seq->hashes[b - 1];
    const BlockHash h = ChainBlockHash(prev, absl::MakeConstSpan(seq->tokens).subspan(b * bs, bs));
    seq->hashes.push_back(h);
    prefix_->Publish(seq->blocks[b], h);
  }
  if (tiers_ != nullptr) WriteBehind(seq);
}

absl::Status Engine::SetPromptTokens(SeqId id, absl::Span<const int32_t> prompt) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  if (static_cast<int>(prompt.size()) > seq->capacity) {
    return absl::InvalidArgumentError("prompt longer than the sequence's reservation");
  }
  RETURN_IF_ERROR(CheckTokens(prompt));
  const size_t keep = std::min(seq->tokens.size(), prompt.size());
  if (!std::equal(seq->tokens.begin(), seq->tokens.begin() + keep, prompt.begin())) {
    return absl::InvalidArgumentError("prompt tokens differ from the sequence's cached prefix");
  }
  seq->tokens.assign(prompt.begin(), prompt.end());
  PublishBlocks(seq);
  return absl::OkStatus();
}

absl::Status Engine::LeaveSharedWritesToPeer(SeqId id, int tokens) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  if (tokens < 0) return absl::InvalidArgumentError("tokens: negative");
  const size_t blocks = static_cast<size_t>(tokens / cache_->options().block_size);
  seq->shared_from = std::max(seq->shared_from, blocks);
  return absl::OkStatus();
}

int Engine::EvictCachedBlocks() {
  DropHeldSequences();
  return prefix_->EvictAll();
}

absl::Status Engine::ReleaseSequence(SeqId id) {
  std::unique_lock<std::shared_mutex> lock(seq_mu_);
  if (id <= 0) {  // held sequences' keys are internal
    return absl::NotFoundError(absl::StrCat("sequence ", id, " does not exist"));
  }
  return ReleaseLocked(id);
}

absl::Status Engine::ReleaseLocked(SeqId id) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  if (tiers_ != nullptr) WriteBehind(seq);  // blocks no publish offered yet
  absl::Status s = prefix_->Release(seq->blocks);
  if (seq->local_slot >= 0) s.Update(cache_->local_slots().Free({seq->local_slot}));
  sequences_.erase(id);
  return s;
}

absl::Status Engine::HoldSequence(SeqId id) {
  std::unique_lock<std::shared_mutex> lock(seq_mu_);
  if (id <= 0) return absl::NotFoundError(absl::StrCat("sequence ", id, " does not exist"));
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  // Worth holding: rings of this engine's own encoder, tokens known for every
  // position (their hash chain continues), and a window to keep.
  if (max_held_ <= 0 || !seq->prefilled || !seq->own_rings || seq->local_slot < 0 ||
      seq->num_tokens <= 0 || static_cast<int>(seq->tokens.size()) < seq->num_tokens) {
    return ReleaseLocked(id);
  }
  const int bs = cache_->options().block_size;
  seq->tokens.resize(seq->num_tokens);
  seq->h_e.clear();
  seq->h_e.shrink_to_fit();
  // Blocks past the last position are not held.
  const size_t keep = static_cast<size_t>((seq->num_tokens + bs - 1) / bs);
  if (seq->blocks.size() > keep) {
    absl::Status s = prefix_->Release(absl::MakeConstSpan(seq->blocks).subspan(keep));
    seq->blocks.resize(keep);
    if (!s.ok()) {
      (void)ReleaseLocked(id);
      return s;
    }
  }
  if (tiers_ != nullptr) WriteBehind(seq);
  auto node = sequences_.extract(id);
  const SeqId key = next_held_id_--;
  node.key() = key;
  node.mapped()->id = key;
  sequences_.insert(std::move(node));
  held_.push_back(key);
  while (static_cast<int>(held_.size()) > max_held_) DropOldestHeld();
  return absl::OkStatus();
}

bool Engine::DropOldestHeld() {
  if (held_.empty()) return false;
  const SeqId key = held_.front();
  held_.pop_front();
  (void)ReleaseLocked(key);
  return true;
}

int Engine::DropHeldSequences() {
  std::unique_lock<std::shared_mutex> lock(seq_mu_);
  int n = 0;
  while (DropOldestHeld()) ++n;
  return n;
}

std::deque<SeqId>::iterator Engine::BestHeld(absl::Span<const int32_t> prompt,
                                             int max_cached_tokens) {
  const int n = static_cast<int>(prompt.size());
  auto best = held_.end();
  int best_tokens = 0;
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    const Sequence& h = *sequences_.at(*it);
    const int m = h.num_tokens;
    if (m <= best_tokens || m > n - 1 || (max_cached_tokens >= 0 && m > max_cached_tokens)) {
      continue;
    }
    if (std::equal(h.tokens.begin(), h.tokens.begin() + m, prompt.begin())) {
      best = it;
      best_tokens = m;
    }
  }
  return best;
}

SeqId Engine::TakeHeld(absl::Span<const int32_t> prompt, int capacity_tokens, int max_cached_tokens,
                       int min_tokens) {
  auto best = BestHeld(prompt, max_cached_tokens);
  if (best == held_.end()) return 0;
  const int best_tokens = sequences_.at(*best)->num_tokens;
  if (best_tokens < min_tokens) return 0;
  const SeqId key = *best;
  held_.erase(best);
  Sequence* seq = sequences_.at(key).get();
  const int bs = cache_->options().block_size;
  const int total = (capacity_tokens + bs - 1) / bs;
  const int have = static_cast<int>(seq->blocks.size());
  if (total > have) {
    auto more = prefix_->Allocate(total - have);
    while (!more.ok() && DropOldestHeld()) more = prefix_->Allocate(total - have);
    if (!more.ok()) {  // no room to grow it: the prompt takes the usual way
      (void)ReleaseLocked(key);
      return 0;
    }
    seq->blocks.insert(seq->blocks.end(), more->begin(), more->end());
  }
  auto node = sequences_.extract(key);
  const SeqId id = next_id_++;
  node.key() = id;
  node.mapped()->id = id;
  sequences_.insert(std::move(node));
  seq->capacity = capacity_tokens;
  seq->prefilled = false;
  seq->replay_done = false;
  seq->cached_tokens = best_tokens;
  seq->write_from = best_tokens;
  seq->continues_rings = true;
  held_continued_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

int Engine::ReplayStart(int n, ReplayMode mode, int replay_window) const {
  if (config_.IsDecoderOnly()) return 0;
  int r = replay_window > 0
              ? replay_window
              : (mode == ReplayMode::kExact ? config_.ExactReplayWindow() : config_.replay_window);
  return std::max(0, n - r);
}

int Engine::ResumeStart(int n, int p, ReplayMode mode, int replay_window) const {
  if (p <= 0) return 0;
  const ModelConfig& c = config_;
  const int w = c.sliding_window;
  const int bounded = replay_window > 0 ? replay_window : c.replay_window;
  // R_d: the decoder's replay window; R_e: how far back the encoder's local
  // windows must be rebuilt. With W = 0 nothing is rebuilt (R_d = 1 exact).
  int r_d, r_e;
  if (w == 0) {
    r_d = mode == ReplayMode::kExact ? 1 : std::max(1, bounded);
    r_e = 0;
  } else if (mode == ReplayMode::kExact) {
    r_d = c.ExactReplayWindow();
    r_e = c.num_encoder_layers * (w - 1);
  } else {
    r_d = bounded;
    r_e = bounded;
  }
  if (c.IsDecoderOnly()) r_d = 1;
  return std::max(0, std::min(p, n - r_d) - r_e);
}

CacheStats Engine::cache_stats() const {
  CacheStats s;
  s.global_blocks_total = cache_->global_blocks().num_total();
  s.global_blocks_used = prefix_->referenced_blocks();
  const PrefixCacheStats ps = prefix_->stats();
  s.cached_blocks = ps.cached_blocks;
  s.evictable_blocks = ps.evictable_blocks;
  s.evicted_blocks_total = ps.evicted_total;
  s.local_slots_total = cache_->local_slots().num_total();
  s.local_slots_used = cache_->local_slots().num_used();
  {
    std::shared_lock<std::shared_mutex> lock(seq_mu_);
    s.held_sequences = static_cast<int>(held_.size());
    s.sequences = static_cast<int>(sequences_.size()) - s.held_sequences;
    std::vector<int> held_blocks;
    for (SeqId key : held_) {
      const Sequence& h = *sequences_.at(key);
      held_blocks.insert(held_blocks.end(), h.blocks.begin(), h.blocks.end());
      if (h.local_slot >= 0) --s.local_slots_used;
    }
    s.held_blocks = prefix_->OnlyReferencedBy(held_blocks);
  }
  s.held_continued_total = held_continued_.load(std::memory_order_relaxed);
  s.block_size = cache_->options().block_size;
  s.block_bytes = cache_->block_bytes();
  return s;
}

}  // namespace ced
