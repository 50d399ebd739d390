#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8_scan.h"
#include "nlohmann/json.hpp"

namespace ced::tokenizer_internal {
namespace {

// The raw bytes a byte-level spelled token stands for; false when a code
// point is outside the alphabet.
bool UnmapByteLevel(std::string_view token, std::string* bytes) {
  bytes->clear();
  for (size_t pos = 0; pos < token.size();) {
    const int b = ByteOfCodePoint(NextCodePoint(token, &pos));
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
  }
  return true;
}

bool IsUnset(const nlohmann::json& model, const char* key) {
  const auto it = model.find(key);
  return it == model.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

constexpr size_t kShortWord = 48;  // up to this many bytes: the quadratic scan is faster

std::atomic<uint64_t> next_instance{1};

// One thread's direct-mapped word cache, shared by every BpeModel (entries
// carry the model's instance number).
struct LocalEntry {
  uint64_t instance = 0;
  size_t hash = 0;
  std::string word;
  std::vector<int> ids;
};
constexpr size_t kLocalEntries = 4096;

LocalEntry& LocalSlot(size_t hash) {
  thread_local std::unique_ptr<LocalEntry[]> entries(new LocalEntry[kLocalEntries]);
  return entries[hash & (kLocalEntries - 1)];
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(const nlohmann::json& model,
                                                           const std::string& where) {
  if (!model.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  if (model.contains("type") && model["type"] != "BPE") {
    return absl::UnimplementedError(absl::StrCat(where, ".type: model type ", model["type"].dump(),
                                                 " is not supported (supported: BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsUnset(model, key)) {
      return absl::UnimplementedError(absl::StrCat(where, ".", key, " is not supported"));
    }
  }
  if (model.contains("byte_fallback") && model["byte_fallback"] == true) {
    return absl::UnimplementedError(
        absl::StrCat(where, ".byte_fallback: true is not supported with a byte-level tokenizer"));
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"] != 0) {
    return absl::UnimplementedError(absl::StrCat(where, ".dropout is not supported"));
  }
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".vocab: expected an object"));
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->instance_ = next_instance.fetch_add(1);
  bpe->byte_id_.fill(-1);
  absl::flat_hash_map<std::string, int> spelled;  // as written in the file
  spelled.reserve(vocab->size());
  std::string bytes;
  for (const auto& [token, value] : vocab->items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".vocab[\"", token, "\"]: expected an id in [0, 2^30)"));
    }
    const int id = value.get<int>();
    spelled[token] = id;
    if (!UnmapByteLevel(token, &bytes)) bytes = token;
    if (static_cast<size_t>(id) >= bpe->token_bytes_.size()) {
      bpe->token_bytes_.resize(id + 1);
      bpe->has_id_.resize(id + 1);
    }
    bpe->token_bytes_[id] = bytes;
    bpe->has_id_[id] = true;
    bpe->bytes_to_id_[bytes] = id;
    if (bytes.size() == 1) bpe->byte_id_[static_cast<unsigned char>(bytes[0])] = id;
  }
  const auto merges = model.find("merges");
  if (merges != model.end() && !merges->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".merges: expected an array"));
  }
  if (merges != model.end()) {
    bpe->merges_.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const nlohmann::json& m = (*merges)[rank];
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".merges[", rank, "]: \"", s, "\" is not \"left right\""));
        }
        left = s.substr(0, space);
        right = s.substr(space + 1);
        if (size_t more = right.find(' '); more != std::string::npos) right.resize(more);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".merges[", rank, "]: expected \"left right\" or [\"left\", \"right\"]"));
      }
      const auto l = spelled.find(left), r = spelled.find(right), n = spelled.find(left + right);
      if (l == spelled.end() || r == spelled.end() || n == spelled.end()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".merges[", rank, "]: \"", left,
                                                       "\" + \"", right, "\" is not in the vocab"));
      }
      const uint64_t key =
          (uint64_t{static_cast<uint32_t>(l->second)} << 32) | static_cast<uint32_t>(r->second);
      // A pair listed twice keeps its last rank, as in the reference.
      bpe->merges_.insert_or_assign(key, (uint64_t{rank} << 32) | static_cast<uint32_t>(n->second));
    }
  }
  bpe->ignore_merges_ = model.contains("ignore_merges") && model["ignore_merges"] == true;
  bpe->fuse_unk_ = model.contains("fuse_unk") && model["fuse_unk"] == true;
  if (!IsUnset(model, "unk_token")) {
    const auto unk = spelled.find(model["unk_token"].get<std::string>());
    if (unk == spelled.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".unk_token: ", model["unk_token"].dump(), " is not in the vocab"));
    }
    bpe->unk_id_ = unk->second;
  }
  return bpe;
}

