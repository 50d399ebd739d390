// `ced cluster`: the compose topology (router, gateway, prefill pool, decode
// pool) as local processes on loopback — the embedded default deployment.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ced/internal/router.grpc.pb.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/security_flags.h"
#include "services/cli/service_commands.h"
#include "services/common/grpc_util.h"
#include "services/common/subprocess.h"
#include "services/common/worker_util.h"
#include "services/kv_store/local_redis.h"

namespace ced::cli {
namespace {

constexpr char kWords[] = "cluster";

// When a process that went down is started again: 1 s after it went down,
// then 2, 4 .. 30 s after each later fall, at most `max` times in all.
class RestartSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Step { kScheduled, kWait, kDue, kExhausted };
  // Asked while the process is down: kScheduled the first time (delay_s()
  // says in how long), then kWait until then, then kDue once (the restart is
  // counted); kExhausted once `max` restarts were made.
  Step Next(Clock::time_point now, int max) {
    if (restarts_ >= max) return Step::kExhausted;
    if (at_ == Clock::time_point{}) {
      at_ = now + std::chrono::seconds(delay_s());
      return Step::kScheduled;
    }
    if (now < at_) return Step::kWait;
    at_ = Clock::time_point{};
    ++restarts_;
    return Step::kDue;
  }
  int delay_s() const { return std::min(30, 1 << std::min(restarts_, 5)); }  // of the next one
  int restarts() const { return restarts_; }

