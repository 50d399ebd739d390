// One `ced serve --role=...` process for a test: started with its output in a
// log file, ready once it prints "... listening on ADDR (metrics ADDR[, kv
// ADDR])", SIGTERMed (then SIGKILLed) on Stop/destruction. The child gets
// SIGKILL if the test process dies. Not thread-safe.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/common/subprocess.h"
#include "tests/e2e/cluster_fixture.h"

namespace ced::testing {

// Reads a whole file ("" when missing).
inline std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `ced serve <args>` with stdout and stderr in `log`; the child gets
// SIGKILL if the test process dies. nullptr (and a test failure) when it
// cannot start.
inline std::unique_ptr<services::Subprocess> SpawnCedServe(const std::vector<std::string>& args,
                                                           const std::string& log) {
  UseOneOpenMpThreadPerProcess();
  services::SubprocessOptions options;
  options.argv = {CedBinary(), "serve"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.output_path = log;
  options.kill_with_parent = true;
  absl::StatusOr<std::unique_ptr<services::Subprocess>> child =
      services::Subprocess::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? std::move(*child) : nullptr;
}

// The addresses a `ced serve` process prints once it listens.
struct ServeAddresses {
  std::string grpc, metrics, kv;
};

// Polls `log` (at most 120 s) until the process prints "... listening on ADDR
// (metrics ADDR[, kv ADDR])". False if it exits (it is then reaped) or times
// out.
inline bool WaitUntilListening(services::Subprocess* proc, const std::string& log,
                               ServeAddresses* out) {
  const std::regex re(R"(listening on (\S+) \(metrics (\S+?)(, kv (\S+))?\))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (proc != nullptr && proc->pid() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = ReadLog(log);
    if (std::regex_search(text, m, re)) {
      *out = {m[1], m[2], m[4]};
      return true;
    }
    proc->Running();  // reaps it when it exited
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class ServiceProcess {
 public:
  // `args` follow `ced serve`. Blocks until the process is listening (at
  // most 120 s); on failure ready() is false and the test has a failure.
  explicit ServiceProcess(const std::vector<std::string>& args) {
    static int counter = 0;
    log_ = ::testing::TempDir() + "/ced_service_" + std::to_string(getpid()) + "_" +
           std::to_string(counter++) + ".log";
    proc_ = SpawnCedServe(args, log_);
    ServeAddresses a;
    if (WaitUntilListening(proc_.get(), log_, &a)) {
      grpc_ = a.grpc;
      metrics_ = a.metrics;
      kv_ = a.kv;
      return;
    }
    ADD_FAILURE() << "ced serve did not start; log:\n" << Log();
  }
  // Keeps the log (under the test temp dir) only when the test failed.
  ~ServiceProcess() {
    Stop(SIGTERM);
    if (!::testing::Test::HasFailure()) std::remove(log_.c_str());
  }
  ServiceProcess(const ServiceProcess&) = delete;
  ServiceProcess& operator=(const ServiceProcess&) = delete;

  // Sends `sig` (SIGTERM: a drain; SIGKILL: a crash) and reaps the process,
  // SIGKILLing it after 40 s.
  void Stop(int sig) {
    if (proc_ == nullptr || proc_->pid() <= 0) return;
    proc_->Signal(sig);
    if (!proc_->Wait(/*timeout_s=*/40).ok()) {
      proc_->Signal(SIGKILL);
      (void)proc_->Wait(/*timeout_s=*/-1);
    }
  }

  bool ready() const { return !grpc_.empty(); }
  const std::string& grpc() const { return grpc_; }
  const std::string& metrics() const { return metrics_; }
  const std::string& kv() const { return kv_; }
  std::string Log() const { return ReadLog(log_); }

 private:
  std::unique_ptr<services::Subprocess> proc_;
  std::string log_, grpc_, metrics_, kv_;
};

}  // namespace ced::testing
