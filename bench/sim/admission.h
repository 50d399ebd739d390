// Decode-instance admission, as the decode worker does it (services/decode,
// Reserve -> Engine::CreateSequence): a request is admitted only when the
// engine's block allocator (engine/kv/block_allocator.h, linked, the same
// class the worker's KV cache uses) hands out the global-pool blocks for
// prompt + max_tokens positions, and they stay allocated until it finishes.
// Allocation is all-or-nothing. Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv/block_allocator.h"

namespace ced::sim {

// ceil((prompt + max_tokens) / block_size) blocks: Engine::CreateSequence's
// figure for a sequence of that capacity, and the router's.
int64_t BlocksForRequest(int64_t prompt_tokens, int64_t max_tokens, int block_size);

// One decode instance's global KV pool.
class DecodeKvPool {
 public:
  DecodeKvPool(int64_t num_blocks, int block_size);
  // Allocates the request's blocks into `*blocks` and returns true, or
  // leaves the pool unchanged and returns false when they do not fit.
  bool TryAdmit(int64_t prompt_tokens, int64_t max_tokens, std::vector<int>* blocks);
  // Returns blocks from TryAdmit to the pool (cleared).
  void Release(std::vector<int>* blocks);
  int64_t free_blocks() const { return allocator_.num_free(); }
  int64_t total_blocks() const { return allocator_.num_total(); }

 private:
  BlockAllocator allocator_;
  int block_size_;
};

}  // namespace ced::sim
