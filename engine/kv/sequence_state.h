// The transferable state of one sequence after prefill (DESIGN.md §1.4):
// global K/V for token ranges (moved separately, straight between cache
// blocks) and this "tail": the encoder's local K/V window, and either the
// decoder's local K/V window + first token (replay done) or h_E for [s, N)
// (replay deferred). Plain buffers with a fixed binary descriptor, in the
// cache's own format; nothing self-describing crosses the wire.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/config.h"

namespace ced {

struct TailDescriptor {
  KvFormat format = KvFormat::kF32;
  bool replay_done = false;
  int32_t num_tokens = 0;    // N: prompt positions in the cache
  int32_t replay_start = 0;  // s
  int32_t first_token = -1;  // sampled from the replay's logits (replay done only)
};

struct SequenceTail {
  TailDescriptor desc;
  // Local rings, rows for positions [EncLocalBegin, N) of each encoder layer
  // ([layer][K|V][pos][row_bytes]) and [DecLocalBegin, N) of each decoder
  // layer (replay done only). Empty when W == 0.
  std::vector<uint8_t> enc_local;
  std::vector<uint8_t> dec_local;
  // h_E rows for [s, N), f32 [N - s, d] (replay deferred only).
  std::vector<float> h_e;
  // Replay done, when the request asked for log-probabilities: the first
  // token's (token id, logprob), then those of its step's most probable
  // tokens, at most kMaxTailLogprobs pairs in all.
  std::vector<std::pair<int32_t, float>> first_logprobs;
};

inline constexpr int kMaxTailLogprobs = 64;

int EncLocalBegin(const ModelConfig& c, const TailDescriptor& d);
int DecLocalBegin(const ModelConfig& c, const TailDescriptor& d);
// Sizes the sections must have for this config and descriptor.
size_t EncLocalBytes(const ModelConfig& c, const TailDescriptor& d);
size_t DecLocalBytes(const ModelConfig& c, const TailDescriptor& d);
size_t HeBytes(const ModelConfig& c, const TailDescriptor& d);

// Binary form: a fixed 32-byte little-endian header (its last word counts
// the first_logprobs pairs) then the three sections, then the pairs (id,
// float bits: 8 bytes each).
std::vector<uint8_t> EncodeTail(const SequenceTail& tail);
// Validates every field against `config` (format, ranges, exact section
// sizes) before copying anything; errors are INVALID_ARGUMENT naming the field.
absl::StatusOr<SequenceTail> DecodeTail(absl::Span<const uint8_t> bytes, const ModelConfig& config);

}  // namespace ced
