// `ced serve --role=prefill|decode`: the two worker roles.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "kernels/cpu/isa.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/service_commands.h"
#include "services/common/host_port.h"
#include "services/common/worker_util.h"
#include "services/decode/decode_worker.h"
#include "services/kv_store/redis_store.h"
#include "services/prefill/prefill_worker.h"

namespace ced::cli {
namespace {

std::vector<FlagSpec> EngineFlags() {
  return {
      {"model", "", "model directory (config.json + model.safetensors)"},
      {"device", "cpu", "compute backend"},
      {"kv-format", "", "cache format override: f32, bf16, fp8_e4m3, fp4_e2m1"},
      {"kv-cache-mb", "256",
       "global KV cache budget in MiB, 1 .. 2^24 (on the CPU, with --kv-host-mb, at most the "
       "machine's memory)"},
      {"block-size", "16", "tokens per KV block"},
      {"max-sequences", "64", "sequences alive at once (local windows)"},
      {"held-sequences", "8",
       "finished sequences kept with their local windows (and blocks) until their room is "
       "needed: a prompt that extends one, such as an agent's next turn, continues its encoder "
       "from them instead of rebuilding the windows (DESIGN.md 1.6); 0: off"},
      {"prefix-cache", "true",
       "keep full global K/V blocks by hash chain and reuse them for prompts that start with "
       "the same tokens (DESIGN.md 1.6); --prefix-cache=false recomputes every prompt",
       true},
      {"kv-transport", "ucx",
       "KV data plane: ucx (UCX_TLS picks tcp/shm), inproc or nccl (GPU to GPU)"},
      {"warm-up", "true",
       "run the model once on a throwaway prompt before serving (the kernels' packed weights, "
       "scratch memory), so the first request is as fast as the next; --warm-up=false starts "
       "sooner",
       true},
      {"router", "127.0.0.1:50051", "router address; empty = do not register"},
      {"worker-id", "", "unique id (default: role-port)"},
      {"advertise-address", "", "gRPC address registered with the router (default: the bound one)"},
      {"drain-timeout-ms", "30000", "SIGTERM: finish in-flight work for at most this long"},
      // KV tiers below the prefix cache (README "KV tiers").
      {"kv-host-mb", "0", "host memory tier under the prefix cache, MiB (0: off)"},
      {"kv-disk-dir", "",
       "local disk tier under the host tier: this worker's own directory (empty: off)"},
      {"kv-disk-mb", "1024", "local disk tier capacity, MiB"},
      {"kv-tier-queue-mb", "256",
       "KV blocks waiting for the tier writer (host, disk, Redis), MiB; past it writes are dropped "
       "and counted (hold at least one long sequence's blocks)"},
      {"kv-store", "",
       "shared tier: redis[s]://[user:password@]host[:port][/db] (rediss: TLS; empty: off)"},
      {"kv-store-user", "", "Redis ACL user (env CED_KV_STORE_USER)"},
      {"kv-store-password-file", "",
       "file holding the Redis password, e.g. a mounted Secret (env CED_KV_STORE_PASSWORD)"},
      {"kv-store-tls-ca", "",
       "rediss://: PEM CA bundle that signed Redis's certificate (empty: the system's)"},
      {"kv-store-tls-cert", "",
       "rediss://: PEM client certificate for mutual TLS (with --kv-store-tls-key)"},
      {"kv-store-tls-key", "", "rediss://: PEM private key of --kv-store-tls-cert"},
      {"kv-store-timeout-ms", "250",
       "Redis connect and read/write timeout; past it the request recomputes"},
      {"kv-store-ttl-s", "0",
       "expire stored blocks after this long (0: Redis's maxmemory policy decides)"},
  };
}

// The KV tier flags: host/disk capacities and the shared store. Credentials:
// the URL's, then the environment's, then the flags' (a Secret's file); TLS
// files (rediss://) from flags only.
absl::Status FillKvTiers(const Flags& f, EngineOptions* e) {
  auto host = f.GetInt("kv-host-mb"), disk = f.GetInt("kv-disk-mb"),
       timeout = f.GetInt("kv-store-timeout-ms"), ttl = f.GetInt("kv-store-ttl-s"),
       queue = f.GetInt("kv-tier-queue-mb");
  for (const absl::Status& s : {host.status(), disk.status(), timeout.status(), ttl.status()}) {
    if (!s.ok()) return s;
  }
  if (!queue.ok() || *queue < 1 || *queue > (1 << 20)) {
    return absl::InvalidArgumentError("--kv-tier-queue-mb must be in [1, 2^20]");
  }
  e->kv_tier_queue_bytes = *queue << 20;
  if (*host < 0 || *host > (1 << 24)) return absl::InvalidArgumentError("--kv-host-mb must be in [0, 2^24]");
  if (*disk < 1 || *disk > (1ll << 32)) return absl::InvalidArgumentError("--kv-disk-mb must be in [1, 2^32]");
  if (*timeout < 1 || *timeout > 60000) {
    return absl::InvalidArgumentError("--kv-store-timeout-ms must be in [1, 60000]");
  }
  if (*ttl < 0) return absl::InvalidArgumentError("--kv-store-ttl-s must be >= 0");
  e->kv_host_bytes = *host << 20;
  e->kv_disk_dir = f.Get("kv-disk-dir");
  e->kv_disk_bytes = *disk << 20;
  const std::string url = f.Get("kv-store");
  if (url.empty()) {
    for (const char* name : {"kv-store-tls-ca", "kv-store-tls-cert", "kv-store-tls-key"}) {
      if (!f.Get(name).empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a rediss:// --kv-store"));
      }
    }
    return absl::OkStatus();
  }
  auto o = services::ParseRedisUrl(url);
  if (!o.ok()) return o.status();
  o->tls_ca_file = f.Get("kv-store-tls-ca");  // RedisBlockStore::Create checks them
  o->tls_cert_file = f.Get("kv-store-tls-cert");
  o->tls_key_file = f.Get("kv-store-tls-key");
  if (const char* u = std::getenv("CED_KV_STORE_USER"); u != nullptr && *u != '\0') o->user = u;
  if (const char* p = std::getenv("CED_KV_STORE_PASSWORD"); p != nullptr && *p != '\0') {
    o->password = p;
  }
  if (!f.Get("kv-store-user").empty()) o->user = f.Get("kv-store-user");
  if (const std::string file = f.Get("kv-store-password-file"); !file.empty()) {
    std::ifstream in(file);
    std::string password;
    if (!in || !std::getline(in, password)) {
      return absl::InvalidArgumentError("--kv-store-password-file: cannot read " + file);
    }
    while (!password.empty() && (password.back() == '\r' || password.back() == ' ')) password.pop_back();
    o->password = password;
  }
  o->connect_timeout_ms = static_cast<int>(*timeout);
  o->io_timeout_ms = static_cast<int>(*timeout);
  o->ttl_s = static_cast<int>(std::min<int64_t>(*ttl, 1 << 30));
  auto store = services::RedisBlockStore::Create(*o);
  if (!store.ok()) return store.status();
  e->kv_shared_store = std::move(*store);
  return absl::OkStatus();
}

constexpr int64_t kDayMs = 86400000;
constexpr int64_t kHourMs = 3600000;  // the gateway's --drain-timeout-ms bound too

// --advertise-address (and --advertise-kv-address when `kv` is given): empty
// (the bound address) or an address peers can connect to.
absl::Status AdvertiseFlags(const Flags& f, std::string* grpc, std::string* kv) {
  *grpc = f.Get("advertise-address");
  if (!grpc->empty()) RETURN_IF_ERROR(services::CheckPeerAddress("advertise-address", *grpc));
  if (kv == nullptr) return absl::OkStatus();
  *kv = f.Get("advertise-kv-address");
  if (kv->empty()) return absl::OkStatus();
  return services::CheckPeerAddress("advertise-kv-address", *kv);
}

// --router: empty (no router) or a peer address.
absl::Status RouterFlag(const Flags& f, std::string* router) {
  *router = f.Get("router");
  if (router->empty()) return absl::OkStatus();
  return services::CheckPeerAddress("router", *router);
}

absl::Status FillEngine(const Flags& f, EngineOptions* e) {
  e->model_dir = f.Get("model");
  if (e->model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  e->device = f.Get("device");
  if (!f.Get("kv-format").empty()) {
    KvFormat k;
    if (!kernels::ParseKvFormat(f.Get("kv-format"), &k)) {
      return absl::InvalidArgumentError("--kv-format must be f32, bf16, fp8_e4m3 or fp4_e2m1");
    }
    e->kv_format = k;
  }
  auto mb = f.GetInt("kv-cache-mb");
  auto bs = f.GetInt("block-size");
  auto ms = f.GetInt("max-sequences");
  auto held = f.GetInt("held-sequences");
  if (!held.ok() || *held < 0 || *held > 4096) {
    return absl::InvalidArgumentError("--held-sequences must be in [0, 4096]");
  }
  e->max_held_sequences = static_cast<int>(*held);
  for (const absl::Status& s : {mb.status(), bs.status(), ms.status()}) {
    if (!s.ok()) return s;
  }
  if (*mb < 1 || *mb > (1 << 24))
    return absl::InvalidArgumentError("--kv-cache-mb must be in [1, 2^24]");
  const std::string pc = f.Get("prefix-cache");
  if (pc != "true" && pc != "false") {
    return absl::InvalidArgumentError("--prefix-cache must be true or false");
  }
  e->prefix_cache = pc == "true";
  e->kv_cache_bytes = *mb << 20;
  e->block_size = static_cast<int>(*bs);
  e->max_sequences = static_cast<int>(*ms);
  RETURN_IF_ERROR(FillKvTiers(f, e));
  // On the CPU both the cache and the host tier are this machine's memory
  // (the cache is allocated and zeroed at start): more than there is would
  // take minutes of paging or the kernel's OOM killer, not an error.
  if (e->device == "cpu") {
    const int64_t total_mb = services::MemoryLimitMiB();
    const int64_t asked_mb = *mb + (e->kv_host_bytes >> 20);
    if (total_mb > 0 && asked_mb > total_mb) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-cache-mb (", *mb, ") plus --kv-host-mb (", e->kv_host_bytes >> 20,
                       ") is more than this machine's memory (", total_mb,
                       " MiB; a container's limit counts when lower)"));
    }
  }
  return absl::OkStatus();
}

int ServeDecode(const std::vector<std::string>& args) {
  std::vector<FlagSpec> specs = EngineFlags();
  specs.push_back({"listen", "127.0.0.1:50070", "gRPC listen address"});
  specs.push_back({"metrics-listen", "127.0.0.1:9120", "Prometheus /metrics listen address"});
  specs.push_back({"kv-listen", "127.0.0.1:50080", "KV data plane listen address"});
  specs.push_back({"advertise-kv-address", "", "KV address registered with the router (default: the bound one)"});
  specs.push_back({"max-batch", "64", "sequences per decode step"});
  specs.push_back({"max-step-tokens", "2048",
                   "token budget of one scheduler step: each running sequence's decode token "
                   "plus start work (local prefill, replay); the first start of a step always "
                   "runs"});
  specs.push_back({"reservation-timeout-ms", "30000",
                   "inactivity timeout: release a reservation once no K/V of it (chunk, tail or "
                   "prefill progress notice) has landed for this long; the client deadline "
                   "bounds the whole request"});
  specs.push_back({"max-queued", "256", "reservations waiting for K/V or a batch slot before RESOURCE_EXHAUSTED"});
  specs.push_back({"max-queued-tokens", "1048576", "prompt tokens of waiting reservations before RESOURCE_EXHAUSTED"});
  const std::vector<FlagSpec> shown = specs;  // the test-only flag stays out of --help
  specs.push_back({"step-delay-ms-for-testing", "0", "sleep before each decode step (tests only)"});
  auto f = Flags::Parse(specs, args);
  if (!f.ok()) return Fail("serve --role=decode", std::string(f.status().message()), 2);
  if (f->help()) {
    std::printf("%s", FormatHelp("ced serve --role=decode --model DIR [flags]",
                                 "Decode worker: full model, continuous batching; receives K/V "
                                 "from prefill workers over the KV data plane.",
                                 shown).c_str());
    return 0;
  }
  services::DecodeWorkerOptions o;
  if (absl::Status s = FillEngine(*f, &o.engine); !s.ok()) {
    return Fail("serve --role=decode", std::string(s.message()), 2);
  }
  o.grpc_address = f->Get("listen");
  o.metrics_address = f->Get("metrics-listen");
  o.kv_address = f->Get("kv-listen");
  o.kv_transport = f->Get("kv-transport");
  o.warm_up = f->GetBool("warm-up");
  if (absl::Status s = RouterFlag(*f, &o.router_address); !s.ok()) {
    return Fail("serve --role=decode", std::string(s.message()), 2);
  }
  if (absl::Status s = AdvertiseFlags(*f, &o.advertise_address, &o.advertise_kv_address); !s.ok()) {
    return Fail("serve --role=decode", std::string(s.message()), 2);
  }
  o.worker_id = f->Get("worker-id").empty() ? "decode-" + o.grpc_address : f->Get("worker-id");
  auto mb = f->GetIntIn("max-batch", 1, 1 << 16);
  auto rt = f->GetIntIn("reservation-timeout-ms", 1, kDayMs);
  auto dt = f->GetIntIn("drain-timeout-ms", 0, kHourMs);
  for (const absl::Status& s : {mb.status(), rt.status(), dt.status()}) {
    if (!s.ok()) return Fail("serve --role=decode", std::string(s.message()), 2);
  }
  auto sd = f->GetInt("step-delay-ms-for-testing");
  if (!sd.ok() || *sd < 0 || *sd > 60000) {
    return Fail("serve --role=decode", "--step-delay-ms-for-testing must be in [0, 60000]", 2);
  }
  o.step_delay_ms_for_testing = static_cast<int>(*sd);
  auto dq = f->GetInt("max-queued");
  auto dqt = f->GetInt("max-queued-tokens");
  if (!dq.ok() || !dqt.ok() || *dq < 1 || *dq > (1 << 20) || *dqt < 1) {
    return Fail("serve --role=decode", "--max-queued must be in [1, 2^20] and --max-queued-tokens >= 1", 2);
  }
  o.max_queued_requests = static_cast<int>(*dq);
  o.max_queued_tokens = *dqt;
  o.max_batch = static_cast<int>(*mb);
  auto mst = f->GetInt("max-step-tokens");
  if (!mst.ok() || *mst < 1 || *mst > (int64_t{1} << 24)) {
    return Fail("serve --role=decode", "--max-step-tokens must be in [1, 2^24]", 2);
  }
  o.max_step_tokens = *mst;
  o.reservation_timeout_ms = static_cast<int>(*rt);
  o.drain_timeout_ms = static_cast<int>(*dt);
  services::InstallShutdownSignals();
  auto w = services::DecodeWorker::Start(o);
  if (!w.ok()) return Fail("serve --role=decode", std::string(w.status().message()));
  std::printf("decode cpu kernels: %s\n", kernels::CpuIsaSummary().c_str());
  std::printf("decode listening on %s (metrics %s, kv %s)\n", (*w)->grpc_address().c_str(),
              (*w)->metrics_address().c_str(), (*w)->kv_address().c_str());
  std::fflush(stdout);
  services::WaitForShutdownSignal();
  (*w)->Drain();
  (*w)->Shutdown();
  return 0;
}

int ServePrefill(const std::vector<std::string>& args) {
  std::vector<FlagSpec> specs = EngineFlags();
  specs.push_back({"listen", "127.0.0.1:50060", "gRPC listen address"});
  specs.push_back({"metrics-listen", "127.0.0.1:9110", "Prometheus /metrics listen address"});
  specs.push_back({"replay-capable", "", "also hold the decoder, so the replay can run here", true});
  specs.push_back({"chunk", "256", "default prefill chunk in tokens"});
  specs.push_back({"max-queued", "256", "queued prefill requests before RESOURCE_EXHAUSTED"});
  specs.push_back({"max-queued-tokens", "1048576", "prompt tokens of queued prefill requests before RESOURCE_EXHAUSTED"});
  const std::vector<FlagSpec> shown = specs;  // the test-only flag stays out of --help
  specs.push_back({"fault-injection-for-testing", "", "see services/prefill/fault_injection.h"});
  auto f = Flags::Parse(specs, args);
  if (!f.ok()) return Fail("serve --role=prefill", std::string(f.status().message()), 2);
  if (f->help()) {
    std::printf("%s", FormatHelp("ced serve --role=prefill --model DIR [flags]",
                                 "Prefill worker: encoder-only (or encoder + replay) chunked "
                                 "prefill; streams each chunk's K/V to the decode worker.",
                                 shown).c_str());
    return 0;
  }
  services::PrefillWorkerOptions o;
  if (absl::Status s = FillEngine(*f, &o.engine); !s.ok()) {
    return Fail("serve --role=prefill", std::string(s.message()), 2);
  }
  o.engine.weights = f->GetBool("replay-capable") ? WeightSet::kEncoderReplay
                                                   : WeightSet::kEncoderOnly;
  o.grpc_address = f->Get("listen");
  o.metrics_address = f->Get("metrics-listen");
  o.kv_transport = f->Get("kv-transport");
  o.warm_up = f->GetBool("warm-up");
  if (absl::Status s = RouterFlag(*f, &o.router_address); !s.ok()) {
    return Fail("serve --role=prefill", std::string(s.message()), 2);
  }
  if (absl::Status s = AdvertiseFlags(*f, &o.advertise_address, nullptr); !s.ok()) {
    return Fail("serve --role=prefill", std::string(s.message()), 2);
  }
  o.worker_id = f->Get("worker-id").empty() ? "prefill-" + o.grpc_address : f->Get("worker-id");
  auto chunk = f->GetIntIn("chunk", 1, 1 << 20);
  auto mq = f->GetIntIn("max-queued", 1, 1 << 20);
  auto dt = f->GetIntIn("drain-timeout-ms", 0, kHourMs);
  auto mqt = f->GetIntIn("max-queued-tokens", 1, int64_t{1} << 40);
  for (const absl::Status& s : {chunk.status(), mq.status(), dt.status(), mqt.status()}) {
    if (!s.ok()) return Fail("serve --role=prefill", std::string(s.message()), 2);
  }
  o.default_chunk_tokens = static_cast<int>(*chunk);
  o.max_queued_requests = static_cast<int>(*mq);
  o.max_queued_tokens = *mqt;
  o.drain_timeout_ms = static_cast<int>(*dt);
  auto faults = services::ParsePrefillFaults(f->Get("fault-injection-for-testing"));
  if (!faults.ok()) return Fail("serve --role=prefill", std::string(faults.status().message()), 2);
  o.faults = *faults;
  services::InstallShutdownSignals();
  auto w = services::PrefillWorker::Start(o);
  if (!w.ok()) return Fail("serve --role=prefill", std::string(w.status().message()));
  std::printf("prefill cpu kernels: %s\n", kernels::CpuIsaSummary().c_str());
  std::printf("prefill listening on %s (metrics %s)\n", (*w)->grpc_address().c_str(),
              (*w)->metrics_address().c_str());
  std::fflush(stdout);
  services::WaitForShutdownSignal();
  (*w)->Drain();
  (*w)->Shutdown();
  return 0;
}

}  // namespace

int RunWorkerRole(const std::string& role, const std::vector<std::string>& args) {
  if (role == "decode") return ServeDecode(args);
  if (role == "prefill") return ServePrefill(args);
  return Fail("serve", "unknown role " + role, 2);
}

}  // namespace ced::cli
