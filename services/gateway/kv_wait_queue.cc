#include "services/gateway/kv_wait_queue.h"

#include <algorithm>

namespace ced::gateway {

uint64_t KvWaitQueue::Join() {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  if (tickets_.empty()) head_try_ = false;  // it was just refused: wait for a change
  tickets_.push_back(ticket);
  if (on_size_) on_size_(static_cast<int>(tickets_.size()));
  return ticket;
}

void KvWaitQueue::Leave(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  const auto it = std::find(tickets_.begin(), tickets_.end(), ticket);
  if (it == tickets_.end()) return;
  const bool was_head = it == tickets_.begin();
  tickets_.erase(it);
  if (on_size_) on_size_(static_cast<int>(tickets_.size()));
  if (was_head && !tickets_.empty()) {
    head_try_ = true;
    changed_.SignalAll();
  }
}

void KvWaitQueue::Released() {
  absl::MutexLock lock(&mu_);
  if (tickets_.empty()) return;
  head_try_ = true;
  changed_.SignalAll();
}

void KvWaitQueue::Notify() {
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

KvWaitQueue::Wake KvWaitQueue::Wait(uint64_t ticket, absl::Duration poll, absl::Time until,
                                    const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mu_);
  absl::Time poll_at = absl::InfiniteFuture();  // set once this ticket is the head
  while (true) {
    if (cancelled()) return Wake::kCancelled;
    const absl::Time now = absl::Now();
    if (now >= until) return Wake::kDeadline;
    const bool head = !tickets_.empty() && tickets_.front() == ticket;
    if (head) {
      if (poll_at == absl::InfiniteFuture()) poll_at = now + poll;
      if (head_try_) {
        head_try_ = false;
        return Wake::kTry;
      }
      if (now >= poll_at) return Wake::kPoll;
    }
    const absl::Time wake = std::min({until, poll_at, now + absl::Seconds(1)});
    changed_.WaitWithDeadline(&mu_, wake);
  }
}

int KvWaitQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(tickets_.size());
}

}  // namespace ced::gateway
