// Starts `ced cluster` (router, gateway, prefill and decode pools as real
// processes on loopback) for a test and tears it down afterwards.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/common/subprocess.h"

namespace ced::testing {

inline std::string CedBinary() {
  const char* dir = std::getenv("CED_BINARY_DIR");
  return std::string(dir ? dir : CED_BINARY_DIR_DEFAULT) + "/bin/ced";
}

// Six processes share this machine's cores: OpenMP's default of one spinning
// thread per core in each of them makes everything many times slower. Keeps
// a value the caller set (CTest sets 1).
inline void UseOneOpenMpThreadPerProcess() { setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0); }

// name -> {"grpc": ..., "metrics": ..., "kv": ...}
using ClusterAddresses = std::map<std::string, std::map<std::string, std::string>>;

class LocalCluster {
 public:
  // Extra flags go to `ced cluster`. Blocks until ready (or fails the test).
  LocalCluster(const std::string& model_dir, std::vector<std::string> flags) {
    UseOneOpenMpThreadPerProcess();
    ready_file_ = ::testing::TempDir() + "/ced_cluster_ready_" + std::to_string(getpid()) + "_" +
                  std::to_string(counter_++);
    std::remove(ready_file_.c_str());
    log_ = ready_file_ + ".log";
    std::vector<std::string> args = {
        CedBinary(),           "cluster", "--model",      model_dir,  "--base-port", "0",
        "--metrics-base-port", "0",       "--ready-file", ready_file_};
    args.insert(args.end(), flags.begin(), flags.end());
    services::SubprocessOptions options;
    options.argv = std::move(args);
    options.output_path = log_;
    absl::StatusOr<std::unique_ptr<services::Subprocess>> child =
        services::Subprocess::Spawn(options);
    EXPECT_TRUE(child.ok()) << child.status();
    if (child.ok()) proc_ = std::move(*child);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(ready_file_);
      if (in) {
        std::string line;
        while (std::getline(in, line)) {
          std::istringstream ls(line);
          std::string name, kv;
          ls >> name;
          while (ls >> kv) {
            auto eq = kv.find('=');
            if (eq != std::string::npos) addresses_[name][kv.substr(0, eq)] = kv.substr(eq + 1);
          }
        }
        ready_ = true;
        return;
      }
      if (proc_ == nullptr || !proc_->Running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "cluster did not become ready; log:\n" << Log();
  }
  // Keeps the log (under the test temp dir) only when the test failed.
  ~LocalCluster() {
    Stop();
    std::remove(ready_file_.c_str());
    if (!::testing::Test::HasFailure()) std::remove(log_.c_str());
  }

  void Stop() {
    if (proc_ == nullptr || proc_->pid() <= 0) return;
    proc_->Signal(SIGTERM);
    absl::StatusOr<int> st = proc_->Wait(/*timeout_s=*/60);
    if (!st.ok()) {  // still running after 60 s
      proc_->Signal(SIGKILL);
      st = proc_->Wait(/*timeout_s=*/-1);
    }
    exit_status_ = st.ok() ? *st : 0;
  }

  // Sends `sig` to one service process of the cluster: "router", "gateway", a
  // worker id ("prefill-0", "decode-1") or another program it started, by
  // name ("redis-server"). False when it is not running.
  // Tests use SIGSTOP / SIGCONT to hold a request in flight deterministically.
  bool SignalService(const std::string& name, int sig) const {
    const pid_t child = ChildPid(name);
    return child > 0 && kill(child, sig) == 0;
  }

  // The pid of one service process of the cluster (named as for
  // SignalService), or -1 when it is not running.
  pid_t ServicePid(const std::string& name) const { return ChildPid(name); }
  // Sends `sig` to the `ced cluster` process itself.
  bool SignalCluster(int sig) const { return proc_ != nullptr && proc_->Signal(sig); }

  // The argv of one service process of the cluster (named as for
  // SignalService), as `ced cluster` started it; empty when it is not running.
  std::vector<std::string> ServiceArgv(const std::string& name) const {
    const pid_t child = ChildPid(name);
    return child > 0 ? Argv(child) : std::vector<std::string>();
  }

  bool ready() const { return ready_; }
  const ClusterAddresses& addresses() const { return addresses_; }
  std::string gateway() const { return addresses_.at("gateway").at("grpc"); }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int exit_status() const { return exit_status_; }

 private:
  // The pid of the `ced cluster` child started as `name` (its argv has
  // "--worker-id NAME" or "--role=NAME", or its program is NAME), or -1.
  pid_t ChildPid(const std::string& name) const {
    const pid_t parent = proc_ == nullptr ? -1 : proc_->pid();
    if (parent <= 0) return -1;
    DIR* proc = opendir("/proc");
    if (proc == nullptr) return -1;
    pid_t found = -1;
    while (dirent* e = readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      const std::string text((std::istreambuf_iterator<char>(stat)), {});
      const size_t close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 1));
      std::string state;
      pid_t ppid = -1;
      rest >> state >> ppid;
      if (ppid != parent) continue;
      const std::vector<std::string> argv = Argv(pid);
      // A program of its own, e.g. "redis-server" (--kv-store local), which
      // retitles itself "/usr/bin/redis-server 127.0.0.1:PORT".
      const std::string program = argv.empty() ? "" : argv[0].substr(0, argv[0].find(' '));
      if (program.substr(program.rfind('/') + 1) == name) found = pid;
      for (size_t i = 0; i < argv.size(); ++i) {
        if (argv[i] == "--role=" + name ||
            (argv[i] == "--worker-id" && i + 1 < argv.size() && argv[i + 1] == name)) {
          found = pid;
        }
      }
      if (found > 0) break;
    }
    closedir(proc);
    return found;
  }

  static std::vector<std::string> Argv(pid_t pid) {
    std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> argv;
    for (std::string arg; std::getline(cmd, arg, '\0');) argv.push_back(arg);
    return argv;
  }

  static inline int counter_ = 0;
  std::unique_ptr<services::Subprocess> proc_;  // `ced cluster`
  std::string ready_file_, log_;
  bool ready_ = false;
  ClusterAddresses addresses_;
  int exit_status_ = -1;
};

}  // namespace ced::testing
