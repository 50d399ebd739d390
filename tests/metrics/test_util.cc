#include "tests/metrics/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/common/status.h"

namespace ced::metrics::testing {

std::string FindInPath(const std::string& binary) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", binary);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/ced_metrics_XXXXXX");
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

bool WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  return static_cast<bool>(out);
}

absl::Status ChildProcess::Start(const std::vector<std::string>& argv,
                                 const std::string& stdin_path, const std::string& output_path) {
  if (proc_ != nullptr && proc_->pid() > 0) {
    return absl::FailedPreconditionError("child already started");
  }
  services::SubprocessOptions o;
  o.argv = argv;
  o.stdin_path = stdin_path.empty() ? "/dev/null" : stdin_path;
  o.output_path = output_path;
  o.append_output = true;
  o.kill_with_parent = true;
  ASSIGN_OR_RETURN(proc_, services::Subprocess::Spawn(o));
  return absl::OkStatus();
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (proc_ == nullptr || proc_->pid() <= 0) return absl::FailedPreconditionError("no child");
  absl::StatusOr<int> status = proc_->Wait(absl::ToDoubleSeconds(timeout));
  if (absl::IsDeadlineExceeded(status.status())) {
    Stop();
    return absl::DeadlineExceededError("child did not exit in time; killed");
  }
  if (!status.ok()) return status.status();
  if (WIFEXITED(*status)) return WEXITSTATUS(*status);
  return absl::InternalError(absl::StrCat("child killed by signal ", WTERMSIG(*status)));
}

bool ChildProcess::Running() { return proc_ != nullptr && proc_->Running(); }

void ChildProcess::Stop() {
  if (proc_ != nullptr) proc_->Terminate(5.0);
}

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv, const std::string& stdin_path,
                               std::string* output, absl::Duration timeout) {
  TempDir dir;
  const std::string output_path = dir.path() + "/output";
  ChildProcess child;
  if (absl::Status status = child.Start(argv, stdin_path, output_path); !status.ok()) {
    return status;
  }
  absl::StatusOr<int> code = child.Wait(timeout);
  *output = ReadFileOrEmpty(output_path);
  return code;
}

int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string HttpResult::Header(const std::string& name) const {
  for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos && absl::EqualsIgnoreCase(line.substr(0, colon), name)) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

absl::StatusOr<HttpResult> SendHttpRequest(int port, const std::string& method,
                                           const std::string& target, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  auto wait_for = [&](short events) -> absl::Status {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("HTTP request timed out");
    pollfd pfd{fd, events, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(ms));
    if (ready == 0) return absl::DeadlineExceededError("HTTP request timed out");
    if (ready < 0 && errno != EINTR) return absl::InternalError("poll failed");
    return absl::OkStatus();
  };

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
    }
    if (absl::Status s = wait_for(POLLOUT); !s.ok()) return s;
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(error)));
  }

  const std::string request =
      absl::StrCat(method, " ", target, " HTTP/1.0\r\nHost: 127.0.0.1:", port,
                   "\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (absl::Status s = wait_for(POLLOUT); !s.ok()) return s;
    } else {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
  }

  std::string response;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (absl::Status s = wait_for(POLLIN); !s.ok()) return s;
    } else {
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
  }

  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("malformed HTTP response: '", response, "'"));
  }
  HttpResult result;
  const std::string head = response.substr(0, header_end);
  const size_t first_line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, first_line_end);
  std::vector<absl::string_view> parts = absl::StrSplit(status_line, ' ');
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &result.status)) {
    return absl::DataLossError(absl::StrCat("malformed status line: '", status_line, "'"));
  }
  result.headers = first_line_end == std::string::npos ? "" : head.substr(first_line_end + 2);
  result.body = response.substr(header_end + 4);
  return result;
}

}  // namespace ced::metrics::testing
