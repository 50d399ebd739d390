// The engine's side of the KV tiers (engine/kv/kv_tiers.h): spilling blocks
// the prefix cache evicts, loading a prompt's prefix back from the tiers, and
// writing sequences' blocks to the shared store as they become final.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kv/kv_tiers.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

absl::Status Engine::InitKvTiers(const EngineOptions& o) {
  if (o.kv_host_bytes < 0 || o.kv_disk_bytes < 0) {
    return absl::InvalidArgumentError("engine: KV tier capacities must be >= 0");
  }
  const bool disk = !o.kv_disk_dir.empty();
  if (disk && o.kv_disk_bytes <= 0) {
    return absl::InvalidArgumentError("engine: a KV disk tier needs a positive capacity");
  }
  if (o.kv_host_bytes == 0 && !disk && o.kv_shared_store == nullptr) return absl::OkStatus();
  if (!prefix_enabled_) {
    return absl::InvalidArgumentError("engine: KV tiers need the prefix cache");
  }
  KvTiersOptions t;
  t.layout.root = root_hash_;
  t.layout.format = config_.kv_cache_dtype;
  t.layout.block_size = cache_->options().block_size;
  t.layout.payload_bytes = cache_->block_bytes();
  t.host_bytes = o.kv_host_bytes;
  t.disk_dir = o.kv_disk_dir;
  t.disk_bytes = o.kv_disk_bytes;
  t.shared = o.kv_shared_store;
  t.write_queue_bytes = o.kv_tier_queue_bytes;
  ASSIGN_OR_RETURN(tiers_, KvTiers::Create(t));
  tier_flush_batch_ = static_cast<int>(std::max<int64_t>(
      1, o.kv_tier_queue_bytes / 2 / std::max<int64_t>(1, static_cast<int64_t>(t.layout.payload_bytes))));
  if (tiers_->spills()) {
    // Under the prefix cache's mutex, on the thread that evicts (the owner's):
    // one copy of the block into a recycled buffer, everything else on the
    // tiers' writer thread.
    prefix_->SetEvictHook([this](int block, const BlockHash& hash) {
      std::shared_ptr<std::string> stored = tiers_->SpillBuffer();
      if (stored == nullptr) return;  // the write queue is full (counted)
      backend_->CopyToHost(stored->data() + kKvBlockHeaderBytes,
                           cache_->GlobalRow(block, 0, 0, 0), cache_->block_bytes());
      tiers_->Spill(hash, std::move(stored));
    });
  }
  return absl::OkStatus();
}

void Engine::LoadFromTiers(absl::Span<const BlockHash> hashes, std::vector<int>* shared,
                           const TierPrefetch* prefetched) {
  const size_t have = shared->size();
  // The blocks served from the hot cache stay recent in the shared store too.
  tiers_->TouchShared(hashes.first(std::min(have, hashes.size())));
  if (have >= hashes.size()) return;
  const size_t bytes = cache_->block_bytes();
  // Each block goes into the hot cache as it is read: a cache block is taken
  // for it (no room: the rest is recomputed), filled and published.
  const auto load = [&](size_t i, const uint8_t* payload) {
    absl::StatusOr<std::vector<int>> block = prefix_->Allocate(1);
    if (!block.ok()) return false;
    const int b = (*block)[0];
    backend_->CopyToDevice(cache_->GlobalRow(b, 0, 0, 0), payload, bytes);
    prefix_->Publish(b, hashes[have + i]);
    shared->push_back(b);
    return true;
  };
  if (prefetched == nullptr) {
    tiers_->FetchPrefixInto(hashes.subspan(have), load);
  } else if (prefetched->first_block <= have &&
             have < prefetched->first_block + prefetched->payloads.size()) {
    // Read before the hot cache was looked at again: it may hold more of the
    // prefix by now (the prefetch's first blocks are then not needed), or
    // less (a gap before the prefetched blocks: they cannot be used).
    const size_t skip = have - prefetched->first_block;
    for (size_t i = 0; skip + i < prefetched->payloads.size(); ++i) {
      const std::string& p = prefetched->payloads[skip + i];
      if (!load(i, reinterpret_cast<const uint8_t*>(p.data()))) break;
    }
  }
}

void Engine::WriteBehind(Sequence* seq) {
  if (!tiers_->has_shared()) return;
  // Every hash is a published block: its K/V is final (PublishBlocks), so it
  // is offered once, as soon as it is published; a running sequence's blocks
  // reach the store before it ends (a migrated stream, a long turn).
  const size_t bytes = cache_->block_bytes();
  const size_t n = std::min(seq->hashes.size(), seq->blocks.size());
  for (; seq->shared_from < n; ++seq->shared_from) {
    const size_t b = seq->shared_from;
    if (!tiers_->WantsShared(seq->hashes[b])) continue;
    std::shared_ptr<std::string> stored = tiers_->NewBlock();
    backend_->CopyToHost(stored->data() + kKvBlockHeaderBytes,
                         cache_->GlobalRow(seq->blocks[b], 0, 0, 0), bytes);
    tiers_->WriteShared(seq->hashes[b], std::move(stored));
  }
}

void Engine::FlushKvTiers() {
  if (tiers_ != nullptr) tiers_->Flush();
}

int Engine::FlushPrefixCache() {
  DropHeldSequences();  // their blocks become cached, and are flushed with the rest
  if (tiers_ == nullptr || !tiers_->spills()) return prefix_->EvictAll();
  // Blocks cached later (requests finishing meanwhile) wait for the next flush.
  int left = prefix_->stats().evictable_blocks;
  int total = 0;
  while (left > 0) {
    const int n = prefix_->EvictUpTo(std::min(left, tier_flush_batch_));
    if (n == 0) break;
    total += n;
    left -= n;
    tiers_->Flush();
  }
  return total;
}

std::vector<KvTierStats> Engine::kv_tier_stats() const {
  return tiers_ != nullptr ? tiers_->stats() : std::vector<KvTierStats>();
}

}  // namespace ced
