#include "engine/kv/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace ced {

KvCache::KvCache(const KvCacheOptions& options, Backend* backend)
    : options_(options),
      backend_(backend),
      global_alloc_(options.num_blocks),
      local_alloc_(options.window > 0 ? options.num_local_slots : 0) {}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& options,
                                                         Backend* backend) {
  if (options.kv_dim <= 0 || options.block_size <= 0 || options.num_blocks <= 0 ||
      options.num_layers <= 0 || options.num_source_layers <= 0 || options.window < 0 ||
      options.num_local_slots <= 0) {
    return absl::InvalidArgumentError("KV cache: sizes must be positive");
  }
  if (options.format == KvFormat::kFP4E2M1 && options.kv_dim % kernels::kFp4GroupSize != 0) {
    return absl::InvalidArgumentError("KV cache: fp4_e2m1 needs rows that are a multiple of 16");
  }
  std::unique_ptr<KvCache> cache(new KvCache(options, backend));
  cache->row_bytes_ = kernels::KvRowBytes(options.format, options.kv_dim);
  cache->block_bytes_ = static_cast<size_t>(options.num_source_layers) * 2 * options.block_size *
                        cache->row_bytes_;
  cache->local_slot_bytes_ =
      static_cast<size_t>(options.num_layers) * 2 * options.window * cache->row_bytes_;
  const size_t global_bytes = cache->block_bytes_ * options.num_blocks;
  cache->global_ = static_cast<uint8_t*>(backend->Alloc(global_bytes));
  if (cache->global_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: cannot allocate ", global_bytes, " bytes of global blocks"));
  }
  if (options.window > 0) {
    const size_t local_bytes = cache->local_slot_bytes_ * options.num_local_slots;
    cache->local_ = static_cast<uint8_t*>(backend->Alloc(local_bytes));
    if (cache->local_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KV cache: cannot allocate ", local_bytes, " bytes of local rings"));
    }
  }
  return cache;
}

KvCache::~KvCache() {
  if (global_ != nullptr) backend_->Free(global_);
  if (local_ != nullptr) backend_->Free(local_);
}

}  // namespace ced
