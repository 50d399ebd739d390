#include "services/gateway/kv_wait_queue.h"

#include <algorithm>

namespace ced::gateway {

KvWaitQueue::Queue::iterator KvWaitQueue::FindIt(uint64_t ticket) {
  return std::find_if(queue_.begin(), queue_.end(),
                      [ticket](const auto& w) { return w->ticket == ticket; });
}

KvWaitQueue::Waiter* KvWaitQueue::Find(uint64_t ticket) {
  const auto it = FindIt(ticket);
  return it == queue_.end() ? nullptr : it->get();
}

uint64_t KvWaitQueue::Join() {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  if (queue_.empty()) head_try_ = false;  // it was just refused: wait for a change
  auto waiter = std::make_unique<Waiter>();
  waiter->ticket = ticket;
  queue_.push_back(std::move(waiter));
  if (on_size_) on_size_(static_cast<int>(queue_.size()));
  return ticket;
}

void KvWaitQueue::Leave(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  const auto it = FindIt(ticket);
  if (it == queue_.end()) return;
  const bool was_head = it == queue_.begin();
  queue_.erase(it);
  if (on_size_) on_size_(static_cast<int>(queue_.size()));
  if (was_head && !queue_.empty()) {
    head_try_ = true;
    queue_.front()->cv.Signal();
  }
}

void KvWaitQueue::Released() {
  absl::MutexLock lock(&mu_);
  if (queue_.empty()) return;
  head_try_ = true;
  queue_.front()->cv.Signal();  // only the head acts on it
}

void KvWaitQueue::Notify(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  if (Waiter* w = Find(ticket)) w->cv.Signal();
}

KvWaitQueue::Wake KvWaitQueue::Wait(uint64_t ticket, absl::Duration poll, absl::Time until,
                                    const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mu_);
  // Its entry stays until its owner leaves, after this returns.
  Waiter* const self = Find(ticket);
  if (self == nullptr) return Wake::kDeadline;
  absl::Time poll_at = absl::InfiniteFuture();  // set once this ticket is the head
  while (true) {
    if (cancelled()) return Wake::kCancelled;
    const absl::Time now = absl::Now();
    if (now >= until) return Wake::kDeadline;
    if (queue_.front().get() == self) {
      if (poll_at == absl::InfiniteFuture()) poll_at = now + poll;
      if (head_try_) {
        head_try_ = false;
        return Wake::kTry;
      }
      if (now >= poll_at) return Wake::kPoll;
    }
    const absl::Time wake = std::min({until, poll_at, now + absl::Seconds(1)});
    self->cv.WaitWithDeadline(&mu_, wake);
  }
}

int KvWaitQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace ced::gateway
