// Fault-injection harness: router, gateway, prefill and decode workers as
// separate `ced serve --role=...` processes on loopback, each of which a test
// may signal on its own (SIGKILL, SIGTERM, SIGSTOP/SIGCONT), restart, or
// start with the prefill worker's test-only fault flag. Plus the checks every
// fault test ends with: no KV block left in use on any surviving worker, no
// wrong token. Not thread-safe (one test thread drives it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ced/v1/gateway.grpc.pb.h"
#include "gtest/gtest.h"
#include "services/common/subprocess.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {

using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// One `ced serve` process. Starting blocks until it prints its "listening on"
// line (at most 120 s; ready() false and a test failure otherwise).
class Proc {
 public:
  Proc(std::string name, const std::vector<std::string>& serve_args);
  ~Proc();  // SIGKILL and reap if still running; the log stays only on failure
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  bool ready() const { return !grpc_.empty(); }
  const std::string& name() const { return name_; }
  const std::string& grpc() const { return grpc_; }
  const std::string& metrics() const { return metrics_; }
  const std::string& kv() const { return kv_; }
  std::string Log() const;

  // Sends `sig` (the process keeps running for SIGSTOP/SIGCONT/SIGTERM).
  void Signal(int sig);
  // Waits for the process to exit; its waitpid status, or nullopt on timeout.
  std::optional<int> WaitExit(Ms timeout);
  // SIGKILL and reap.
  void Kill();
  // Not yet reaped (a process that exited on its own counts until WaitExit
  // or Kill reaps it).
  bool running() const { return proc_ != nullptr && proc_->pid() > 0; }

 private:
  std::string name_, log_, grpc_, metrics_, kv_;
  std::unique_ptr<services::Subprocess> proc_;
};

struct FaultClusterOptions {
  std::string model_dir;
  int prefill = 1;
  int decode = 1;
  int heartbeat_timeout_ms = 1000;  // router: a silent worker is stale after this
  std::vector<std::string> router_flags, gateway_flags, prefill_flags, decode_flags;
};

inline FaultClusterOptions Topology(const std::string& model_dir, int prefill, int decode) {
  FaultClusterOptions o;
  o.model_dir = model_dir;
  o.prefill = prefill;
  o.decode = decode;
  return o;
}

class FaultCluster {
 public:
  // Starts the router (on a fixed free port, so it can be restarted on the
  // same address), the gateway and the workers, and waits until the router
  // lists every worker as live and the gateway reports SERVING.
  explicit FaultCluster(FaultClusterOptions options);
  bool ok() const { return ok_; }

  Proc& router() { return *router_; }
  Proc& gateway() { return *gateway_; }
  Proc& prefill(int i) { return *prefill_[i]; }
  Proc& decode(int i) { return *decode_[i]; }
  std::string prefill_id(int i) const { return "prefill-" + std::to_string(i); }
  std::string decode_id(int i) const { return "decode-" + std::to_string(i); }
  const std::string& router_address() const { return router_address_; }
  const std::string& model_dir() const { return options_.model_dir; }

  // Starts (again) the router on its fixed address / a worker under its id.
  std::unique_ptr<Proc> StartRouter();
  std::unique_ptr<Proc> StartPrefill(int i, const std::vector<std::string>& extra = {});
  std::unique_ptr<Proc> StartDecode(int i, const std::vector<std::string>& extra = {});
  void ReplaceRouter(std::unique_ptr<Proc> p) { router_ = std::move(p); }
  void ReplacePrefill(int i, std::unique_ptr<Proc> p) { prefill_[i] = std::move(p); }
  void ReplaceDecode(int i, std::unique_ptr<Proc> p) { decode_[i] = std::move(p); }

  // Whether the router lists `worker_id` as live (false when it is unknown,
  // stale or the router does not answer).
  bool Live(const std::string& worker_id);
  // Whether the router lists `worker_id` at all.
  bool Listed(const std::string& worker_id);
  // Waits until every running worker is listed live.
  bool WaitAllLive(Ms timeout);

  // Every running decode worker has ced_kv_blocks_used == 0 and the router
  // sees every live worker idle. Polls for up to `timeout`; on success the
  // time it took goes to *took (optional). `why` gets the first busy worker.
  bool WaitNoKvInUse(Ms timeout, Ms* took = nullptr, std::string* why = nullptr);
  // Sum of a series over the running decode workers (absent = 0).
  double DecodeSum(const std::string& series);

 private:
  std::vector<std::string> WorkerArgs(const std::string& role, int i);

  FaultClusterOptions options_;
  std::string router_address_;
  std::unique_ptr<Proc> router_, gateway_;
  std::vector<std::unique_ptr<Proc>> prefill_, decode_;
  bool ok_ = false;
};

// One Generate stream the test drives by hand (reads, cancels, finishes).
class Stream {
 public:
  Stream(const std::string& gateway, const ced::v1::GenerateRequest& req, Ms deadline);
  // Reads until `n` tokens arrived in all; false when the stream ended first.
  bool ReadTokens(int n);
  void Cancel() { ctx_.TryCancel(); }
  // Reads the rest and returns the final status.
  grpc::Status Finish();
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const ced::v1::GenerateResponse& last() const { return last_; }

 private:
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<ced::v1::GenerateResponse>> reader_;
  std::vector<int32_t> tokens_;
  ced::v1::GenerateResponse last_;
};

// A greedy token-id request (ignores EOS) with a client-chosen request id.
ced::v1::GenerateRequest FaultRequest(const std::vector<int32_t>& prompt, int max_tokens,
                                      const std::string& request_id,
                                      ced::v1::ReplayOn on = ced::v1::REPLAY_ON_AUTO);

// `got` is a prefix of `want` (a failed request may stop early but must never
// stream a wrong token).
bool IsPrefix(const std::vector<int32_t>& got, const std::vector<int32_t>& want);

// Prints one measured figure as "[fault-figure] scenario key=value" (the
// bench/results/reliability.md numbers are collected from these lines).
void Figure(const std::string& scenario, const std::string& key, double value);

double MsSince(SteadyClock::time_point t0);

}  // namespace ced::testing
