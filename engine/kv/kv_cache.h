// The paged KV cache (DESIGN.md §1.5): a global pool of fixed-size blocks
// (every token, for each layer that is its own global source) and a local
// pool of per-sequence rings of the last W tokens of every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/kv/block_allocator.h"

namespace ced {

struct KvCacheOptions {
  KvFormat format = KvFormat::kF32;
  int kv_dim = 0;             // G*D values per row
  int num_source_layers = 0;  // layers that store global K/V
  int num_layers = 0;         // L (local rings cover every layer)
  int window = 0;             // W; 0 = no local pool
  int block_size = 16;        // tokens per global block
  int num_blocks = 0;         // global blocks
  int num_local_slots = 0;    // sequences that can hold a local ring at once
};

// Memory comes from the backend. Layouts:
//   global block: [source slot][K|V][block_size][row_bytes]
//   local slot:   [layer][K|V][W][row_bytes], position p at row p % W
// Allocation is thread-safe; row accessors are pure address arithmetic.
class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options,
                                                         Backend* backend);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheOptions& options() const { return options_; }
  size_t row_bytes() const { return row_bytes_; }
  size_t block_bytes() const { return block_bytes_; }
  size_t local_slot_bytes() const { return local_slot_bytes_; }

  uint8_t* GlobalRow(int block, int slot, int kv, int offset) const {
    return global_ + static_cast<size_t>(block) * block_bytes_ +
           ((static_cast<size_t>(slot) * 2 + kv) * options_.block_size + offset) * row_bytes_;
  }
  uint8_t* LocalRow(int local_slot, int layer, int kv, int pos) const {
    return local_ + static_cast<size_t>(local_slot) * local_slot_bytes_ +
           ((static_cast<size_t>(layer) * 2 + kv) * options_.window + pos % options_.window) *
               row_bytes_;
  }

  BlockAllocator& global_blocks() { return global_alloc_; }
  BlockAllocator& local_slots() { return local_alloc_; }
  const BlockAllocator& global_blocks() const { return global_alloc_; }
  const BlockAllocator& local_slots() const { return local_alloc_; }

 private:
  KvCache(const KvCacheOptions& options, Backend* backend);

  KvCacheOptions options_;
  Backend* backend_;
  size_t row_bytes_ = 0, block_bytes_ = 0, local_slot_bytes_ = 0;
  uint8_t* global_ = nullptr;
  uint8_t* local_ = nullptr;
  BlockAllocator global_alloc_;
  BlockAllocator local_alloc_;
};

}  // namespace ced
