#include "kernels/cpu/thread_pool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ced::kernels {
namespace {

// How long an idle worker spins for the next loop before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);

thread_local bool t_in_pool = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
    for (auto& w : workers_) w.detach();  // the pool lives as long as the process
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // False when the pool is in use (another thread, or a nested call).
  bool TryRun(int threads, const std::function<void(int, int)>& fn) {
    if (t_in_pool || !dispatch_mu_.try_lock()) return false;
    job_ = &fn;
    job_threads_ = threads;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      if (sleepers_ > 0) cv_.notify_all();
    }
    t_in_pool = true;
    fn(0, threads);
    t_in_pool = false;
    // Every worker acknowledges every loop, so none can mistake the next
    // loop's job for this one.
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) {
        CpuRelax();
      } else {
        sched_yield();  // the worker lost its core: let it have ours
      }
    }
    dispatch_mu_.unlock();
    return true;
  }

 private:
  void Work(int id) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      auto start = std::chrono::steady_clock::now();
      int spins = 0;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) {
        CpuRelax();
        if (++spins % 128 != 0) continue;
        if (std::chrono::steady_clock::now() - start < kSpin) continue;
        std::unique_lock<std::mutex> lock(sleep_mu_);
        ++sleepers_;
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        --sleepers_;
        start = std::chrono::steady_clock::now();
      }
      seen = g;
      if (id < job_threads_) {
        t_in_pool = true;
        (*job_)(id, job_threads_);
        t_in_pool = false;
      }
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex dispatch_mu_;
  std::atomic<uint64_t> generation_{0};
  const std::function<void(int, int)>* job_ = nullptr;
  int job_threads_ = 0;
  std::atomic<int> pending_{0};
  std::mutex sleep_mu_;
  std::condition_variable cv_;
  int sleepers_ = 0;
};

std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_atfork_once;

Pool* GetPool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  std::call_once(g_atfork_once, [] {
    // A forked child has none of the workers: it makes its own pool on first use.
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(nullptr); });
  });
  static std::mutex create_mu;
  std::lock_guard<std::mutex> lock(create_mu);
  p = g_pool.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = new Pool(std::max(1, omp_get_max_threads()));
    g_pool.store(p, std::memory_order_release);
  }
  return p;
}

}  // namespace

int PoolThreads() { return GetPool()->threads(); }

void ParallelRun(const std::function<void(int, int)>& fn, int threads) {
  Pool* pool = GetPool();
  // omp_get_max_threads() follows omp_set_num_threads in the calling thread.
  const int avail = std::min(pool->threads(), std::max(1, omp_get_max_threads()));
  const int n = threads <= 0 ? avail : std::min(threads, avail);
  if (n <= 1 || !pool->TryRun(n, fn)) fn(0, 1);
}

void ParallelFor(int n, const std::function<void(int)>& fn, bool parallel) {
  if (n <= 0) return;
  if (n == 1 || !parallel) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  ParallelRun(
      [&](int, int) {
        for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
      },
      n);
}

}  // namespace ced::kernels
