#include "services/common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ced::services {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> BuildEnv(
    const std::map<std::string, std::optional<std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (overrides.count(kv.substr(0, kv.find('='))) == 0) env.push_back(kv);
  }
  for (const auto& [key, value] : overrides) {
    if (value.has_value()) env.push_back(key + "=" + *value);
  }
  return env;
}

// What happens to the child's descriptors before exec, in order: applied by
// posix_spawn, or by hand after fork.
struct FdAction {
  enum Kind { kOpen, kDup2 } kind;
  int fd;            // the descriptor set up
  int from = -1;     // kDup2: the source
  const char* path;  // kOpen
  int flags = 0;
};

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const SubprocessOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  using Stdin = SubprocessOptions::Stdin;
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
  const bool pipe_in = o.stdin_path.empty() && o.stdin_from == Stdin::kPipe;
  if ((pipe_in && pipe2(in_pipe, O_CLOEXEC) != 0) ||
      (o.pipe_stdout && pipe2(out_pipe, O_CLOEXEC) != 0)) {
    return absl::InternalError(absl::StrCat("spawn: pipe: ", std::strerror(errno)));
  }
  std::vector<FdAction> actions;
  const int out_flags = O_WRONLY | O_CREAT | (o.append_output ? O_APPEND : O_TRUNC);
  if (!o.output_path.empty()) {
    actions.push_back({FdAction::kOpen, STDERR_FILENO, -1, o.output_path.c_str(), out_flags});
  }
  if (o.pipe_stdout) {
    actions.push_back({FdAction::kDup2, STDOUT_FILENO, out_pipe[1], nullptr});
    if (o.stderr_to_stdout) actions.push_back({FdAction::kDup2, STDERR_FILENO, out_pipe[1], nullptr});
  } else if (!o.output_path.empty()) {
    actions.push_back({FdAction::kDup2, STDOUT_FILENO, STDERR_FILENO, nullptr});
  }
  if (!o.stdin_path.empty()) {
    actions.push_back({FdAction::kOpen, STDIN_FILENO, -1, o.stdin_path.c_str(), O_RDONLY});
  } else if (pipe_in) {
    actions.push_back({FdAction::kDup2, STDIN_FILENO, in_pipe[0], nullptr});
  } else if (o.stdin_from == Stdin::kNull) {
    actions.push_back({FdAction::kOpen, STDIN_FILENO, -1, "/dev/null", O_RDONLY});
  }

  std::vector<std::string> args = o.argv;
  std::vector<char*> argv = Pointers(args);
  std::vector<std::string> env = BuildEnv(o.env);
  std::vector<char*> envp = Pointers(env);
  const std::string program = o.program.empty() ? args[0] : o.program;
  std::unique_ptr<Subprocess> child(new Subprocess);
  child->name_ = args[0];
  child->own_group_ = o.new_process_group;
  pid_t pid = -1;
  int rc = 0;
  if (!o.kill_with_parent) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (const FdAction& a : actions) {
      if (a.kind == FdAction::kOpen) {
        posix_spawn_file_actions_addopen(&fa, a.fd, a.path, a.flags, 0644);
      } else {
        posix_spawn_file_actions_adddup2(&fa, a.from, a.fd);
      }
    }
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // SIGPIPE as the child expects it (services ignore it, and an ignored
    // signal stays ignored across exec).
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    short flags = POSIX_SPAWN_SETSIGDEF;
    if (o.new_process_group) {
      flags |= POSIX_SPAWN_SETPGROUP;
      posix_spawnattr_setpgroup(&attr, 0);
    }
    posix_spawnattr_setflags(&attr, flags);
    rc = posix_spawnp(&pid, program.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  } else {
    // Everything is prepared above: only async-signal-safe calls in the child.
    const pid_t parent = getpid();
    pid = fork();
    if (pid < 0) {
      rc = errno;
    } else if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, o.parent_death_signal);
      if (getppid() != parent) _exit(127);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &dfl, nullptr);  // as above
      if (o.new_process_group) setpgid(0, 0);
      for (const FdAction& a : actions) {
        const int fd = a.kind == FdAction::kOpen ? open(a.path, a.flags, 0644) : a.from;
        if (fd < 0 || dup2(fd, a.fd) < 0) _exit(126);
        if (a.kind == FdAction::kOpen && fd != a.fd) close(fd);
      }
      execvpe(program.c_str(), argv.data(), envp.data());
      _exit(127);
    }
  }
  if (pipe_in) {
    close(in_pipe[0]);
    child->stdin_fd_ = in_pipe[1];
  }
  if (o.pipe_stdout) {
    close(out_pipe[1]);
    child->stdout_fd_ = out_pipe[0];
  }
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot start ", program, ": ", std::strerror(rc)));
  }
  child->pid_ = pid;
  return child;
}

