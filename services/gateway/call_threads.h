// The threads the gateway's calls run on (GenerateCall::Run blocks for its
// request's life: routing and reserving are synchronous), and those of the
// OpenAI API's connections (one per open connection). A call takes an idle
// thread when one waits, else a new one starts, up to `max_threads` (0: no
// limit; past it calls queue for the first thread to come free); a thread
// idle for `idle_exit` ends, so an idle gateway holds few threads. Starting a
// thread per request cost 30-45 us of its TTFT on the 2-vCPU VMs the benches
// run on (a clone, a stack mapping, and the first run on a new thread), and
// its exit another unmapping.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ced::gateway {

class CallThreads {
 public:
  explicit CallThreads(absl::Duration idle_exit = absl::Seconds(30), int max_threads = 0);
  // Shutdown().
  ~CallThreads();
  CallThreads(const CallThreads&) = delete;
  CallThreads& operator=(const CallThreads&) = delete;

  // Runs `fn` on a pool thread: at once while fewer than max_threads run
  // calls, else as soon as one of them is done.
  void Run(std::function<void()> fn);
  // The calls already queued still run; then every thread ends and is
  // joined. Run must not be called after it (the gateway waits for its own
  // calls first). Idempotent.
  void Shutdown();
  // Threads alive now (running or idle), and of them those waiting for a call.
  int threads() const;
  int idle() const;

 private:
  struct Worker {
    std::thread thread;
    bool exited = false;
  };
  void Loop(Worker* self);

  const absl::Duration idle_exit_;
  const int max_threads_;
  mutable absl::Mutex mu_;
  absl::CondVar work_;
  std::list<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::list<Worker> workers_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ced::gateway
