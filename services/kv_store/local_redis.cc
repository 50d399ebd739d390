#include "services/kv_store/local_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

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
                                                             const std::string& password) {
  const std::string binary = FindRedisServer();
  if (binary.empty()) {
    return absl::UnavailableError(
        "--kv-store local: redis-server is not installed (scripts/install_deps.sh installs it)");
  }
  std::unique_ptr<LocalRedis> r(new LocalRedis());
  char tmpl[] = "/tmp/ced-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("--kv-store local: mkdtemp failed");
  r->dir_ = tmpl;
  for (int attempt = 0; attempt < 3 && r->pid_ < 0; ++attempt) {
    r->port_ = FreePort();
    if (r->port_ == 0) continue;
    std::vector<std::string> args = {
        binary,        "--port", std::to_string(r->port_), "--bind", "127.0.0.1",
        "--dir",       r->dir_,  "--save", "",  "--appendonly", "no",
        "--maxmemory", absl::StrCat(max_memory_mb, "mb"), "--maxmemory-policy", "allkeys-lru",
        "--logfile",   r->dir_ + "/redis.log", "--daemonize", "no"};
    if (!password.empty()) args.insert(args.end(), {"--requirepass", password});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      return absl::UnavailableError("--kv-store local: cannot start redis-server");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Accepts(r->port_)) {
        r->pid_ = pid;
        break;
      }
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) break;  // lost the port race: try another
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (r->pid_ < 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (r->pid_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("--kv-store local: redis-server did not start (see ", r->dir_, "/redis.log)"));
  }
  return r;
}

void LocalRedis::Stop() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int st;
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
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
}

}  // namespace ced::services
