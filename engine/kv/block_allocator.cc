#include "engine/kv/block_allocator.h"

#include "absl/strings/str_cat.h"

namespace ced {

BlockAllocator::BlockAllocator(int num_blocks) : num_blocks_(num_blocks), in_use_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

absl::StatusOr<std::vector<int>> BlockAllocator::Allocate(int count) {
  if (count < 0) return absl::InvalidArgumentError("negative block count");
  std::lock_guard<std::mutex> lock(mu_);
  if (count > static_cast<int>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache exhausted: need ", count,
                                                     " blocks, ", free_.size(), " of ",
                                                     num_blocks_, " free"));
  }
  std::vector<int> out(free_.end() - count, free_.end());
  free_.resize(free_.size() - count);
  for (int b : out) in_use_[b] = 1;
  return out;
}

absl::Status BlockAllocator::Free(const std::vector<int>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int b : blocks) {
    if (b < 0 || b >= num_blocks_ || !in_use_[b]) {
      return absl::InternalError(absl::StrCat("freeing block ", b, " that is not allocated"));
    }
  }
  for (int b : blocks) {
    in_use_[b] = 0;
    free_.push_back(b);
  }
  return absl::OkStatus();
}

int BlockAllocator::num_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

}  // namespace ced