 private:
  int restarts_ = 0;
  Clock::time_point at_{};  // set while a restart is scheduled
};

struct Child {
  std::string name;
  std::vector<std::string> args;  // of `ced serve`, as first started
  bool embedded_router = false;
  std::unique_ptr<services::Subprocess> proc;
  std::string grpc, metrics, kv, http;
  std::string router, router_metrics;  // a gateway's embedded router
  std::thread reader;                  // forwards its output, then reaps it (and says how it ended)
  std::atomic<bool> exited{false};
  std::atomic<bool> crashed{false};  // ended by a signal or a non-zero status
  std::string how;                   // "killed by signal 9", "exited with status 1"
  RestartSchedule restarts;
};

std::mutex g_print_mu;

std::string Port(int base, int offset) { return base == 0 ? "0" : std::to_string(base + offset); }

// Starts `ced serve --role=...`, forwards its output with a prefix and waits
// (at most 120 s) for its "listening on" line (and, with `embedded_router`,
// the gateway's "embedded router on ..." line after it).
absl::Status Spawn(Child* c, const std::vector<std::string>& args, bool embedded_router = false) {
  services::SubprocessOptions o;
  o.program = "/proc/self/exe";
  o.argv = {"ced", "serve"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.pipe_stdout = true;  // stderr stays ours
  // A cluster process that dies without stopping its services (SIGKILL, a
  // crash) takes them along instead of leaving them holding their ports;
  // SIGTERM lets them finish what is in flight. (Spawn runs on the main
  // thread, which lives as long as the process.)
  o.kill_with_parent = true;
  o.parent_death_signal = SIGTERM;
  auto proc = services::Subprocess::Spawn(o);
  if (!proc.ok()) return absl::InternalError(absl::StrCat("cannot start ", c->name));
  c->proc = *std::move(proc);
  auto out = std::make_shared<services::LineReader>(c->proc->ReleaseStdout());
  std::regex re(R"(listening on (\S+) \(metrics (\S+?)(, kv (\S+?))?(, http (\S+?))?\))");
  std::regex router_re(R"(embedded router on (\S+) \(metrics (\S+?)\))");
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool ready = false, listening = false;
  while (!ready && out->Next(&line, deadline) == services::LineReader::Got::kLine) {
    std::smatch m;
    if (!listening && std::regex_search(line, m, re)) {
      c->grpc = m[1];
      c->metrics = m[2];
      c->kv = m[4];
      c->http = m[6];
      listening = true;
      ready = !embedded_router;
    } else if (listening && std::regex_search(line, m, router_re)) {
      c->router = m[1];
      c->router_metrics = m[2];
      ready = true;
    }
    std::lock_guard<std::mutex> lock(g_print_mu);
    std::printf("[%s] %s%s", c->name.c_str(), line.c_str(), line.back() == '\n' ? "" : "\n");
    std::fflush(stdout);
  }
  if (!ready) {
    return absl::UnavailableError(absl::StrCat(c->name,
                                               std::chrono::steady_clock::now() >= deadline
                                                   ? " did not say it was listening within 120 s"
                                                   : " ended before it was listening",
                                               " (see its log)"));
  }
  c->reader = std::thread([out, c] {
    std::string buf;
    while (out->Next(&buf) == services::LineReader::Got::kLine) {
      std::lock_guard<std::mutex> lock(g_print_mu);
      std::printf("[%s] %s%s", c->name.c_str(), buf.c_str(), buf.back() == '\n' ? "" : "\n");
      std::fflush(stdout);
    }
    const absl::StatusOr<int> status = c->proc->Wait(-1);
    if (status.ok()) {
      const int st = *status;
      std::lock_guard<std::mutex> lock(g_print_mu);
      if (WIFEXITED(st)) {
        c->how = absl::StrCat("exited with status ", WEXITSTATUS(st));
        c->crashed = WEXITSTATUS(st) != 0;
      } else if (WIFSIGNALED(st)) {
        c->how = absl::StrCat("killed by signal ", WTERMSIG(st));
        c->crashed = true;
      }
      std::printf("cluster: %s %s\n", c->name.c_str(), c->how.c_str());
      std::fflush(stdout);
    }
    c->exited = true;
  });
  return absl::OkStatus();
}

void StopAll(std::vector<std::unique_ptr<Child>>& children, int grace_ms) {
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    if ((*it)->proc != nullptr && !(*it)->exited) (*it)->proc->Signal(SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (auto& c : children) {
    if (c->reader.joinable()) {  // the reader reaps it
      while (!c->exited && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!c->exited) c->proc->Signal(SIGKILL);
      c->reader.join();
      continue;
    }
    if (c->proc == nullptr) continue;
    const std::chrono::duration<double> left = deadline - std::chrono::steady_clock::now();
    if (absl::IsDeadlineExceeded(c->proc->Wait(std::max(0.0, left.count())).status())) {
      c->proc->Signal(SIGKILL);
      (void)c->proc->Wait(-1);
    }
  }
}

// The arguments that start `c` again on the addresses it bound (a port 0
// became a real port: peers and clients keep the address they know).
std::vector<std::string> RestartArgs(const Child& c) {
  const std::map<std::string, std::string> bound = {
      {"--listen", c.grpc},          {"--metrics-listen", c.metrics},
      {"--kv-listen", c.kv},         {"--http-listen", c.http},
      {"--router-listen", c.router}, {"--router-metrics-listen", c.router_metrics}};
  std::vector<std::string> a = c.args;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    auto it = bound.find(a[i]);
    if (it != bound.end() && !it->second.empty()) a[i + 1] = it->second;
  }
  return a;
}

// Until SIGINT / SIGTERM: starts again, on the same addresses, a service
// process that crashed (a signal, or a non-zero status; one that exited with
// 0, e.g. after `ced client drain`, is left stopped), after 1 s, then 2, 4 ..
// 30 s between restarts, at most `max_restarts` times each.
// `redis` (--kv-store local, may be null) too: on its port, empty.
void Supervise(std::vector<std::unique_ptr<Child>>& children, int max_restarts,
               services::LocalRedis* redis) {
  using Step = RestartSchedule::Step;
  RestartSchedule redis_restarts;
  while (services::WaitForShutdownSignalFor(0.2) == 0) {
    if (redis != nullptr && !redis->Running()) {
      const int delay_s = redis_restarts.delay_s();
      const Step step = redis_restarts.Next(RestartSchedule::Clock::now(), max_restarts);
      std::lock_guard<std::mutex> lock(g_print_mu);
      if (step == Step::kScheduled) {
        std::printf(
            "cluster: redis-server (KV tier) stopped; restarting it in %d s (restart %d of "
            "--max-restarts %d); the workers recompute meanwhile\n",
            delay_s, redis_restarts.restarts() + 1, max_restarts);
      } else if (step == Step::kDue) {
        const absl::Status s = redis->Restart();
        if (s.ok()) {
          std::printf("cluster: redis-server restarted (pid %d) on %s, empty\n",
                      static_cast<int>(redis->pid()), redis->url().c_str());
        } else {
          std::printf("cluster: restarting redis-server failed: %s\n",
                      std::string(s.message()).c_str());
        }
      }
      std::fflush(stdout);
    }
    for (auto& c : children) {
      if (!c->exited || !c->crashed) continue;
      const int delay_s = c->restarts.delay_s();
      const Step step = c->restarts.Next(RestartSchedule::Clock::now(), max_restarts);
      if (step == Step::kScheduled) {
        std::lock_guard<std::mutex> lock(g_print_mu);
        std::printf("cluster: restarting %s in %d s (restart %d of --max-restarts %d)\n",
                    c->name.c_str(), delay_s, c->restarts.restarts() + 1, max_restarts);
        std::fflush(stdout);
      }
      if (step != Step::kDue) continue;
      if (c->reader.joinable()) c->reader.join();
      c->exited = false;
      c->crashed = false;
      const absl::Status s = Spawn(c.get(), RestartArgs(*c), c->embedded_router);
      std::lock_guard<std::mutex> lock(g_print_mu);
      if (s.ok()) {
        std::printf("cluster: %s restarted (pid %d) on %s\n", c->name.c_str(),
                    static_cast<int>(c->proc->pid()), c->grpc.c_str());
      } else {
        std::printf("cluster: restarting %s failed: %s\n", c->name.c_str(),
                    std::string(s.message()).c_str());
        if (c->proc != nullptr) {  // not ready in time: stopped, counted as a crash
          c->proc->Signal(SIGKILL);
          (void)c->proc->Wait(-1);
        }
        c->exited = true;
        c->crashed = true;
        if (c->restarts.restarts() >= max_restarts) {
          std::printf("cluster: %s is not restarted again (--max-restarts %d)\n",
                      c->name.c_str(), max_restarts);
        }
      }
      std::fflush(stdout);
    }
  }
}

// Waits until the router lists the expected number of live workers; fails
// at once, naming it, when one of `children` has ended meanwhile (it never
// will register: a bad flag, no memory for its cache, a crash).
absl::Status WaitForWorkers(const std::string& router, int prefill, int decode, int timeout_s,
                            const std::vector<std::unique_ptr<Child>>& children) {
  auto stub = ced::internal::Router::NewStub(services::MakeChannel(router));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& c : children) {
      if (!c->exited) continue;
      std::lock_guard<std::mutex> lock(g_print_mu);  // c->how is written under it
      return absl::UnavailableError(
          absl::StrCat(c->name, " ", c->how.empty() ? "ended" : c->how,
                       " before the workers had registered with the router (see its log)"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    ced::internal::ListWorkersResponse resp;
    if (stub->ListWorkers(&ctx, {}, &resp).ok()) {
      int p = 0, d = 0;
      for (const auto& w : resp.workers()) {
        if (!w.live()) continue;
        (w.info().role() == ced::internal::ROLE_PREFILL ? p : d)++;
      }
      if (p >= prefill && d >= decode) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::UnavailableError(
      absl::StrCat("workers did not register with the router within ", timeout_s, " s"));
}

}  // namespace

int RunCluster(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "", "model directory shared by every role"},
      {"prefill", "1", "prefill workers"},
      {"decode", "1", "decode workers"},
      {"base-port", "50050",
       "gateway port; router +1, prefill +10+i, decode +30+j, kv +50+j; 0 = any free ports"},
      {"metrics-base-port", "9100",
       "gateway metrics port; router +1, prefill +10+i, decode +30+j; 0 = any"},
      {"replay-on", "auto", "router default: prefill, decode or auto"},
      {"replay-mode", "bounded", "router default: bounded or exact"},
      {"routing", "cache_aware",
       "router placement: cache_aware or load (ced serve --role=router --help)"},
      {"prefill-replay-capable", "true", "prefill workers hold the decoder too (true/false)"},
      {"held-sequences", "8",
       "every worker's finished sequences kept with their local windows, so that the next turn "
       "continues them instead of rebuilding (0: off)"},
      {"kv-transport", "ucx", "ucx or inproc... (ucx between processes; nccl: GPU to GPU)"},
      {"device", "cpu", "compute backend of every worker: cpu, cuda or cuda-bf16"},
      {"kv-format", "", "cache format override for every worker"},
      {"kv-cache-mb", "256", "global KV cache budget per worker, MiB"},
      {"prefix-cache", "true", "every worker's prefix cache (true/false)"},
      {"kv-host-mb", "0", "every worker's host memory KV tier, MiB (0: off)"},
      {"kv-disk-dir", "", "local disk KV tier: worker W uses DIR/W (empty: off)"},
      {"kv-disk-mb", "1024", "local disk KV tier per worker, MiB"},
      {"kv-tier-queue-mb", "256",
       "every worker's tier write queue, MiB (past it writes are dropped)"},
      {"kv-store", "",
       "shared KV tier of every worker: local (a private redis-server on a free port, stopped "
       "with the cluster), redis[s]://[user:password@]host[:port][/db], or empty (off)"},
      {"kv-store-tls-ca", "", "rediss:// --kv-store: PEM CA bundle of Redis's certificate"},
      {"kv-store-tls-cert", "", "rediss:// --kv-store: PEM client certificate (mutual TLS)"},
      {"kv-store-tls-key", "", "rediss:// --kv-store: PEM key of --kv-store-tls-cert"},
      {"kv-store-mb", "256", "--kv-store local: the redis-server's maxmemory, MiB (LRU past it)"},
      {"kv-store-timeout-ms", "250",
       "every worker's Redis connect and per-command timeout; past it the request recomputes"},
      {"ready-file", "", "write the addresses of every service here once ready"},
      {"bind", "127.0.0.1", "interface of every internal listener (router, workers, KV, metrics)"},
      {"public-bind", "127.0.0.1", "interface of the gateway's public gRPC listener"},
      {"migration-limit", "3", "gateway: moves of a request off a dead decode worker (0: off)"},
      {"access-log", "",
       "gateway: log every request as it ends, one JSON line each: '-' for stderr, else a file "
       "appended to (empty: off)"},
      {"migration-wait-ms", "15000",
       "gateway: a migrating request with no decode worker to move to (the only one restarting) "
       "waits this long for one before failing with UNAVAILABLE (0: fail at once)"},
      {"reserve-retries", "2",
       "gateway: placements on another decode worker when one refuses a request's K/V "
       "reservation (cache full) (0: off)"},
      {"kv-wait-ms", "30000",
       "gateway: a request refused for K/V room waits this long for room before failing with "
       "RESOURCE_EXHAUSTED (0: fail at once)"},
      {"http", "true",
       "gateway: also serve the OpenAI-compatible HTTP API, on --public-bind at base-port + 2 "
       "(true/false)"},
      {"chat-template", "", "gateway: Jinja chat template file (default: the model's)"},
      {"tool-call-parser", "auto",
       "gateway: tool calls in chat output: hermes, deepseek_v3, none, or auto (the chat "
       "template's format)"},
      {"decode-mux", "true",
       "gateway: tokens on one multiplexed stream per decode worker (false: one per request)",
       true},
      {"http-direct-stream", "true",
       "gateway: streamed OpenAI events written to the client's socket by the thread that "
       "receives the tokens (false: by the connection's thread)",
       true},
      {"max-restarts", "5",
       "start a service process that crashed (a signal or a non-zero exit) again on the same "
       "addresses, after 1, 2, 4 .. 30 s, at most this many times each (0: never)"},
      {"embed-router", "false",
       "run the router inside the gateway process (on the router's port; no Route RPC on the "
       "request path) instead of as a process of its own",
       true},
  };
  // TLS / auth flags go to the roles (security_flags.h); this process is a
  // client of the router with the same identity.
  std::vector<std::string> own_args = args;
  std::map<std::string, std::string> security;
  if (absl::Status s = ExtractSecurityFlags("cluster", &own_args, &security); !s.ok()) {
    return Fail(kWords, std::string(s.message()), 2);
  }
  auto f = Flags::Parse(specs, own_args);
  if (!f.ok()) return Fail(kWords, std::string(f.status().message()), 2);
  if (f->help()) {
    std::printf("%s%s",
                FormatHelp("ced cluster --model DIR [--prefill N] [--decode M]",
                           "Starts router, gateway, a prefill pool and a decode pool as "
                           "local processes on loopback; stops them on SIGINT/SIGTERM.",
                           specs)
                    .c_str(),
                SecurityHelp("cluster").c_str());
    return 0;
  }
  if (absl::Status s = InstallSecurity("cluster", security); !s.ok()) {
    return Fail(kWords, std::string(s.message()), 2);
  }
  std::vector<std::string> tls_flags, gateway_security;
  for (const auto& [name, value] : security) {
    if (value.empty()) continue;
    const bool gateway_only = name == "public-client-ca" || name == "auth-tokens-file";
    (gateway_only ? gateway_security : tls_flags)
        .insert((gateway_only ? gateway_security : tls_flags).end(), {"--" + name, value});
  }
  gateway_security.insert(gateway_security.begin(), tls_flags.begin(), tls_flags.end());
  auto host_port = [](const std::string& host, const std::string& port) {
    const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
    return (v6 ? "[" + host + "]" : host) + ":" + port;
  };
  const std::string bind = f->Get("bind"), public_bind = f->Get("public-bind");
  if (bind.empty() || public_bind.empty()) {
    return Fail(kWords, "--bind and --public-bind need an interface address", 2);
  }
  if (bind == "0.0.0.0" || bind == "::" || bind == "[::]") {
    return Fail(kWords,
                "--bind must be one interface's address (workers register it with the router, "
                "and peers cannot reach a wildcard address); --public-bind may be 0.0.0.0",
                2);
  }
  const std::string model = f->Get("model");
  if (model.empty()) return Fail(kWords, "--model is required", 2);
  // The ready file is written through FILE.tmp once everything runs; a path
  // that cannot be written is refused now (a script waiting for it would
  // wait forever).
  const std::string ready_file = f->Get("ready-file");
  if (!ready_file.empty()) {
    const std::string tmp = ready_file + ".tmp";
    const bool ok = static_cast<bool>(std::ofstream(tmp));
    const int err = errno;
    std::remove(tmp.c_str());
    struct stat st;
    if (stat(ready_file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return Fail(kWords, absl::StrCat("--ready-file: '", ready_file, "' is a folder"), 2);
    }
    if (!ok) {
      return Fail(kWords,
                  absl::StrCat("--ready-file: cannot write '", tmp, "': ", std::strerror(err)), 2);
    }
  }
  if (f->Get("prefix-cache") != "true" && f->Get("prefix-cache") != "false") {
    return Fail(kWords, "--prefix-cache must be true or false", 2);
  }
  if (auto n = f->GetInt("held-sequences"); !n.ok() || *n < 0 || *n > 4096) {
    return Fail(kWords, "--held-sequences must be in [0, 4096]", 2);
  }
  auto np = f->GetInt("prefill"), nd = f->GetInt("decode"), bp = f->GetInt("base-port"),
       mp = f->GetInt("metrics-base-port");
  if (!np.ok() || !nd.ok() || !bp.ok() || !mp.ok() || *np < 0 || *nd < 1) {
    return Fail(kWords, "--prefill >= 0, --decode >= 1 and ports must be integers", 2);
  }
  const int base = static_cast<int>(*bp), mbase = static_cast<int>(*mp);
  // Every worker runs OpenMP kernels on the same machine: threads that spin
  // while waiting steal the cores their neighbours need, so wait passively
  // and share the cores out (unless the user chose otherwise).
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  setenv("OMP_NUM_THREADS",
         std::to_string(std::max<long>(1, cores / std::max<int64_t>(1, *np + *nd))).c_str(), 0);
  services::InstallShutdownSignals();
  std::vector<std::unique_ptr<Child>> children;
  auto start = [&](const std::string& name, std::vector<std::string> a,
                   bool embedded_router = false) -> absl::Status {
    auto c = std::make_unique<Child>();
    c->name = name;
    c->args = a;
    c->embedded_router = embedded_router;
    absl::Status s = Spawn(c.get(), a, embedded_router);
    children.push_back(std::move(c));
    return s;
  };
  std::vector<std::string> common_worker = tls_flags;
  common_worker.insert(
      common_worker.end(),
      {"--model", model, "--kv-transport", f->Get("kv-transport"), "--kv-cache-mb",
       f->Get("kv-cache-mb"), "--device", f->Get("device"),
       "--prefix-cache=" + f->Get("prefix-cache"), "--held-sequences", f->Get("held-sequences")});
  if (!f->Get("kv-format").empty()) {
    common_worker.insert(common_worker.end(), {"--kv-format", f->Get("kv-format")});
  }
  // KV tiers (README "KV tiers"): the shared store, and per-worker flags.
  std::unique_ptr<services::LocalRedis> local_redis;  // stopped when this returns
  std::string kv_store = f->Get("kv-store");
  std::vector<std::string> kv_tls;  // forwarded with --kv-store; workers check them
  for (const char* name : {"kv-store-tls-ca", "kv-store-tls-cert", "kv-store-tls-key"}) {
    if (f->Get(name).empty()) continue;
    if (kv_store.rfind("rediss://", 0) != 0) {
      return Fail(kWords, absl::StrCat("--", name, " needs a rediss:// --kv-store"), 2);
    }
    kv_tls.insert(kv_tls.end(), {absl::StrCat("--", name), f->Get(name)});
  }
  if (auto ms = f->GetInt("kv-store-timeout-ms"); !ms.ok() || *ms < 1 || *ms > 60000) {
    return Fail(kWords, "--kv-store-timeout-ms must be in [1, 60000]", 2);
  }
  if (auto n = f->GetInt("reserve-retries"); !n.ok() || *n < 0 || *n > 16) {
    return Fail(kWords, "--reserve-retries must be in [0, 16]", 2);
  }
  for (const char* flag : {"kv-wait-ms", "migration-wait-ms"}) {
    if (auto n = f->GetIntIn(flag, 0, 3600000); !n.ok()) {
      return Fail(kWords, std::string(n.status().message()), 2);
    }
  }
  // Checked here, not only by the gateway it is passed to: a bad value would
  // otherwise start every worker before the gateway refused it.
  if (auto n = f->GetInt("migration-limit"); !n.ok() || *n < 0 || *n > 16) {
    return Fail(kWords, "--migration-limit must be in [0, 16]", 2);
  }
  const absl::StatusOr<int64_t> restarts_flag = f->GetIntIn("max-restarts", 0, 1000);
  if (!restarts_flag.ok()) return Fail(kWords, std::string(restarts_flag.status().message()), 2);
  const int max_restarts = static_cast<int>(*restarts_flag);
  // Every worker would fail on a folder it cannot run; say why once, before
  // anything starts.
  if (absl::Status s = CheckRunnableModel(model); !s.ok()) {
    return Fail(kWords, absl::StrCat("--model: ", s.message()), 2);
  }
  // On the CPU every worker's weights, cache and host tier are this
  // machine's memory; each worker checks its cache and tier, the sum over the
  // workers is checked here. Weights at least as the file holds them: all of
  // them in a decode worker, the encoder's share in a prefill worker (more
  // when it replays), so that a cluster the machine cannot hold is refused
  // before its workers are killed for memory one by one.
  if (f->Get("device") == "cpu") {
    auto cache_mb = f->GetInt("kv-cache-mb"), host_mb = f->GetInt("kv-host-mb");
    const int64_t total_mb = services::MemoryLimitMiB();
    int64_t weights_mb = 0, encoder_mb = 0;
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(model + "/model.safetensors", ec);
    const auto config = LoadConfigFile(model + "/config.json");
    if (!ec && config.ok() && config->num_layers > 0) {
      weights_mb = static_cast<int64_t>(bytes >> 20);
      encoder_mb = weights_mb * config->num_encoder_layers / config->num_layers;
    }
    if (cache_mb.ok() && host_mb.ok() && *cache_mb > 0 && *host_mb >= 0 && total_mb > 0) {
      const int64_t need =
          (*np + *nd) * (*cache_mb + *host_mb) + *nd * weights_mb + *np * encoder_mb;
      if (need > total_mb) {
        return Fail(
            kWords,
            absl::StrCat(*np + *nd, " workers x (--kv-cache-mb ", *cache_mb, " + --kv-host-mb ",
                         *host_mb, ") + the weights (", weights_mb, " MiB in each of ", *nd,
                         " decode workers, at least ", encoder_mb, " in each of ", *np,
                         " prefill workers) = ", need, " MiB is more than this machine's memory (",
                         total_mb, " MiB; a container's limit counts when lower)"),
            2);
      }
    }
  }
  if (kv_store == "local") {
    auto mb = f->GetInt("kv-store-mb");
    if (!mb.ok() || *mb < 1 || *mb > (1 << 20)) {
      return Fail(kWords, "--kv-store-mb must be in [1, 2^20]", 2);
    }
    auto redis = services::LocalRedis::Start(static_cast<int>(*mb));
    if (!redis.ok()) return Fail(kWords, std::string(redis.status().message()));
    local_redis = std::move(*redis);
    kv_store = local_redis->url();
    std::printf("cluster: redis-server (KV tier) on %s\n", kv_store.c_str());
    std::fflush(stdout);
  }
  auto tier_flags = [&](const std::string& worker) {
    std::vector<std::string> a = {"--kv-host-mb",       f->Get("kv-host-mb"),
                                  "--kv-disk-mb",       f->Get("kv-disk-mb"),
                                  "--kv-tier-queue-mb", f->Get("kv-tier-queue-mb")};
    if (!f->Get("kv-disk-dir").empty()) {
      a.insert(a.end(), {"--kv-disk-dir", f->Get("kv-disk-dir") + "/" + worker});
    }
    if (!kv_store.empty()) {
      a.insert(a.end(),
               {"--kv-store", kv_store, "--kv-store-timeout-ms", f->Get("kv-store-timeout-ms")});
    }
    a.insert(a.end(), kv_tls.begin(), kv_tls.end());
    return a;
  };
  const bool embed_router = f->GetBool("embed-router");
  std::string router;  // the router's gRPC address, once it runs
  auto start_gateway = [&]() -> absl::Status {
    std::vector<std::string> a = {
        "--role=gateway",
        "--listen",
        host_port(public_bind, Port(base, 0)),
        "--metrics-listen",
        host_port(bind, Port(mbase, 0)),
        "--model",
        model,
        "--migration-limit",
        f->Get("migration-limit"),
        "--reserve-retries",
        f->Get("reserve-retries"),
        "--kv-wait-ms",
        f->Get("kv-wait-ms"),
        "--migration-wait-ms",
        f->Get("migration-wait-ms"),
        "--access-log",
        f->Get("access-log"),
        absl::StrCat("--decode-mux=", f->GetBool("decode-mux") ? "true" : "false"),
        absl::StrCat("--http-direct-stream=", f->GetBool("http-direct-stream") ? "true" : "false")};
    if (embed_router) {
      a.insert(a.end(), {"--embed-router", "--router-listen", host_port(bind, Port(base, 1)),
                         "--router-metrics-listen", host_port(bind, Port(mbase, 1)),
                         "--router-replay-on", f->Get("replay-on"), "--router-replay-mode",
                         f->Get("replay-mode"), "--router-routing", f->Get("routing")});
    } else {
      a.insert(a.end(), {"--router", router});
    }
    if (f->Get("http") == "true") {
      a.insert(a.end(), {"--http-listen", host_port(public_bind, Port(base, 2))});
    }
    if (!f->Get("chat-template").empty()) {
      a.insert(a.end(), {"--chat-template", f->Get("chat-template")});
    }
    a.insert(a.end(), {"--tool-call-parser", f->Get("tool-call-parser")});
    a.insert(a.end(), gateway_security.begin(), gateway_security.end());
    return start("gateway", a, embed_router);
  };
  absl::Status s;
  if (embed_router) {
    // The workers register with the gateway's router: it starts first.
    s = start_gateway();
    if (s.ok()) router = children.back()->router;
  } else {
    std::vector<std::string> router_args = {"--role=router",
                                            "--listen",
                                            host_port(bind, Port(base, 1)),
                                            "--metrics-listen",
                                            host_port(bind, Port(mbase, 1)),
                                            "--replay-on",
                                            f->Get("replay-on"),
                                            "--replay-mode",
                                            f->Get("replay-mode"),
                                            "--model",
                                            model};
    router_args.insert(router_args.end(), {"--routing", f->Get("routing")});
    router_args.insert(router_args.end(), tls_flags.begin(), tls_flags.end());
    s = start("router", router_args);
    if (s.ok()) router = children.back()->grpc;
  }
  // A worker's own flags: role, id, its ports (offset from the base ports), the router.
  auto worker_args = [&](const std::string& role, const std::string& id, int offset) {
    std::vector<std::string> a = {"--role=" + role,
                                  "--worker-id",
                                  id,
                                  "--listen",
                                  host_port(bind, Port(base, offset)),
                                  "--metrics-listen",
                                  host_port(bind, Port(mbase, offset)),
                                  "--router",
                                  router};
    a.insert(a.end(), common_worker.begin(), common_worker.end());
    return a;
  };
  for (int i = 0; s.ok() && i < *np; ++i) {
    const std::string id = absl::StrCat("prefill-", i);
    std::vector<std::string> a = worker_args("prefill", id, 10 + i);
    if (f->Get("prefill-replay-capable") == "true") a.push_back("--replay-capable");
    for (const std::string& t : tier_flags(id)) a.push_back(t);
    s = start(id, a);
  }
  for (int j = 0; s.ok() && j < *nd; ++j) {
    const std::string id = absl::StrCat("decode-", j);
    std::vector<std::string> a = worker_args("decode", id, 30 + j);
    a.insert(a.end(), {"--kv-listen", host_port(bind, Port(base, 50 + j))});
    for (const std::string& t : tier_flags(id)) a.push_back(t);
    s = start(id, a);
  }
  if (s.ok() && !embed_router) s = start_gateway();
  if (s.ok()) {
    s = WaitForWorkers(router, static_cast<int>(*np), static_cast<int>(*nd), 60, children);
  }
  if (!s.ok()) {
    StopAll(children, 5000);
    return Fail(kWords, std::string(s.message()));
  }
  std::string summary, gateway_address, gateway_http;
  for (const auto& c : children) {
    if (c->name == "gateway") {
      gateway_address = c->grpc;
      gateway_http = c->http;
    }
    if (!c->router.empty()) {  // the gateway's embedded router, under its usual name
      absl::StrAppend(&summary, "router grpc=", c->router, " metrics=", c->router_metrics, "\n");
    }
    absl::StrAppend(&summary, c->name, " grpc=", c->grpc, " metrics=", c->metrics,
                    c->kv.empty() ? "" : " kv=" + c->kv, c->http.empty() ? "" : " http=" + c->http,
                    "\n");
  }
  if (!ready_file.empty()) {
    const std::string tmp = ready_file + ".tmp";
    std::ofstream out(tmp);
    out << summary;
    out.close();
    if (!out || std::rename(tmp.c_str(), ready_file.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      std::remove(tmp.c_str());
      StopAll(children, 5000);
      return Fail(kWords, absl::StrCat("--ready-file: cannot write '", ready_file, "': ", why));
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_print_mu);
    // Where to send requests first, then every process's addresses.
    std::printf(
        "cluster ready: gateway %s (gRPC ced.v1)%s; Ctrl-C stops it\n%s", gateway_address.c_str(),
        gateway_http.empty() ? ""
                             : absl::StrCat(", OpenAI API http://", gateway_http, "/v1").c_str(),
        summary.c_str());
    std::fflush(stdout);
  }
  Supervise(children, max_restarts, local_redis.get());
  std::printf("cluster: stopping\n");
  StopAll(children, 35000);
  return 0;
}

}  // namespace ced::cli

namespace ced::cli {

// The trained default model (models/ced-pydocs, bench/quality): CED_DEFAULT_MODEL, else
// the source tree's copy this binary was built from, else the installed copy.
std::string DefaultModelDir() {
  if (const char* env = std::getenv("CED_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    return env;
  }
  for (const std::string& dir : {std::string(CED_SHIPPED_MODEL_DIR),
                                 std::string("/usr/local/share/ced/models/ced-pydocs")}) {
    if (!std::ifstream(dir + "/model.safetensors").fail()) return dir;
  }
  return "";
}

int RunUp(const std::vector<std::string>& args) {
  std::string model, preset, seed = "1";
  std::vector<std::string> rest;
  bool help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto take = [&](const std::string& name, std::string* out) {
      if (args[i] == "--" + name && i + 1 < args.size()) {
        *out = args[++i];
        return true;
      }
      if (args[i].rfind("--" + name + "=", 0) == 0) {
        *out = args[i].substr(name.size() + 3);
        return true;
      }
      return false;
    };
    if (take("model", &model) || take("preset", &preset) || take("seed", &seed)) continue;
    if (args[i] == "--help" || args[i] == "-h") help = true;
    rest.push_back(args[i]);
  }
  if (help) {
    const std::string shipped = DefaultModelDir();
    std::printf(
        "Usage: ced up [--model DIR | --preset NAME [--seed 1]] [ced cluster flags]\n\n"
        "Starts router, gateway, one prefill and one decode worker (counts settable) as local\n"
        "processes on loopback and prints the addresses; Ctrl-C stops everything.\n"
        "Without --model or --preset it serves the trained default model, ced-pydocs (a\n"
        "small CED trained on the Python documentation; models/ced-pydocs/README.md)%s.\n\n"
        "Own flags:\n  --model=DIR        model folder (config.json, model.safetensors, "
        "tokenizer)\n"
        "  --preset=NAME      serve a synthetic preset (random weights: text is noise), made\n"
        "                     in $HOME/.cache/ced/models/NAME when missing\n"
        "  --seed=1           weights seed for that preset\n\nCluster flags:\n",
        shipped.empty() ? "" : (", here " + shipped).c_str());
    return RunCluster({"--help"});
  }
  if (model.empty() && preset.empty()) {
    model = DefaultModelDir();
    if (model.empty()) {
      std::fprintf(stderr,
                   "ced up: the default model ced-pydocs is not here (set CED_DEFAULT_MODEL, "
                   "or pass --model DIR or --preset NAME); serving preset 'tiny' instead\n");
      preset = "tiny";
    } else {
      std::printf("serving the default model %s\n", model.c_str());
    }
  }
  if (model.empty()) {
    const char* home = std::getenv("HOME");
    model = std::string(home != nullptr ? home : ".") + "/.cache/ced/models/" + preset;
  }
  if (std::ifstream(model + "/model.safetensors").fail()) {
    if (preset.empty()) {
      std::fprintf(stderr,
                   "ced up: --model %s has no model.safetensors (add --preset NAME to make a "
                   "synthetic one there)\n",
                   model.c_str());
      return 2;
    }
    std::printf("making model '%s' (seed %s) in %s\n", preset.c_str(), seed.c_str(), model.c_str());
    std::fflush(stdout);
    const int rc = RunCommand("model make", {"--preset", preset, "--seed", seed, "--out", model});
    if (rc != 0) return rc;
  }
  rest.insert(rest.begin(), {"--model", model});
  return RunCluster(rest);
}

}  // namespace ced::cli
