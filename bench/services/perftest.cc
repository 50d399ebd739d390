#include "bench/services/perftest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/common/subprocess.h"
#include "engine/common/status.h"

namespace ced::bench {
namespace {

constexpr int kClientAttempts = 8;
constexpr int kServerAttempts = 3;
constexpr auto kRetryPause = std::chrono::milliseconds(250);

// The final line of `-f` output: iterations, three overheads (us), bandwidth
// average and overall (MiB/s), message rate average and overall.
absl::StatusOr<double> ParseOverallMiBps(const std::string& output) {
  double found = -1;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<double> numbers;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      double v = 0;
      if (!absl::SimpleAtod(word, &v)) {
        numbers.clear();
        break;
      }
      numbers.push_back(v);
    }
    if (numbers.size() == 8) found = numbers[5];
  }
  if (found < 0) return absl::InternalError("ucx_perftest: no final result line in its output");
  return found;
}

std::vector<std::string> Args(const PerftestRun& run, bool client) {
  std::vector<std::string> a = {run.binary};
  if (client) a.push_back("127.0.0.1");
  const std::vector<std::string> rest = {"-t", run.test,
                                         "-s", absl::StrCat(run.size),
                                         "-n", absl::StrCat(run.iters),
                                         "-w", absl::StrCat(run.warmup),
                                         "-O", absl::StrCat(run.outstanding),
                                         "-p", absl::StrCat(run.port),
                                         "-f"};
  a.insert(a.end(), rest.begin(), rest.end());
  if (run.error_handling) a.push_back("-e");
  return a;
}

// A TCP port that was free a moment ago (bound to port 0, then released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<double> RunOnce(const PerftestRun& run, bool* server_died) {
  services::SubprocessOptions server_options =
      services::BackgroundJob(Args(run, /*client=*/false), run.log_dir + "/perftest_server.log");
  server_options.env["UCX_TLS"] = run.tls;
  if (run.error_handling) server_options.env["UCX_MM_ERROR_HANDLING"] = "y";
  ASSIGN_OR_RETURN(auto server, services::Subprocess::Spawn(server_options));
  const std::string client_log = run.log_dir + "/perftest_client.log";
  for (int attempt = 0; attempt < kClientAttempts; ++attempt) {
    std::this_thread::sleep_for(kRetryPause);  // let the server open its port
    services::SubprocessOptions client_options =
        services::BackgroundJob(Args(run, /*client=*/true), client_log);
    client_options.env["UCX_TLS"] = run.tls;
    if (run.error_handling) client_options.env["UCX_MM_ERROR_HANDLING"] = "y";
    ASSIGN_OR_RETURN(auto client, services::Subprocess::Spawn(client_options));
    absl::StatusOr<int> st = client->Wait(run.timeout_s);
    if (!st.ok()) {
      client->Terminate(1);
      return absl::DeadlineExceededError(
          absl::StrCat("ucx_perftest client (", run.tls, ", ", run.size, " B) timed out"));
    }
    if (*st == 0) {
      (void)server->Wait(10);
      ASSIGN_OR_RETURN(const double mib_per_s, ParseOverallMiBps(services::ReadFileOrEmpty(client_log)));
      return mib_per_s * 1048576.0 / 1e9;
    }
    if (!server->Running()) {  // e.g. its port was taken meanwhile
      *server_died = true;
      break;
    }
  }
  return absl::UnavailableError(absl::StrCat("ucx_perftest (", run.tls, ", ", run.size,
                                             " B) failed: ", services::TailOfFile(client_log, 400),
                                             services::TailOfFile(server_options.output_path, 400)));
}

}  // namespace

absl::StatusOr<double> RunPerftest(const PerftestRun& run) {
  absl::StatusOr<double> result = absl::UnknownError("ucx_perftest did not run");
  for (int attempt = 0; attempt < kServerAttempts; ++attempt) {
    PerftestRun r = run;
    if (r.port == 0 || attempt > 0) r.port = FreePort();
    bool server_died = false;
    result = RunOnce(r, &server_died);
    if (result.ok() || !server_died) return result;
  }
  return result;
}

std::string UcxVersionString() {
  services::SubprocessOptions o = services::BackgroundJob({"ucx_info", "-v"}, "");
  o.pipe_stdout = true;
  auto child = services::Subprocess::Spawn(o);
  if (!child.ok()) return "";
  auto line = (*child)->ReadLine(10);
  (void)(*child)->Wait(10);
  if (!line.ok()) return "";
  return std::string(absl::StripPrefix(*line, "# "));
}

}  // namespace ced::bench
