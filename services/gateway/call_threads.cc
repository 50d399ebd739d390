#include "services/gateway/call_threads.h"

#include <utility>

namespace ced::gateway {

CallThreads::CallThreads(absl::Duration idle_exit, int max_threads)
    : idle_exit_(idle_exit), max_threads_(max_threads) {}

CallThreads::~CallThreads() { Shutdown(); }

void CallThreads::Shutdown() {
  std::list<Worker> workers;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_.SignalAll();
  }
  // Each worker only touches its own entry (under mu_) until it returns.
  for (;;) {
    std::thread t;
    {
      absl::MutexLock lock(&mu_);
      if (workers_.empty()) break;
      t = std::move(workers_.front().thread);
      workers.splice(workers.end(), workers_, workers_.begin());
    }
    if (t.joinable()) t.join();
  }
}

int CallThreads::threads() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const Worker& w : workers_) n += w.exited ? 0 : 1;
  return n;
}

int CallThreads::idle() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

void CallThreads::Run(std::function<void()> fn) {
  std::list<Worker> gone;
  {
    absl::MutexLock lock(&mu_);
    // Threads that ended after their idle time: joined below, off the lock.
    for (auto it = workers_.begin(); it != workers_.end();) {
      auto next = std::next(it);
      if (it->exited) gone.splice(gone.end(), workers_, it);
      it = next;
    }
    queue_.push_back(std::move(fn));
    if (static_cast<int>(queue_.size()) <= idle_) {
      work_.Signal();
    } else if (max_threads_ <= 0 || static_cast<int>(workers_.size()) < max_threads_) {
      // (workers_ holds no exited thread here: they were taken out above.)
      workers_.emplace_back();
      Worker* w = &workers_.back();
      w->thread = std::thread([this, w] { Loop(w); });
    }
  }
  for (Worker& w : gone) w.thread.join();
}

void CallThreads::Loop(Worker* self) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    while (queue_.empty() && !stop_) {
      ++idle_;
      const bool timed_out = work_.WaitWithTimeout(&mu_, idle_exit_);
      --idle_;
      if (timed_out && queue_.empty()) {
        self->exited = true;
        return;
      }
    }
    if (queue_.empty()) return;  // stopping
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    fn();
    fn = nullptr;  // what it holds is released before the thread waits again
    mu_.Lock();
  }
}

}  // namespace ced::gateway
