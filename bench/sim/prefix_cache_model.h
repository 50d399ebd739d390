// The simulator's model of one worker's prefix cache (DESIGN.md §1.6) and of
// what a resumed prefill costs.
//
// PrefixCacheModel: a worker's global-K/V pool of `capacity_blocks` blocks.
// Running sequences hold blocks (Reserve/Release); a finished one leaves its
// full blocks cached under its session (Store). Sessions' prompts only grow,
// so a session's cached prefix is a count of leading blocks; when the pool is
// short, the least recently used session loses blocks from its tail (the
// engine evicts least recently used blocks, and a chain's tail was used no
// later than its head). Not thread-safe.
//
// Held sequences (EngineOptions::max_held_sequences, a prefill worker's
// --held-sequences): the last `max_held` prompts computed here are kept with
// their local windows; the next prompt of the same session continues one
// (P = its tokens, no encoder rebuild) unless the cached blocks reach
// further. A held sequence references its blocks: it is dropped, least
// recently held first, before they can be evicted.
//
// ResumedPrefill*: §1.6's computation for a prompt of N tokens with P cached:
// the encoder over [a, N), a = max(0, min(P, N - R_d) - R_e) (bounded mode),
// or a = P when a held sequence is continued (and N - R_d >= P),
// decoder global K/V for [P, N), the replay over the last R_d positions.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>

#include "bench/sim/cost_model.h"
#include "engine/model/config.h"

namespace ced::sim {

class PrefixCacheModel {
 public:
  PrefixCacheModel(int64_t capacity_blocks, int block_size);

  // Tokens of a `prompt_tokens`-token prompt of `session` cached here: full
  // blocks, at most prompt_tokens - 1 (the last token is always computed).
  int64_t CachedTokens(int session, int64_t prompt_tokens) const;
  // Held sequences (0, the default: none).
  void set_max_held(int n) { max_held_ = std::max(0, n); }
  // `session`'s prompt of `tokens` was computed here and its sequence held.
  void Hold(int session, int64_t tokens);
  // The positions of `session`'s held sequence if the engine would continue
  // it for a `prompt_tokens`-token prompt (at most prompt_tokens - 1, and no
  // fewer than the cached blocks reach), else 0.
  int64_t HeldTokens(int session, int64_t prompt_tokens) const;
  // The next prompt took the held sequence over (it is no longer held).
  void TakeHeld(int session);
  // What the engine reuses for `session`'s prompt of `prompt_tokens`: its
  // held sequence (continued) when HeldTokens has one, else the cached full
  // blocks. Takes nothing over.
  struct Resume {
    int64_t tokens = 0;
    bool continued = false;
  };
  Resume ResumeFor(int session, int64_t prompt_tokens) const;
  int held_sequences() const { return static_cast<int>(held_.size()); }
  // Marks the session most recently used (a hit).
  void Touch(int session);
  // Takes `blocks` for a running sequence, evicting cached blocks (least
  // recently used session first) as needed; false when even an empty cache
  // leaves too little room (nothing is taken then).
  bool Reserve(int64_t blocks);
  void Release(int64_t blocks);
  // A sequence of `session` holding `tokens` positions finished (or its
  // prompt was computed): its full blocks stay cached, most recently used.
  // Cached blocks never exceed the room that reservations leave.
  void Store(int session, int64_t tokens);

  int64_t capacity_blocks() const { return capacity_; }
  int64_t cached_blocks() const { return cached_; }
  int64_t reserved_blocks() const { return reserved_; }
  int64_t free_blocks() const { return capacity_ - reserved_ - cached_; }
  int64_t evicted_blocks() const { return evicted_; }
  int block_size() const { return block_size_; }

  // Cache events, as the engine's prefix cache logs them for the router's
  // block index: blocks [begin, end) of `session`'s chain were stored
  // (`stored`) or evicted. Called synchronously from Reserve / Store; empty:
  // no events.
  using BlockListener = std::function<void(int session, int64_t begin, int64_t end, bool stored)>;
  void set_block_listener(BlockListener listener) { listener_ = std::move(listener); }

 private:
  // Evicts until free_blocks() >= need or nothing is cached.
  void EvictFor(int64_t need);

  struct Entry {
    int64_t blocks = 0;
    std::list<int>::iterator lru;  // position in lru_ (front = most recent)
  };
  const int64_t capacity_;
  const int block_size_;
  int64_t reserved_ = 0, cached_ = 0, evicted_ = 0;
  std::list<int> lru_;
  std::unordered_map<int, Entry> sessions_;
  BlockListener listener_;
  int max_held_ = 0;
  std::list<std::pair<int, int64_t>> held_;  // (session, tokens), most recently held first
};

// a: the first position a resumed prefill runs the encoder from (bounded
// mode; mirrors Engine::ResumeStart). 0 when p <= 0. `continued`: the p
// positions are a held sequence's, continued from p when the replay needs no
// position before it (decoder-only, or N - R_d >= p), else rebuilt as above
// (mirrors Engine::Prefill).
int64_t ResumeEncoderStart(const ModelConfig& config, int64_t n, int64_t p, bool continued = false);

// One prefill step for a prompt of `n` tokens with `p` cached (p = 0: a
// fresh prefill, CostModel::PrefillSeconds); `replay_here` as there;
// `continued`: p positions of a held sequence (ResumeEncoderStart).
Work ResumedPrefillWork(const CostModel& cost, int64_t n, int64_t p, bool replay_here,
                        bool continued = false);
double ResumedPrefillSeconds(const CostModel& cost, int64_t n, int64_t p, bool replay_here,
                             int gpus, bool continued = false);

}  // namespace ced::sim
