// Test helpers for the metrics tests: temp dirs, child processes, a tiny HTTP client.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/common/subprocess.h"

namespace ced::metrics::testing {

// The full path of `binary` found on $PATH, or "" when absent.
std::string FindInPath(const std::string& binary);

// A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `contents` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& contents);
using services::ReadFileOrEmpty;

// A child process that is always reaped: the destructor sends SIGTERM, waits up to 5 s, then
// SIGKILLs. The child also gets SIGKILL if the test process dies (PR_SET_PDEATHSIG).
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() = default;  // the Subprocess stops it
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] (a path) with stdin from `stdin_path` ("" = /dev/null) and stdout+stderr
  // appended to `output_path`.
  absl::Status Start(const std::vector<std::string>& argv, const std::string& stdin_path,
                     const std::string& output_path);
  // Waits until exit or `timeout` (then kills it); returns the exit code, or an error for a
  // timeout or a signal.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool Running();
  // Idempotent.
  void Stop();

 private:
  std::unique_ptr<services::Subprocess> proc_;
};

// Runs argv to completion (bounded by `timeout`); the combined output goes to *output.
absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv, const std::string& stdin_path,
                               std::string* output, absl::Duration timeout);

// A port that was free a moment ago on 127.0.0.1 (bind to 0, read it, close).
int PickFreePort();

struct HttpResult {
  int status = 0;
  std::string headers;  // Raw header block, lines separated by "\r\n".
  std::string body;
  // The value of header `name` (case-insensitive), or "".
  std::string Header(const std::string& name) const;
};

// One HTTP/1.0 request to 127.0.0.1:port; the whole exchange is bounded by `timeout`.
absl::StatusOr<HttpResult> SendHttpRequest(int port, const std::string& method,
                                           const std::string& target,
                                           absl::Duration timeout = absl::Seconds(5));
inline absl::StatusOr<HttpResult> HttpGet(int port, const std::string& target) {
  return SendHttpRequest(port, "GET", target);
}

}  // namespace ced::metrics::testing
