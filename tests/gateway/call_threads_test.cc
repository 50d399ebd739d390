// CallThreads: calls never wait for each other, idle threads are reused and
// end after their idle time.
#include "services/gateway/call_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"

namespace ced::gateway {
namespace {

// Every call blocks until all have started: a pool that made a call wait
// for a busy thread would never get there.
TEST(CallThreadsTest, BlockingCallsAllRunAtOnce) {
  CallThreads pool;
  constexpr int kCalls = 40;
  std::atomic<int> started{0}, finished{0};
  absl::Notification all_started;
  for (int i = 0; i < kCalls; ++i) {
    pool.Run([&] {
      if (++started == kCalls) all_started.Notify();
      all_started.WaitForNotificationWithTimeout(absl::Seconds(30));
      ++finished;
    });
  }
  EXPECT_TRUE(all_started.WaitForNotificationWithTimeout(absl::Seconds(30)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (finished < kCalls && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(finished, kCalls);
  EXPECT_EQ(pool.threads(), kCalls);
}

// Calls one after another run on the thread the first one started.
TEST(CallThreadsTest, AnIdleThreadTakesTheNextCall) {
  CallThreads pool;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 10; ++i) {
    absl::Notification done;
    std::thread::id id;
    pool.Run([&] {
      id = std::this_thread::get_id();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    // The next call comes once the thread waits again.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (pool.idle() != 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1u) << "a new thread started although one was idle";
  EXPECT_EQ(pool.threads(), 1);
}

TEST(CallThreadsTest, IdleThreadsEndAfterTheirIdleTime) {
  CallThreads pool(absl::Milliseconds(50));
  absl::Notification done;
  pool.Run([&] { done.Notify(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.threads() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(pool.threads(), 0);
  // And a later call still runs (on a new thread; the ended one is joined).
  absl::Notification again;
  pool.Run([&] { again.Notify(); });
  EXPECT_TRUE(again.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

// With a limit, calls past it wait for a thread to come free, and all run.
TEST(CallThreadsTest, CallsPastTheLimitWaitForAFreeThread) {
  CallThreads pool(absl::Seconds(30), /*max_threads=*/2);
  constexpr int kCalls = 7;
  std::atomic<int> running{0}, most{0}, finished{0};
  absl::Notification release;
  for (int i = 0; i < kCalls; ++i) {
    pool.Run([&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      release.WaitForNotificationWithTimeout(absl::Seconds(30));
      --running;
      ++finished;
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (running < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool.threads(), 2);
  release.Notify();
  while (finished < kCalls && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(finished, kCalls);
  EXPECT_EQ(most, 2);
  EXPECT_EQ(pool.threads(), 2);
}

// Shutdown runs what is queued, then ends every thread; a second call is
// harmless.
TEST(CallThreadsTest, ShutdownRunsQueuedCallsThenEndsTheThreads) {
  CallThreads pool(absl::Seconds(30), /*max_threads=*/1);
  std::atomic<int> finished{0};
  absl::Notification release;
  pool.Run([&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    ++finished;
  });
  for (int i = 0; i < 3; ++i) pool.Run([&] { ++finished; });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release.Notify();
  });
  pool.Shutdown();
  releaser.join();
  EXPECT_EQ(finished, 4);
  EXPECT_EQ(pool.threads(), 0);
  pool.Shutdown();
}

}  // namespace
}  // namespace ced::gateway
