// Keeps a worker registered with the router: registers (retrying until the
// router answers), sends a load report every heartbeat interval, re-registers
// when the router has forgotten the worker (router restart), and deregisters
// on Stop. Thread-safe; owns one background thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ced/internal/router.grpc.pb.h"

namespace ced::services {

class RouterClient {
 public:
  struct Options {
    std::string router_address;
    ced::internal::WorkerInfo worker;
    // Fills a load report (worker_id is set by the client).
    std::function<void(ced::internal::LoadReport*)> load;
    int default_interval_ms = 500;
  };
  explicit RouterClient(Options options);
  ~RouterClient();
  void Start();
  // Stops heartbeats and deregisters (best effort, short deadline).
  void Stop();
  bool registered() const { return registered_; }

 private:
  void Loop();
  bool Register();

  Options options_;
  std::unique_ptr<ced::internal::Router::Stub> stub_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> registered_{false};
  int interval_ms_;
};

}  // namespace ced::services