Subprocess::~Subprocess() {
  Terminate(5.0);
  CloseStdin();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void Subprocess::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

int Subprocess::ReleaseStdout() {
  const int fd = stdout_fd_;
  stdout_fd_ = -1;
  return fd;
}

absl::StatusOr<std::string> Subprocess::ReadLine(double timeout_s) {
  if (stdout_fd_ < 0) return absl::FailedPreconditionError("child stdout is not a pipe");
  const double deadline = Now() + timeout_s;
  while (true) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const double left = deadline - Now();
    if (left <= 0) return absl::DeadlineExceededError(absl::StrCat(name_, ": no output line"));
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) return absl::UnavailableError(absl::StrCat(name_, ": output closed"));
    pending_.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<int> Subprocess::Wait(double timeout_s) {
  const pid_t pid = pid_;
  if (pid <= 0) return absl::FailedPreconditionError(absl::StrCat(name_, ": already reaped"));
  const double deadline = Now() + timeout_s;
  while (true) {
    int st = 0;
    const pid_t r = waitpid(pid, &st, timeout_s < 0 ? 0 : WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      if (r < 0) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
      return st;
    }
    if (timeout_s < 0) continue;  // EINTR
    if (Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(name_, " still runs"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Subprocess::Running() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

bool Subprocess::Signal(int sig) {
  const pid_t pid = pid_;
  return pid > 0 && kill(pid, sig) == 0;
}

void Subprocess::Terminate(double grace_s) {
  const pid_t pid = pid_;
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  if (!absl::IsDeadlineExceeded(Wait(grace_s).status())) return;  // reaped (or not ours)
  if (own_group_) kill(-pid, SIGKILL);  // the child and whatever it started
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  pid_ = -1;
}

bool CompletedRun::exited_ok() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

absl::StatusOr<CompletedRun> RunToCompletion(SubprocessOptions options, double timeout_s) {
  options.pipe_stdout = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(options);
  if (!child.ok()) return child.status();
  Subprocess& c = **child;
  CompletedRun run;
  const double deadline = Now() + timeout_s;
  const int fd = c.stdout_fd();
  while (true) {  // until EOF: the child (and whatever inherited the pipe) closed it
    const double left = deadline - Now();
    if (timeout_s >= 0 && left <= 0) {
      c.Terminate(/*grace_s=*/0);
      return absl::DeadlineExceededError(
          absl::StrCat(c.name(), " did not finish within ", timeout_s, " s"));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_s < 0 ? 1000 : static_cast<int>(left * 1000) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.output.append(buf, static_cast<size_t>(n));
  }
  const double left = deadline - Now();
  absl::StatusOr<int> st = c.Wait(timeout_s < 0 ? -1.0 : std::max(0.0, left));
  if (!st.ok()) {
    c.Terminate(/*grace_s=*/0);
    return absl::DeadlineExceededError(
        absl::StrCat(c.name(), " did not finish within ", timeout_s, " s"));
  }
  run.wait_status = *st;
  return run;
}

SubprocessOptions BackgroundJob(std::vector<std::string> argv, const std::string& log_path) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.stdin_from = SubprocessOptions::Stdin::kNull;
  o.output_path = log_path.empty() ? "/dev/null" : log_path;
  o.new_process_group = true;
  return o;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  const std::string all = ReadFileOrEmpty(path);
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

LineReader::~LineReader() { close(fd_); }

LineReader::Got LineReader::Next(std::string* line,
                                 std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos || (eof_ && !buffer_.empty())) {
      const size_t n = nl == std::string::npos ? buffer_.size() : nl + 1;
      line->assign(buffer_, 0, n);
      buffer_.erase(0, n);
      return Got::kLine;
    }
    if (eof_) return Got::kEof;
    int timeout_ms = -1;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Got::kTimeout;
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      eof_ = true;
      continue;
    }
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      eof_ = true;
    }
  }
}

}  // namespace ced::services
