#include "kernels/cpu/thread_pool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

namespace ced::kernels {
namespace {

// How long an idle worker spins for the next loop before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);
// A caller that has waited kStallWait for a running share, while the worker
// running it got less than half of that time on a core (another process
// holds the cores), runs loops on its own thread for kBackoff: with fewer
// cores than threads, every loop would otherwise end waiting for a
// descheduled worker.
constexpr auto kStallWait = std::chrono::microseconds(500);
constexpr auto kBackoff = std::chrono::milliseconds(20);
// The same when the caller itself got less than half of a sampled loop's
// wall time (one loop in kSampleEvery, at least kMinSampledLoop seconds).
constexpr int kSampleEvery = 8;
constexpr double kMinSampledLoop = 100e-6;

thread_local bool t_in_pool = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// A loop's thread indices [1, threads) are claimed one at a time from `word_`
// (generation << 32 | threads << 16 | next index) by whichever thread gets there first: a
// worker that wakes up, or the caller once its own share is done. So the
// caller never waits for a worker that has not started (one that lost its
// core to another process): it runs that share itself, and only waits for
// shares that are running. A worker that wakes after its loop has ended finds
// the generation changed (or no index left) and claims nothing.
class Pool {
 public:
  explicit Pool(int threads) : busy_(std::max(0, threads - 1)) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i - 1); });
    for (auto& w : workers_) {
      clockid_t clock;
      clocks_.push_back(pthread_getcpuclockid(w.native_handle(), &clock) == 0 ? clock : -1);
      w.detach();  // the pool lives as long as the process
    }
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // False when the pool is in use (another thread, or a nested call), or
  // backing off after a stall.
  bool TryRun(int threads, const std::function<void(int, int)>& fn) {
    if (t_in_pool) return false;
    if (Clock::now().time_since_epoch().count() < serial_until_.load(std::memory_order_relaxed)) {
      return false;
    }
    if (!dispatch_mu_.try_lock()) return false;
    // Every kSampleEvery-th loop also checks that the caller itself kept its
    // core (its CPU time over the loop's wall time).
    const bool sample = ++loops_ % kSampleEvery == 0;
    const Clock::time_point start = sample ? Clock::now() : Clock::time_point();
    const double start_cpu = sample ? ThreadCpuSeconds() : 0.0;
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (word_.load(std::memory_order_relaxed) >> 32) + 1;
    word_.store(gen << 32 | static_cast<uint64_t>(threads) << 16 | 1u, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      if (sleepers_ > 0) cv_.notify_all();
    }
    t_in_pool = true;
    fn(0, threads);
    // Shares no worker has claimed yet run here.
    int n = threads;
    for (int id; (id = Claim(gen, &n)) > 0;) {
      fn(id, threads);
      done_.fetch_add(1, std::memory_order_release);
    }
    t_in_pool = false;
    Clock::time_point wait0;
    std::vector<double> cpu0;
    bool checked = false;
    for (int spins = 0; done_.load(std::memory_order_acquire) != threads - 1; ++spins) {
      if (spins < 4096) {
        CpuRelax();
        continue;
      }
      if (spins == 4096) {
        wait0 = Clock::now();
        cpu0 = WorkerCpuSeconds();
      } else if (!checked && spins % 64 == 0 && Clock::now() - wait0 > kStallWait) {
        checked = true;
        const double wall = std::chrono::duration<double>(Clock::now() - wait0).count();
        const std::vector<double> cpu1 = WorkerCpuSeconds();
        for (size_t i = 0; i < cpu1.size(); ++i) {
          if (busy_[i].load(std::memory_order_relaxed) && cpu1[i] - cpu0[i] < 0.5 * wall) {
            BackOff();
          }
        }
      }
      sched_yield();  // the worker lost its core: let it have ours
    }
    if (sample) {
      const double wall = std::chrono::duration<double>(Clock::now() - start).count();
      if (wall > kMinSampledLoop && ThreadCpuSeconds() - start_cpu < 0.5 * wall) BackOff();
    }
    dispatch_mu_.unlock();
    return true;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void BackOff() {
    serial_until_.store((Clock::now() + kBackoff).time_since_epoch().count(),
                        std::memory_order_relaxed);
  }

  static double ThreadCpuSeconds() {
    timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

  // CPU time of each worker so far (0 where its clock is unavailable).
  std::vector<double> WorkerCpuSeconds() const {
    std::vector<double> out(clocks_.size(), 0.0);
    for (size_t i = 0; i < clocks_.size(); ++i) {
      timespec ts;
      if (clocks_[i] != -1 && clock_gettime(clocks_[i], &ts) == 0) {
        out[i] = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
      }
    }
    return out;
  }

  // The next unclaimed index of loop `gen`, or 0 when none is left (or the
  // loop is over). A claimed index holds the loop open: job_ stays valid.
  int Claim(uint64_t gen, int* threads) {
    uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      if ((w >> 32) != gen) return 0;
      const int id = static_cast<int>(w & 0xffff);
      if (id >= static_cast<int>((w >> 16) & 0xffff)) return 0;
      if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        *threads = static_cast<int>((w >> 16) & 0xffff);
        return id;
      }
    }
  }

  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      auto start = std::chrono::steady_clock::now();
      int spins = 0;
      while ((g = word_.load(std::memory_order_acquire) >> 32) == seen) {
        CpuRelax();
        if (++spins % 128 != 0) continue;
        if (std::chrono::steady_clock::now() - start < kSpin) continue;
        std::unique_lock<std::mutex> lock(sleep_mu_);
        ++sleepers_;
        cv_.wait(lock, [&] { return (word_.load(std::memory_order_acquire) >> 32) != seen; });
        --sleepers_;
        start = std::chrono::steady_clock::now();
      }
      seen = g;
      // job_ belongs to loop g while an index of it is claimed: the caller
      // waits for every claimed index.
      int threads = 0;
      const int id = Claim(g, &threads);
      if (id == 0) continue;
      t_in_pool = true;
      busy_[index].store(true, std::memory_order_relaxed);
      (*job_)(id, threads);
      busy_[index].store(false, std::memory_order_relaxed);
      t_in_pool = false;
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::vector<clockid_t> clocks_;        // CPU-time clock per worker, -1 if none
  std::vector<std::atomic<bool>> busy_;  // worker i is running a share
  std::atomic<int64_t> serial_until_{0};
  uint64_t loops_ =
      0;  // loops dispatched (under dispatch_mu_)  // steady_clock ticks: back off until then
  std::mutex dispatch_mu_;
  std::atomic<uint64_t> word_{0};
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<int> done_{0};
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
