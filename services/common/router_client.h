// Keeps a worker registered with the router: registers (retrying until the
// router answers), sends a load report every heartbeat interval, re-registers
// when the router has forgotten the worker (router restart), and deregisters
// on Stop. With an engine, each report also carries the prefix-cache blocks
// published and evicted since the router's last acknowledged view (a full
// list after registration or when the router asks for one; DESIGN.md 1.6).
// Thread-safe; owns one background thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ced/internal/router.grpc.pb.h"
#include "engine/runtime/engine.h"

namespace ced::services {

class RouterClient {
 public:
  struct Options {
    std::string router_address;
    ced::internal::WorkerInfo worker;
    // Fills a load report (worker_id is set by the client).
    std::function<void(ced::internal::LoadReport*)> load;
    int default_interval_ms = 500;
    // Called after a heartbeat whose answer asks for freed room to be
    // reported at once (HeartbeatResponse.report_freed_room); may be empty.
    std::function<void()> on_report_freed_room;
    // Prefix cache to report (not owned; outlives the client); null: none.
    Engine* engine = nullptr;
    size_t max_delta_events = 4096;           // cache events in one report
    size_t max_full_report_hashes = 1 << 16;  // hashes in one full report
    size_t event_log_capacity = 1 << 15;      // events kept between reports
  };
  explicit RouterClient(Options options);
  ~RouterClient();
  void Start();
  // Stops heartbeats and deregisters (best effort, short deadline).
  void Stop();
  // Sends the next load report now rather than at the next interval (the
  // worker's room changed in a way the router is waiting to see, e.g. K/V
  // blocks freed after it refused a reservation for room).
  void ReportSoon();
  bool registered() const { return registered_; }

 private:
  void Loop();
  bool Register();
  void FillPrefixReport(ced::internal::PrefixCacheReport* report);

  Options options_;
  std::unique_ptr<ced::internal::Router::Stub> stub_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool report_now_ = false;  // guarded by mu_
  std::atomic<bool> registered_{false};
  int interval_ms_;
  uint64_t prefix_acked_ = 0;  // the router's view of our cache events (0: none); Loop only
};

}  // namespace ced::services
