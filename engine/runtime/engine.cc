#include "engine/runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

const char* ReplayModeName(ReplayMode mode) {
  return mode == ReplayMode::kExact ? "exact" : "bounded";
}

bool ParseReplayMode(std::string_view name, ReplayMode* out) {
  if (name == "bounded") *out = ReplayMode::kBounded;
  else if (name == "exact") *out = ReplayMode::kExact;
  else return false;
  return true;
}

Engine::~Engine() {
  sequences_.clear();
  cache_.reset();
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
                                                     " is outside [0, ", config_.vocab_size,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SeqId> Engine::CreateSequence(int capacity_tokens) {
  if (capacity_tokens <= 0 || capacity_tokens > config_.max_position) {
    return absl::InvalidArgumentError(absl::StrCat("sequence capacity ", capacity_tokens,
                                                   " is outside [1, max_position=",
                                                   config_.max_position, "]"));
  }
  const int bs = cache_->options().block_size;
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->capacity = capacity_tokens;
  ASSIGN_OR_RETURN(seq->blocks, cache_->global_blocks().Allocate((capacity_tokens + bs - 1) / bs));
  if (config_.sliding_window > 0) {
    auto slot = cache_->local_slots().Allocate(1);
    if (!slot.ok()) {
      (void)cache_->global_blocks().Free(seq->blocks);
      return absl::ResourceExhaustedError(
          absl::StrCat("no free local window slot (", cache_->local_slots().num_total(),
                       " sequences already running)"));
    }
    seq->local_slot = (*slot)[0];
  }
  const SeqId id = seq->id;
  std::unique_lock<std::shared_mutex> lock(seq_mu_);
  sequences_.emplace(id, std::move(seq));
  return id;
}

absl::Status Engine::ReleaseSequence(SeqId id) {
  std::unique_lock<std::shared_mutex> lock(seq_mu_);
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  absl::Status s = cache_->global_blocks().Free(seq->blocks);
  if (seq->local_slot >= 0) s.Update(cache_->local_slots().Free({seq->local_slot}));
  sequences_.erase(id);
  return s;
}

int Engine::ReplayStart(int n, ReplayMode mode, int replay_window) const {
  if (config_.IsDecoderOnly()) return 0;
  int r = replay_window > 0 ? replay_window
                            : (mode == ReplayMode::kExact ? config_.ExactReplayWindow()
                                                          : config_.replay_window);
  return std::max(0, n - r);
}

CacheStats Engine::cache_stats() const {
  CacheStats s;
  s.global_blocks_total = cache_->global_blocks().num_total();
  s.global_blocks_used = cache_->global_blocks().num_used();
  s.local_slots_total = cache_->local_slots().num_total();
  s.local_slots_used = cache_->local_slots().num_used();
  {
    std::shared_lock<std::shared_mutex> lock(seq_mu_);
    s.sequences = static_cast<int>(sequences_.size());
  }
  s.block_size = cache_->options().block_size;
  s.block_bytes = cache_->block_bytes();
  return s;
}

}  // namespace ced
