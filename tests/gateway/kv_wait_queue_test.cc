// KvWaitQueue: first come first served; the head tries on a release, when
// the head before it leaves, or after its poll time; the others wait.
#include "services/gateway/kv_wait_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace ced::gateway {
namespace {

const auto kNever = [] { return false; };

TEST(KvWaitQueueTest, OnlyTheHeadTriesAndAReleaseWakesItAtOnce) {
  KvWaitQueue q;
  const uint64_t first = q.Join(), second = q.Join();
  EXPECT_EQ(q.waiting(), 2);
  // Not the head: nothing but the deadline ends its wait.
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(q.Wait(second, absl::Milliseconds(1), t0 + absl::Milliseconds(80), kNever),
            KvWaitQueue::Wake::kDeadline);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(80));
  // The head, released while it waits: it tries long before its poll time.
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(50));
    q.Released();
  });
  const absl::Time t1 = absl::Now();
  EXPECT_EQ(q.Wait(first, absl::Seconds(60), absl::Now() + absl::Seconds(60), kNever),
            KvWaitQueue::Wake::kTry);
  EXPECT_LT(absl::Now() - t1, absl::Seconds(30));
  releaser.join();
  // The head leaves (placed): the next one tries at once, without a release.
  q.Leave(first);
  EXPECT_EQ(q.Wait(second, absl::Seconds(60), absl::Now() + absl::Seconds(60), kNever),
            KvWaitQueue::Wake::kTry);
  q.Leave(second);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(KvWaitQueueTest, TheHeadPollsWithoutARelease) {
  KvWaitQueue q;
  const uint64_t only = q.Join();
  // Just refused: it does not try again before its poll time...
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(q.Wait(only, absl::Milliseconds(60), t0 + absl::Seconds(60), kNever),
            KvWaitQueue::Wake::kPoll);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(60));
  // ...nor after a failed try: a release before it came is used up.
  q.Released();
  EXPECT_EQ(q.Wait(only, absl::Seconds(60), absl::Now() + absl::Seconds(60), kNever),
            KvWaitQueue::Wake::kTry);
  EXPECT_EQ(q.Wait(only, absl::Seconds(60), absl::Now() + absl::Milliseconds(50), kNever),
            KvWaitQueue::Wake::kDeadline);
  q.Leave(only);
}

TEST(KvWaitQueueTest, CancelledWaitersAndLeavingFromTheMiddle) {
  KvWaitQueue q;
  const uint64_t a = q.Join(), b = q.Join(), c = q.Join();
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(40));
    cancel.store(true);
    q.Notify(c);
  });
  EXPECT_EQ(
      q.Wait(c, absl::Seconds(60), absl::Now() + absl::Seconds(60), [&] { return cancel.load(); }),
      KvWaitQueue::Wake::kCancelled);
  canceller.join();
  q.Leave(c);
  q.Leave(b);  // from the middle: the head stays the head
  EXPECT_EQ(q.waiting(), 1);
  q.Released();
  EXPECT_EQ(q.Wait(a, absl::Seconds(60), absl::Now() + absl::Seconds(60), kNever),
            KvWaitQueue::Wake::kTry);
  q.Leave(a);
  q.Leave(a);  // twice: nothing
  EXPECT_EQ(q.waiting(), 0);
}

// Waiters released one at a time are served in the order they joined.
TEST(KvWaitQueueTest, ServedInArrivalOrder) {
  KvWaitQueue q;
  constexpr int kWaiters = 5;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kWaiters; ++i) tickets.push_back(q.Join());
  std::vector<int> order;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int i = kWaiters - 1; i >= 0; --i) {  // started in reverse
    threads.emplace_back([&, i] {
      if (q.Wait(tickets[static_cast<size_t>(i)], absl::Seconds(60),
                 absl::Now() + absl::Seconds(60), kNever) == KvWaitQueue::Wake::kTry) {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      }
      q.Leave(tickets[static_cast<size_t>(i)]);
    });
  }
  q.Released();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace ced::gateway
