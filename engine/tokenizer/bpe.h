// The BPE model of a byte-level tokenizer.json: vocabulary, ranked merges
// ("a b" strings or [a, b] arrays), ignore_merges, unk_token and fuse_unk.
// It works on raw bytes: the vocabulary's byte-level spelling is undone when
// it is loaded. dropout, byte_fallback and subword prefixes/suffixes are
// refused (Unimplemented naming the field).
//
// Merging applies the lowest-ranked adjacent pair first, the leftmost of
// equal ranks, as the reference and the Rust library do.
//
// Internal to ced_tokenizer. Immutable after Create except for a word cache;
// Encode may be called from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace ced::tokenizer_internal {

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; `where` names it in errors.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(const nlohmann::json& model,
                                                          const std::string& where);

  // Appends the ids of `word` (raw bytes; one pre-tokenized piece).
  void Encode(std::string_view word, std::vector<int>* ids) const;

  // The raw bytes of vocabulary entry `id`, or nullptr when the vocabulary has
  // no such id. An entry spelled outside the byte-level alphabet is its UTF-8.
  const std::string* TokenBytes(int id) const;
  // The id of the vocabulary entry spelled `token` (as tokenizer.json spells
  // it, byte-level), or -1.
  int IdOfToken(std::string_view token) const;
  // One past the largest vocabulary id.
  int id_end() const { return static_cast<int>(token_bytes_.size()); }

 private:
  BpeModel() = default;
  void Merge(std::string_view word, std::vector<int>* ids) const;
  uint64_t PairMerge(int left, int right) const;  // (rank << 32 | new id), or kNoMerge

  static constexpr uint64_t kNoMerge = ~uint64_t{0};
  std::array<int, 256> byte_id_{};                     // id of each single byte, or -1
  absl::flat_hash_map<uint64_t, uint64_t> merges_;     // (left << 32 | right) -> PairMerge
  absl::flat_hash_map<std::string, int> bytes_to_id_;  // raw bytes -> id
  std::vector<std::string> token_bytes_;               // id -> raw bytes
  std::vector<bool> has_id_;                           // id -> in the vocabulary
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int unk_id_ = -1;

  // Word cache: a small direct-mapped one per thread in front of a shared one,
  // sharded, each shard under its own mutex and cleared when full.
  uint64_t instance_ = 0;  // tells this model's per-thread entries from others
  static constexpr int kCacheShards = 64;
  static constexpr size_t kCacheShardCapacity = 4096;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct CacheShard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int>> words;
  };
  std::unique_ptr<CacheShard[]> cache_ = std::make_unique<CacheShard[]>(kCacheShards);
};

}  // namespace ced::tokenizer_internal
