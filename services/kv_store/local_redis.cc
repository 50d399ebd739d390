#include "services/kv_store/local_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/common/subprocess.h"

namespace ced::services {
namespace {

// A port nothing listens on now (the kernel's choice).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// True once something accepts on 127.0.0.1:port.
bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::string FindRedisServer() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/redis-server");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<LocalRedis>> LocalRedis::Start(int max_memory_mb,
                                                             const std::string& password,
                                                             const LocalRedisTls* tls) {
  std::unique_ptr<LocalRedis> r(new LocalRedis());
  r->binary_ = FindRedisServer();
  if (r->binary_.empty()) {
    return absl::UnavailableError(
        "--kv-store local: redis-server is not installed (scripts/install_deps.sh installs it)");
  }
  r->max_memory_mb_ = max_memory_mb;
  r->password_ = password;
  r->tls_ = tls != nullptr;
  if (tls != nullptr) r->tls_options_ = *tls;
  char tmpl[] = "/tmp/ced-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("--kv-store local: mkdtemp failed");
  r->dir_ = tmpl;
  for (int attempt = 0; attempt < 3 && r->proc_ == nullptr; ++attempt) {
    const int port = FreePort();
    if (port == 0) continue;
    if (absl::Status s = r->Launch(port); !s.ok() && !absl::IsAborted(s)) return s;
  }
  if (r->proc_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--kv-store local: redis-server did not start (see ", r->dir_, "/redis.log)"));
  }
  return r;
}

absl::Status LocalRedis::Launch(int port) {
  SubprocessOptions o;
  o.argv = {binary_,
            "--port",
            std::to_string(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            dir_,
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory",
            absl::StrCat(max_memory_mb_, "mb"),
            "--maxmemory-policy",
            "allkeys-lru",
            "--logfile",
            dir_ + "/redis.log",
            "--daemonize",
            "no"};
  if (!password_.empty()) o.argv.insert(o.argv.end(), {"--requirepass", password_});
  o.kill_with_parent = true;  // never outlives its owner (e.g. a SIGKILLed ced cluster)
  o.parent_death_signal = SIGTERM;
  // Transparent huge pages for Redis's heap (jemalloc, as Debian builds
  // it, madvises them): the blocks it stores are fresh memory, and a page
  // fault per 4 KiB made redis-server spend 4.6-5.2 s of CPU taking 1.1 GiB
  // of SETs on a VM, against 1.8-2.1 s with huge pages (redis-benchmark,
  // 3,000 values of 384 KiB), CPU the workers' compute shares. Nothing is
  // persisted (no fork), so THP's copy-on-write cost does not arise. A
  // MALLOC_CONF of the caller's own wins.
  if (std::getenv("MALLOC_CONF") == nullptr) o.env["MALLOC_CONF"] = "thp:always";
  if (tls_) {
    o.argv[2] = "0";  // no plain port
    o.argv.insert(o.argv.end(), {"--tls-port", std::to_string(port), "--tls-cert-file",
                                 tls_options_.cert_file, "--tls-key-file", tls_options_.key_file,
                                 "--tls-ca-cert-file", tls_options_.ca_file, "--tls-auth-clients",
                                 tls_options_.auth_clients ? "yes" : "no"});
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Spawn(o);
  if (!proc.ok()) return absl::UnavailableError("--kv-store local: cannot start redis-server");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Accepts(port)) {
      proc_ = *std::move(proc);
      port_ = port;
      return absl::OkStatus();
    }
    if (!(*proc)->Running()) break;  // lost the port race, or failed
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if ((*proc)->Signal(SIGKILL)) (void)(*proc)->Wait(-1);
  return absl::AbortedError(
      absl::StrCat("redis-server did not start on port ", port, " (see ", dir_, "/redis.log)"));
}

bool LocalRedis::Running() { return proc_ != nullptr && proc_->Running(); }

absl::Status LocalRedis::Restart() {
  if (proc_ != nullptr) proc_->Terminate(1.0);
  proc_.reset();
  return Launch(port_);
}

LocalRedis::~LocalRedis() { Stop(); }

pid_t LocalRedis::pid() const { return proc_ ? proc_->pid() : -1; }

void LocalRedis::Stop() {
  if (proc_ != nullptr) proc_->Terminate(5.0);
  proc_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
}

}  // namespace ced::services
