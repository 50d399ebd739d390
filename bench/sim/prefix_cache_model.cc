#include "bench/sim/prefix_cache_model.h"

#include <algorithm>

#include "engine/accounting/accounting.h"

namespace ced::sim {

PrefixCacheModel::PrefixCacheModel(int64_t capacity_blocks, int block_size)
    : capacity_(std::max<int64_t>(0, capacity_blocks)), block_size_(std::max(1, block_size)) {}

int64_t PrefixCacheModel::CachedTokens(int session, int64_t prompt_tokens) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end() || prompt_tokens < 2) return 0;
  const int64_t max_blocks = (prompt_tokens - 1) / block_size_;
  return std::min(it->second.blocks, max_blocks) * block_size_;
}

void PrefixCacheModel::Touch(int session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
}

void PrefixCacheModel::Hold(int session, int64_t tokens) {
  if (max_held_ <= 0) return;
  TakeHeld(session);
  held_.emplace_front(session, tokens);
  while (static_cast<int>(held_.size()) > max_held_) held_.pop_back();
}

int64_t PrefixCacheModel::HeldTokens(int session, int64_t prompt_tokens) const {
  for (const auto& [s, tokens] : held_) {
    if (s != session) continue;
    if (tokens > prompt_tokens - 1 || tokens < CachedTokens(session, prompt_tokens)) return 0;
    return tokens;
  }
  return 0;
}

PrefixCacheModel::Resume PrefixCacheModel::ResumeFor(int session, int64_t prompt_tokens) const {
  const int64_t held = HeldTokens(session, prompt_tokens);
  if (held > 0) return {held, true};
  return {CachedTokens(session, prompt_tokens), false};
}

void PrefixCacheModel::TakeHeld(int session) {
  held_.remove_if([session](const std::pair<int, int64_t>& h) { return h.first == session; });
}

void PrefixCacheModel::EvictFor(int64_t need) {
  auto held = [this](int session) {
    for (const auto& h : held_) {
      if (h.first == session) return true;
    }
    return false;
  };
  while (free_blocks() < need) {
    // The least recently used session no held sequence references (a held
    // sequence's blocks are in use); when only held ones are left, the least
    // recently held gives way first.
    auto it = lru_.end();
    for (auto r = lru_.rbegin(); r != lru_.rend(); ++r) {
      if (!held(*r)) {
        it = std::prev(r.base());
        break;
      }
    }
    if (it == lru_.end()) {
      if (held_.empty()) break;
      held_.pop_back();
      continue;
    }
    const int victim = *it;
    Entry& e = sessions_[victim];
    const int64_t take = std::min(e.blocks, need - free_blocks());
    e.blocks -= take;
    cached_ -= take;
    evicted_ += take;
    if (listener_ && take > 0) listener_(victim, e.blocks, e.blocks + take, false);
    if (e.blocks == 0) {
      lru_.erase(it);
      sessions_.erase(victim);
    }
  }
}

bool PrefixCacheModel::Reserve(int64_t blocks) {
  if (blocks > capacity_ - reserved_) return false;
  EvictFor(blocks);
  reserved_ += blocks;
  return true;
}

void PrefixCacheModel::Release(int64_t blocks) { reserved_ = std::max<int64_t>(0, reserved_ - blocks); }

void PrefixCacheModel::Store(int session, int64_t tokens) {
  const int64_t want = std::max<int64_t>(0, tokens) / block_size_;
  auto it = sessions_.find(session);
  const int64_t have = it == sessions_.end() ? 0 : it->second.blocks;
  if (want <= have) {
    Touch(session);
    return;
  }
  // The new blocks displace older sessions' tails, never this one's head.
  if (it != sessions_.end()) lru_.splice(lru_.begin(), lru_, it->second.lru);
  int64_t add = want - have;
  if (free_blocks() < add) {
    // Evict others first (this session is at the front, so it goes last).
    EvictFor(add);
    add = std::min(add, std::max<int64_t>(0, free_blocks()));
    it = sessions_.find(session);  // may have been evicted when it was alone
  }
  if (add <= 0) return;
  if (it == sessions_.end()) {
    lru_.push_front(session);
    it = sessions_.emplace(session, Entry{0, lru_.begin()}).first;
  }
  if (listener_) listener_(session, it->second.blocks, it->second.blocks + add, true);
  it->second.blocks += add;
  cached_ += add;
}

int64_t ResumeEncoderStart(const ModelConfig& c, int64_t n, int64_t p, bool continued) {
  if (p <= 0) return 0;
  int64_t r_d = c.replay_window, r_e = c.replay_window;
  if (c.sliding_window == 0) {
    r_d = std::max(1, c.replay_window);
    r_e = 0;
  }
  if (c.IsDecoderOnly()) r_d = 1;
  if (continued && n - r_d >= p) return p;
  return std::max<int64_t>(0, std::min(p, n - r_d) - r_e);
}

Work ResumedPrefillWork(const CostModel& cost, int64_t n, int64_t p, bool replay_here,
                        bool continued) {
  if (p <= 0) return cost.PrefillWork(n, replay_here);
  const ModelConfig& c = cost.config();
  const Accounting& acc = cost.accounting();
  const int64_t a = ResumeEncoderStart(c, n, p, continued);
  const bool dec_only = cost.decoder_only();
  const int64_t r = dec_only ? 0 : (replay_here ? cost.ReplayedTokens(n) : 0);
  const int encoder_layers = dec_only ? c.num_layers : c.num_encoder_layers;
  Work w;
  int64_t params = (n - a) * acc.encoder_params_per_prompt_token +
                   (n - p) * acc.decoder_kv_params_per_prompt_token +
                   r * acc.params_per_replayed_token;
  if (dec_only || replay_here) params += acc.lm_head_params;
  w.attn_flops = AttentionFlopsForPositions(c, a, n, encoder_layers);
  if (r > 0) {
    w.attn_flops += AttentionFlopsForPositions(c, n - r, n, c.num_layers - c.num_encoder_layers);
  }
  w.flops = MatmulFlops(params) + w.attn_flops;
  int64_t touched = acc.params_per_prompt_token;
  if (dec_only || replay_here) touched += acc.lm_head_params;
  if (!dec_only && replay_here) touched += acc.params_per_replayed_token;
  // Weights once; new K/V written; the cached prefix read by the attention.
  w.bytes = static_cast<double>(touched) * cost.bytes_per_param() +
            static_cast<double>(n) * cost.kv_bytes_per_token();
  return w;
}

double ResumedPrefillSeconds(const CostModel& cost, int64_t n, int64_t p, bool replay_here,
                             int gpus, bool continued) {
  if (p <= 0) return cost.PrefillSeconds(n, replay_here, gpus);
  const GpuSpec& g = cost.gpu();
  const int64_t a = ResumeEncoderStart(cost.config(), n, p, continued);
  return g.prefill_scale *
         (cost.StepSeconds(ResumedPrefillWork(cost, n, p, replay_here, continued), gpus) +
          g.prefill_step_s + g.prefill_token_s * static_cast<double>(n - a));
}

}  // namespace ced::sim
