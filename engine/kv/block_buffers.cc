#include "engine/kv/block_buffers.h"

namespace ced {

KvBlockBuffers::KvBlockBuffers(size_t bytes, size_t max_free)
    : state_(std::make_shared<State>()) {
  state_->bytes = bytes;
  state_->max_free = max_free;
  state_->free.reserve(max_free);
}

std::shared_ptr<std::string> KvBlockBuffers::Get() {
  std::unique_ptr<std::string> buffer;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->free.empty()) {
      buffer = std::move(state_->free.back());
      state_->free.pop_back();
    } else {
      ++state_->made;
    }
  }
  if (buffer == nullptr) buffer = std::make_unique<std::string>(state_->bytes, '\0');
  // The deleter holds the state, so a buffer may outlive the pool.
  return std::shared_ptr<std::string>(buffer.release(), [state = state_](std::string* b) {
    std::unique_ptr<std::string> owned(b);
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->free.size() < state->max_free) state->free.push_back(std::move(owned));
    // else freed here (the list is reserved: no allocation under the lock)
  });
}

size_t KvBlockBuffers::free_buffers() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free.size();
}

size_t KvBlockBuffers::made() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->made;
}

}  // namespace ced
