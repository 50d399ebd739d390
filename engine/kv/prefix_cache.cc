#include "engine/kv/prefix_cache.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ced {
namespace {

BlockHash FromDigest(const unsigned char* digest) {
  BlockHash h;
  for (int i = 0; i < 8; ++i) {
    h.hi = (h.hi << 8) | digest[i];
    h.lo = (h.lo << 8) | digest[8 + i];
  }
  return h;
}

void PutU64(std::string* buf, uint64_t v) {
  for (int i = 0; i < 8; ++i) buf->push_back(static_cast<char>(v >> (8 * i)));
}

BlockHash Digest(const std::string& buf) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(buf.data()), buf.size(), digest);
  return FromDigest(digest);
}

}  // namespace

std::string BlockHash::Hex() const { return absl::StrFormat("%016x%016x", hi, lo); }

BlockHash RootBlockHash(std::string_view identity, int block_size) {
  std::string buf = "ced-prefix-v1";
  buf.push_back('\0');
  PutU64(&buf, identity.size());
  buf.append(identity.data(), identity.size());
  PutU64(&buf, static_cast<uint64_t>(block_size));
  return Digest(buf);
}

BlockHash ChainBlockHash(const BlockHash& prev, absl::Span<const int32_t> tokens) {
  std::string buf;
  buf.reserve(24 + 4 * tokens.size());
  PutU64(&buf, prev.hi);
  PutU64(&buf, prev.lo);
  PutU64(&buf, tokens.size());
  for (int32_t t : tokens) {
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<char>(static_cast<uint32_t>(t) >> (8 * i)));
  }
  return Digest(buf);
}

std::vector<BlockHash> ChainBlockHashes(const BlockHash& root, int block_size,
                                        absl::Span<const int32_t> tokens) {
  std::vector<BlockHash> out;
  if (block_size <= 0) return out;
  BlockHash h = root;
  for (size_t b = 0; (b + 1) * block_size <= tokens.size(); ++b) {
    h = ChainBlockHash(h, tokens.subspan(b * block_size, block_size));
    out.push_back(h);
  }
  return out;
}

PrefixCache::PrefixCache(BlockAllocator* allocator)
    : allocator_(allocator), entries_(allocator->num_total()) {}

std::vector<int> PrefixCache::Acquire(absl::Span<const BlockHash> hashes, int max_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (size_t i = 0; i < hashes.size() && static_cast<int>(out.size()) < max_blocks; ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) break;
    Entry& e = entries_[it->second];
    if (e.refs == 0) {
      lru_.erase(e.lru);
      ++referenced_;
    }
    ++e.refs;
    out.push_back(it->second);
  }
  return out;
}

int PrefixCache::Lookup(absl::Span<const BlockHash> hashes) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && by_hash_.count(hashes[n]) > 0) ++n;
  return n;
}

void PrefixCache::EvictLocked(int count) {
  while (count-- > 0 && !lru_.empty()) {
    const int b = lru_.front();
    lru_.pop_front();
    Entry& e = entries_[b];
    by_hash_.erase(e.hash);
    if (evict_hook_) evict_hook_(b, e.hash);
    LogEventLocked(e.hash, false);
    e = Entry();
    (void)allocator_->Free({b});
    ++evicted_total_;
  }
}

absl::StatusOr<std::vector<int>> PrefixCache::Allocate(int count) {
  if (count < 0) return absl::InvalidArgumentError("negative block count");
  std::lock_guard<std::mutex> lock(mu_);
  const int free_now = allocator_->num_free();
  if (count > free_now + static_cast<int>(lru_.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache exhausted: need ", count, " blocks, ", free_now, " free and ",
                     lru_.size(), " cached of ", allocator_->num_total()));
  }
  if (count > free_now) EvictLocked(count - free_now);
  absl::StatusOr<std::vector<int>> blocks = allocator_->Allocate(count);
  if (!blocks.ok()) return blocks.status();
  for (int b : *blocks) entries_[b].refs = 1;
  referenced_ += count;
  return blocks;
}

void PrefixCache::Publish(int block, const BlockHash& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (block < 0 || block >= static_cast<int>(entries_.size())) return;
  Entry& e = entries_[block];
  if (e.published || e.refs == 0 || by_hash_.count(hash) > 0) return;
  e.published = true;
  e.hash = hash;
  by_hash_.emplace(hash, block);
  ++published_total_;
  LogEventLocked(hash, true);
}

absl::Status PrefixCache::Release(absl::Span<const int> blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int b : blocks) {
    if (b < 0 || b >= static_cast<int>(entries_.size()) || entries_[b].refs <= 0) {
      return absl::InternalError(absl::StrCat("releasing block ", b, " that is not referenced"));
    }
  }
  // Last block first: of one release (a sequence's blocks in order), the
  // head ends most recently used, so eviction takes a chain from its tail.
  // A match always starts at block 0: evicting the head first would make
  // every block behind it unreachable while it still fills the pool.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int b = *it;
    Entry& e = entries_[b];
    if (--e.refs > 0) continue;
    --referenced_;
    if (e.published) {
      e.lru = lru_.insert(lru_.end(), b);
    } else {
      e = Entry();
      (void)allocator_->Free({b});
    }
  }
  return absl::OkStatus();
}

int PrefixCache::EvictAll() { return EvictUpTo(std::numeric_limits<int>::max()); }

int PrefixCache::EvictUpTo(int max_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  const int n = std::min(std::max(max_blocks, 0), static_cast<int>(lru_.size()));
  EvictLocked(n);
  return n;
}

int PrefixCache::referenced_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return referenced_;
}

int PrefixCache::OnlyReferencedBy(absl::Span<const int> blocks) const {
  std::unordered_map<int, int> refs;
  for (int b : blocks) ++refs[b];
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [b, count] : refs) {
    if (b >= 0 && b < static_cast<int>(entries_.size()) && entries_[b].refs == count) ++n;
  }
  return n;
}

int PrefixCache::available_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocator_->num_free() + static_cast<int>(lru_.size());
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s;
  s.cached_blocks = static_cast<int>(by_hash_.size());
  s.evictable_blocks = static_cast<int>(lru_.size());
  s.evicted_total = evicted_total_;
  s.published_total = published_total_;
  return s;
}

void PrefixCache::LogEventLocked(const BlockHash& hash, bool published) {
  ++event_seq_;
  if (event_capacity_ == 0) return;
  if (events_.size() == event_capacity_) events_.pop_front();
  events_.push_back(PrefixCacheEvent{hash, published});
}

void PrefixCache::EnableEventLog(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  event_capacity_ = capacity;
  while (events_.size() > capacity) events_.pop_front();
}

PrefixCacheEventLog PrefixCache::EventsSince(uint64_t from_seq, size_t max_events) const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheEventLog log;
  log.end_seq = event_seq_;
  const uint64_t first_held = event_seq_ - events_.size();
  if (from_seq == 0 || from_seq < first_held || from_seq > event_seq_) {
    log.published.reserve(by_hash_.size());
    for (const auto& [hash, block] : by_hash_) log.published.push_back(hash);
    return log;
  }
  log.complete = true;
  const size_t begin = static_cast<size_t>(from_seq - first_held);
  const size_t n = std::min(events_.size() - begin, max_events);
  log.events.assign(events_.begin() + begin, events_.begin() + begin + n);
  log.end_seq = from_seq + n;
  return log;
}

}  // namespace ced
