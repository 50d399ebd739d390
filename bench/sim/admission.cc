#include "bench/sim/admission.h"

#include <algorithm>
#include <limits>

namespace ced::sim {

int64_t BlocksForRequest(int64_t prompt_tokens, int64_t max_tokens, int block_size) {
  return (prompt_tokens + max_tokens + block_size - 1) / block_size;
}

DecodeKvPool::DecodeKvPool(int64_t num_blocks, int block_size)
    : allocator_(static_cast<int>(
          std::min<int64_t>(num_blocks, std::numeric_limits<int>::max()))),
      block_size_(block_size) {}

bool DecodeKvPool::TryAdmit(int64_t prompt_tokens, int64_t max_tokens, std::vector<int>* blocks) {
  const int64_t need = BlocksForRequest(prompt_tokens, max_tokens, block_size_);
  if (need > allocator_.num_total()) return false;
  absl::StatusOr<std::vector<int>> got = allocator_.Allocate(static_cast<int>(need));
  if (!got.ok()) return false;  // RESOURCE_EXHAUSTED: no room now
  *blocks = std::move(*got);
  return true;
}

void DecodeKvPool::Release(std::vector<int>* blocks) {
  (void)allocator_.Free(*blocks);  // blocks from TryAdmit: cannot be foreign
  std::vector<int>().swap(*blocks);  // give the memory back for the next admission
}

}  // namespace ced::sim
