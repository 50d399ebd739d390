// One `ced serve --role=...` process for a test: started with its output in a
// log file, ready once it prints "... listening on ADDR (metrics ADDR[, kv
// ADDR])", SIGTERMed (then SIGKILLed) on Stop/destruction. The child gets
// SIGKILL if the test process dies. Not thread-safe.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
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
// SIGKILL if the test process dies. Returns its pid (-1: fork failed).
inline pid_t SpawnCedServe(const std::vector<std::string>& args, const std::string& log) {
  UseOneOpenMpThreadPerProcess();
  std::vector<std::string> full = {CedBinary(), "serve"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {  // async-signal-safe calls only until execv
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  EXPECT_GT(pid, 0) << "fork failed";
  return pid;
}

// The addresses a `ced serve` process prints once it listens.
struct ServeAddresses {
  std::string grpc, metrics, kv;
};

// Polls `log` (at most 120 s) until the process prints "... listening on ADDR
// (metrics ADDR[, kv ADDR])". False if it exits (then *pid = -1) or times out.
inline bool WaitUntilListening(pid_t* pid, const std::string& log, ServeAddresses* out) {
  const std::regex re(R"(listening on (\S+) \(metrics (\S+?)(, kv (\S+))?\))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (*pid > 0 && std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = ReadLog(log);
    if (std::regex_search(text, m, re)) {
      *out = {m[1], m[2], m[4]};
      return true;
    }
    int st = 0;
    if (waitpid(*pid, &st, WNOHANG) == *pid) *pid = -1;
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
    pid_ = SpawnCedServe(args, log_);
    ServeAddresses a;
    if (WaitUntilListening(&pid_, log_, &a)) {
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
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    while (waitpid(pid_, &st, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }

  bool ready() const { return !grpc_.empty(); }
  const std::string& grpc() const { return grpc_; }
  const std::string& metrics() const { return metrics_; }
  const std::string& kv() const { return kv_; }
  std::string Log() const { return ReadLog(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_, grpc_, metrics_, kv_;
};

}  // namespace ced::testing
