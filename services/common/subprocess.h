// Child processes, started one way everywhere (the CLI's `ced cluster`, the
// local Redis of `--kv-store local`, the services bench, the metrics tests):
// argv, environment overrides, stdin / stdout / stderr redirection, its own
// process group or not, wait with a timeout, terminate-then-kill.
//
// Spawned with posix_spawn (safe in a process that already runs gRPC);
// only `kill_with_parent` forks, since PR_SET_PDEATHSIG needs code in the
// child (async-signal-safe calls only between fork and exec).
//
// Thread-compatible, except that Signal and pid may be called while another
// thread waits in Wait (the CLI's reader threads reap their child). The
// destructor terminates the process if it still runs (SIGTERM, then SIGKILL
// after 5 s).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::services {

struct SubprocessOptions {
  std::vector<std::string> argv;
  // What runs: a path, or a name looked up in PATH; empty: argv[0].
  std::string program;
  // Environment changes on top of ours: a value sets, nullopt unsets.
  std::map<std::string, std::optional<std::string>> env;

  // stdin: ours, /dev/null, or a pipe the parent writes (stdin_fd()). A
  // non-empty stdin_path (a file to read) overrides it.
  enum class Stdin { kInherit, kNull, kPipe };
  Stdin stdin_from = Stdin::kInherit;
  std::string stdin_path;
  // stdout and stderr both go to output_path when it is set (created;
  // truncated, or appended to with append_output; "/dev/null" discards);
  // otherwise they stay ours. pipe_stdout: stdout goes to a pipe instead
  // (stdout_fd(), ReadLine), stderr as said.
  std::string output_path;
  bool append_output = false;
  bool pipe_stdout = false;
  // With pipe_stdout: stderr goes to the same pipe (like `2>&1`).
  bool stderr_to_stdout = false;

  // Its own process group: Terminate's SIGKILL then also reaches whatever
  // it started. false: it stays in ours (a terminal's Ctrl-C reaches it).
  bool new_process_group = false;
  // Signal it when this process (precisely: the thread that spawned it)
  // dies (Linux PR_SET_PDEATHSIG; forks).
  bool kill_with_parent = false;
  int parent_death_signal = SIGKILL;  // SIGTERM lets a service drain
};

// Lines of a pipe (a child's output), read with a deadline: a child that
// hangs without a word must not hold its reader forever. Owns the fd.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  enum class Got { kLine, kEof, kTimeout };
  // The next line into *line, with its '\n' (the last one may lack it);
  // kEof once the pipe closed and nothing is left; kTimeout at `deadline`
  // (the part of a line read so far is kept for the next call).
  Got Next(std::string* line, std::chrono::steady_clock::time_point deadline =
                                  std::chrono::steady_clock::time_point::max());

 private:
  const int fd_;
  std::string buffer_;
  bool eof_ = false;
};

class Subprocess {
 public:
  // INVALID_ARGUMENT for an empty argv; UNAVAILABLE when it cannot start
  // (naming the program and the reason).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const SubprocessOptions& options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }  // -1 once reaped
  const std::string& name() const { return name_; }  // argv[0]
  int stdin_fd() const { return stdin_fd_; }
  void CloseStdin();
  int stdout_fd() const { return stdout_fd_; }
  // Hands the stdout pipe to the caller, who reads and closes it.
  int ReleaseStdout();

  // One line from the stdout pipe (without the newline). DEADLINE_EXCEEDED
  // after timeout_s, UNAVAILABLE when the pipe closes first.
  absl::StatusOr<std::string> ReadLine(double timeout_s);
  // Waits for the exit and reaps it: the raw wait status (WIFEXITED, ...),
  // or DEADLINE_EXCEEDED after timeout_s (< 0: no bound), or
  // FAILED_PRECONDITION once reaped.
  absl::StatusOr<int> Wait(double timeout_s);
  bool Running();
  // Sends `sig` to the process; false once reaped.
  bool Signal(int sig);
  // SIGTERM, then SIGKILL (to its group too, when it has its own) after
  // grace_s; reaps it. No-op once reaped.
  void Terminate(double grace_s);

 private:
  Subprocess() = default;
  std::atomic<pid_t> pid_{-1};
  bool own_group_ = false;
  int stdin_fd_ = -1, stdout_fd_ = -1;
  std::string name_;
  std::string pending_;  // stdout bytes read past the last line
};

// A background job, as the benches start them: stdin /dev/null, stdout and
// stderr to `log_path` (truncated; "": discarded), its own process group.
SubprocessOptions BackgroundJob(std::vector<std::string> argv, const std::string& log_path);

// A program run to its end (RunToCompletion).
struct CompletedRun {
  int wait_status = 0;  // raw: WIFEXITED / WEXITSTATUS / WIFSIGNALED
  std::string output;   // all of its stdout (and stderr with stderr_to_stdout)
  bool exited_ok() const;  // exited with status 0
};
// Runs `options` (stdout piped: pipe_stdout is forced on) until it exits and
// returns its output, without a shell (no quoting of arguments). UNAVAILABLE
// when it cannot start; DEADLINE_EXCEEDED after timeout_s (< 0: no bound),
// the child then killed and reaped.
absl::StatusOr<CompletedRun> RunToCompletion(SubprocessOptions options, double timeout_s);

// Contents of a file, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);
// The last `max_bytes` of a file (for error messages).
std::string TailOfFile(const std::string& path, size_t max_bytes);

}  // namespace ced::services
