// Buffers the size of one stored block (header + payload), recycled: when the
// last reference to a buffer is dropped it goes back to a free list (up to
// `max_free` buffers), and the next Get hands it out again. The tiers' hot
// paths (a block evicted from the hot cache, a block written behind to the
// shared store) copy into memory that is already mapped: a fresh 384 KiB
// buffer takes ~100 page faults, and on a VM one fault cost ~30 us, ten times
// the copy. Thread-safe; buffers may outlive the pool.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ced {

class KvBlockBuffers {
 public:
  KvBlockBuffers(size_t bytes, size_t max_free);
  // A buffer of `bytes` bytes (contents unspecified).
  std::shared_ptr<std::string> Get();
  size_t bytes() const { return state_->bytes; }
  // Buffers waiting in the free list (tests, metrics).
  size_t free_buffers() const;
  // Buffers made so far (the rest of the Gets reused one).
  size_t made() const;

 private:
  struct State {
    size_t bytes = 0, max_free = 0, made = 0;
    mutable std::mutex mu;
    std::vector<std::unique_ptr<std::string>> free;
  };
  std::shared_ptr<State> state_;
};

}  // namespace ced
