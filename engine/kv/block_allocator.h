// Fixed-size block allocator over a fixed budget of blocks.
#pragma once

#include <mutex>
#include <vector>

#include "absl/status/statusor.h"

namespace ced {

// Hands out block indices [0, num_blocks). Thread-safe. Allocation is
// all-or-nothing; exhaustion is RESOURCE_EXHAUSTED, never a crash.
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  absl::StatusOr<std::vector<int>> Allocate(int count);
  // Returns blocks to the pool. Double frees and foreign indices are
  // programmer errors and are rejected with an error (the pool is unchanged).
  absl::Status Free(const std::vector<int>& blocks);
  int num_total() const { return num_blocks_; }
  int num_free() const;
  int num_used() const { return num_blocks_ - num_free(); }

 private:
  const int num_blocks_;
  mutable std::mutex mu_;
  std::vector<int> free_;      // stack of free indices
  std::vector<char> in_use_;   // per block
};

}  // namespace ced