const std::string* BpeModel::TokenBytes(int id) const {
  if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
  return &token_bytes_[id];
}

int BpeModel::IdOfToken(std::string_view token) const {
  std::string bytes;
  if (!UnmapByteLevel(token, &bytes)) bytes = std::string(token);
  const auto it = bytes_to_id_.find(bytes);
  return it == bytes_to_id_.end() ? -1 : it->second;
}

uint64_t BpeModel::PairMerge(int left, int right) const {
  if (left < 0 || right < 0) return kNoMerge;
  const auto it =
      merges_.find((uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right));
  return it == merges_.end() ? kNoMerge : it->second;
}

void BpeModel::Encode(std::string_view word, std::vector<int>* ids) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_id_[static_cast<unsigned char>(word[0])] >= 0) {
    ids->push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = bytes_to_id_.find(absl::string_view(word.data(), word.size()));
        it != bytes_to_id_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    Merge(word, ids);
    return;
  }
  const size_t hash = absl::HashOf(absl::string_view(word.data(), word.size()));
  LocalEntry& local = LocalSlot(hash);
  if (local.instance == instance_ && local.hash == hash && local.word == word) {
    ids->insert(ids->end(), local.ids.begin(), local.ids.end());
    return;
  }
  const size_t first = ids->size();
  CacheShard& shard = cache_[(hash >> 32) % kCacheShards];
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    if (const auto it = shard.words.find(absl::string_view(word.data(), word.size()));
        it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      found = true;
    }
  }
  if (!found) {
    Merge(word, ids);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.words.size() >= kCacheShardCapacity) shard.words.clear();
    shard.words.emplace(word, std::vector<int>(ids->begin() + first, ids->end()));
  }
  local.instance = instance_;
  local.hash = hash;
  local.word.assign(word.data(), word.size());
  local.ids.assign(ids->begin() + first, ids->end());
}

void BpeModel::Merge(std::string_view word, std::vector<int>* ids) const {
  const size_t n = word.size();
  std::vector<int> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id_[static_cast<unsigned char>(word[i])];
  if (n <= kShortWord) {
    // Quadratic scan: the lowest (rank, position) pair each round.
    std::vector<uint64_t> pair(n > 0 ? n - 1 : 0);
    for (size_t i = 0; i + 1 < n; ++i) pair[i] = PairMerge(sym[i], sym[i + 1]);
    while (!pair.empty()) {
      const size_t best = std::min_element(pair.begin(), pair.end()) - pair.begin();
      if (pair[best] == kNoMerge) break;
      sym[best] = static_cast<int>(pair[best] & 0xFFFFFFFFu);
      sym.erase(sym.begin() + best + 1);
      pair.erase(pair.begin() + best);
      if (best > 0) pair[best - 1] = PairMerge(sym[best - 1], sym[best]);
      if (best < pair.size()) pair[best] = PairMerge(sym[best], sym[best + 1]);
    }
  } else {
    // Linked symbols and a heap of candidate merges ordered by (rank, position).
    std::vector<int> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int>(i) + 1 : -1;
    }
    using Candidate = std::tuple<uint32_t, int, int>;  // rank, position, new id
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](int pos) {
      if (pos < 0 || next[pos] < 0) return;
      const uint64_t m = PairMerge(sym[pos], sym[next[pos]]);
      if (m != kNoMerge) heap.emplace(static_cast<uint32_t>(m >> 32), pos, static_cast<int>(m));
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
    std::vector<bool> gone(n, false);
    while (!heap.empty()) {
      const auto [rank, pos, new_id] = heap.top();
      heap.pop();
      if (gone[pos] || next[pos] < 0) continue;
      const uint64_t m = PairMerge(sym[pos], sym[next[pos]]);
      if (m == kNoMerge || static_cast<uint32_t>(m >> 32) != rank) continue;  // stale
      const int right = next[pos];
      sym[pos] = new_id;
      gone[right] = true;
      next[pos] = next[right];
      if (next[pos] >= 0) prev[next[pos]] = pos;
      push(prev[pos]);
      push(pos);
    }
    size_t out = 0;
    for (int i = 0; i >= 0; i = next[i]) sym[out++] = sym[i];
    sym.resize(out);
  }
  bool last_unk = false;
  for (int id : sym) {
    if (id >= 0) {
      ids->push_back(id);
      last_unk = false;
    } else if (unk_id_ >= 0 && !(fuse_unk_ && last_unk)) {
      ids->push_back(unk_id_);
      last_unk = true;
    }
  }
}

}  // namespace ced::tokenizer_internal
