// Child processes for the services bench: `ced cluster`, ucx_perftest and the
// bench's own KV sink role. Spawned with posix_spawn (never fork after gRPC
// started), with environment overrides, stdout/stderr to a log file or a pipe.
// A Child is not thread-safe; its destructor terminates the process if it
// still runs (SIGTERM, then SIGKILL after a grace period).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::bench {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is the program; looked up in PATH
  // Environment changes on top of ours: a value sets, nullopt unsets.
  std::map<std::string, std::optional<std::string>> env;
  // Where stdout and stderr go; empty: /dev/null (unless pipe_stdout).
  std::string log_path;
  bool pipe_stdin = false;   // the parent writes to / closes stdin_fd()
  bool pipe_stdout = false;  // stdout to stdout_fd(); stderr still to log_path
};

class Child {
 public:
  static absl::StatusOr<std::unique_ptr<Child>> Spawn(const ChildOptions& options);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  int stdin_fd() const { return stdin_fd_; }
  int stdout_fd() const { return stdout_fd_; }
  void CloseStdin();

  // Reads one line from the stdout pipe (without the newline). DEADLINE_EXCEEDED
  // after timeout_s, UNAVAILABLE when the pipe closes first.
  absl::StatusOr<std::string> ReadLine(double timeout_s);
  // Waits for the exit: the raw wait status, or DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(double timeout_s);
  bool Running();
  // SIGTERM, then SIGKILL after grace_s; reaps the child. No-op once exited.
  void Terminate(double grace_s);
  const std::string& name() const { return name_; }

 private:
  Child() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1, stdout_fd_ = -1;
  std::string name_;
  std::string pending_;  // stdout bytes read past the last line
};

// Contents of a file, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);
// The last `max_bytes` of a file (for error messages).
std::string TailOfFile(const std::string& path, size_t max_bytes);

}  // namespace ced::bench
