#include "bench/services/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ced::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> BuildEnv(
    const std::map<std::string, std::optional<std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (overrides.count(key) == 0) env.push_back(kv);
  }
  for (const auto& [key, value] : overrides) {
    if (value.has_value()) env.push_back(key + "=" + *value);
  }
  return env;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> Child::Spawn(const ChildOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
  if (options.pipe_stdin && pipe2(in_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError("spawn: pipe failed");
  }
  if (options.pipe_stdout && pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError("spawn: pipe failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = options.log_path.empty() ? "/dev/null" : options.log_path;
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  if (options.pipe_stdout) {
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  }
  if (options.pipe_stdin) {
    posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  // The child gets its own process group so that Terminate reaches its children.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);

  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = BuildEnv(options.env);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::unique_ptr<Child> child(new Child);
  child->name_ = args[0];
  const int rc = posix_spawnp(&child->pid_, args[0].c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (options.pipe_stdin) {
    close(in_pipe[0]);
    child->stdin_fd_ = in_pipe[1];
  }
  if (options.pipe_stdout) {
    close(out_pipe[1]);
    child->stdout_fd_ = out_pipe[0];
  }
  if (rc != 0) {
    child->pid_ = -1;
    return absl::UnavailableError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(rc)));
  }
  return child;
}

Child::~Child() {
  Terminate(5.0);
  CloseStdin();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void Child::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

absl::StatusOr<std::string> Child::ReadLine(double timeout_s) {
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

absl::StatusOr<int> Child::Wait(double timeout_s) {
  if (pid_ <= 0) return absl::FailedPreconditionError("child already reaped");
  const double deadline = Now() + timeout_s;
  while (true) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return st;
    }
    if (Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(name_, " still runs"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Child::Running() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void Child::Terminate(double grace_s) {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  if (Wait(grace_s).ok()) return;
  kill(-pid_, SIGKILL);  // its process group: the child and whatever it started
  kill(pid_, SIGKILL);
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  const std::string all = ReadFileOrEmpty(path);
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

}  // namespace ced::bench
