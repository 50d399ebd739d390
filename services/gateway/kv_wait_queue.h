// KvWaitQueue: the requests a gateway holds because no decode worker has
// K/V room for them now (--kv-wait-ms), in arrival order.
//
// Only the head of the queue tries to be placed again, and it tries as soon
// as one of this gateway's requests ends (its decode worker freed its
// blocks), or after `poll` without one (room freed by another gateway's
// requests). A request behind the head waits for its turn: the longest
// waiting request gets the room first, as in a first-come-first-served
// scheduler, instead of whichever waiter's back-off happened to end first.
#ifndef CED_SERVICES_GATEWAY_KV_WAIT_QUEUE_H_
#define CED_SERVICES_GATEWAY_KV_WAIT_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ced::gateway {

class KvWaitQueue {
 public:
  // `on_size` (may be empty) gets the number waiting after every change,
  // in order (it is called under the queue's lock: keep it short).
  explicit KvWaitQueue(std::function<void(int)> on_size = {}) : on_size_(std::move(on_size)) {}

  enum class Wake {
    kTry,        // at the head, and room may have freed: place it again
    kPoll,       // at the head, and `poll` passed: place it again
    kDeadline,   // `until` came first
    kCancelled,  // `cancelled()` became true
  };

  // Enters the queue at its tail; the ticket names the place.
  uint64_t Join();
  // Leaves it (placed, or given up); the next request becomes the head and
  // tries at once (what freed room for one may hold another).
  void Leave(uint64_t ticket);
  // One of this gateway's requests ended: the head tries again.
  void Released();
  // The waiter of `ticket` may have been cancelled: it checks now.
  void Notify(uint64_t ticket);

  // Blocks until `ticket` is at the head and either a request ended since its
  // last try (or the head before it left) (kTry), or `poll` passed since it
  // became the head or last tried (kPoll);
  // until `until` (kDeadline); or until `cancelled()` is true, checked on
  // Notify(ticket) and at least once a second (kCancelled). Each waiter
  // sleeps on its own condition: a release wakes the head only.
  Wake Wait(uint64_t ticket, absl::Duration poll, absl::Time until,
            const std::function<bool()>& cancelled);

  int waiting() const;

 private:
  struct Waiter {
    uint64_t ticket = 0;
    absl::CondVar cv;
  };
  using Queue = std::deque<std::unique_ptr<Waiter>>;
  Queue::iterator FindIt(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Waiter* Find(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void(int)> on_size_;
  mutable absl::Mutex mu_;
  Queue queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  // A request ended, or the head left, since the head's last try.
  bool head_try_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ced::gateway

#endif  // CED_SERVICES_GATEWAY_KV_WAIT_QUEUE_H_
