#include "tests/fault/fault_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/service_process.h"
#include "tests/metrics/test_util.h"

namespace ced::testing {

double MsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

void Figure(const std::string& scenario, const std::string& key, double value) {
  std::printf("[fault-figure] %s %s=%.0f\n", scenario.c_str(), key.c_str(), value);
  std::fflush(stdout);
}

Proc::Proc(std::string name, const std::vector<std::string>& serve_args) : name_(std::move(name)) {
  static int counter = 0;
  log_ = ::testing::TempDir() + "/ced_fault_" + std::to_string(getpid()) + "_" +
         std::to_string(counter++) + "_" + name_ + ".log";
  proc_ = SpawnCedServe(serve_args, log_);
  ServeAddresses a;
  const bool listening = WaitUntilListening(proc_.get(), log_, &a);
  if (listening) {
    grpc_ = a.grpc;
    metrics_ = a.metrics;
    kv_ = a.kv;
    return;
  }
  ADD_FAILURE() << name_ << " did not start; log:\n" << Log();
}

Proc::~Proc() {
  Kill();
  if (!::testing::Test::HasFailure()) std::remove(log_.c_str());
}

std::string Proc::Log() const { return ReadLog(log_); }

void Proc::Signal(int sig) {
  if (proc_ != nullptr) proc_->Signal(sig);
}

std::optional<int> Proc::WaitExit(Ms timeout) {
  if (!running()) return std::nullopt;
  absl::StatusOr<int> st = proc_->Wait(std::chrono::duration<double>(timeout).count());
  if (!st.ok()) return std::nullopt;
  return *st;
}

void Proc::Kill() {
  if (!running()) return;
  proc_->Signal(SIGKILL);
  (void)proc_->Wait(/*timeout_s=*/-1);
}

FaultCluster::FaultCluster(FaultClusterOptions options) : options_(std::move(options)) {
  // A port that was free a moment ago: the router must come back on the same
  // address after a restart, so it cannot use port 0.
  router_address_ = "127.0.0.1:" + std::to_string(metrics::testing::PickFreePort());
  router_ = StartRouter();
  if (!router_->ready()) return;
  std::vector<std::string> gw = {"--role=gateway",   "--listen",    "127.0.0.1:0",
                                 "--metrics-listen", "127.0.0.1:0", "--router",
                                 router_address_,    "--model",     options_.model_dir};
  gw.insert(gw.end(), options_.gateway_flags.begin(), options_.gateway_flags.end());
  gateway_ = std::make_unique<Proc>("gateway", gw);
  if (!gateway_->ready()) return;
  for (int i = 0; i < options_.prefill; ++i) {
    prefill_.push_back(StartPrefill(i));
    if (!prefill_.back()->ready()) return;
  }
  for (int i = 0; i < options_.decode; ++i) {
    decode_.push_back(StartDecode(i));
    if (!decode_.back()->ready()) return;
  }
  if (!WaitAllLive(Ms(30000))) {
    ADD_FAILURE() << "workers did not register; router log:\n" << router_->Log();
    return;
  }
  if (!WaitUntil([&] { return HealthStatus(gateway_->grpc(), "") == 1; }, Ms(30000))) {
    ADD_FAILURE() << "gateway not SERVING; log:\n" << gateway_->Log();
    return;
  }
  ok_ = true;
}

std::unique_ptr<Proc> FaultCluster::StartRouter() {
  std::vector<std::string> args = {"--role=router",
                                   "--listen",
                                   router_address_,
                                   "--metrics-listen",
                                   "127.0.0.1:0",
                                   "--heartbeat-timeout-ms",
                                   std::to_string(options_.heartbeat_timeout_ms),
                                   "--model",
                                   options_.model_dir};
  args.insert(args.end(), options_.router_flags.begin(), options_.router_flags.end());
  return std::make_unique<Proc>("router", args);
}

std::vector<std::string> FaultCluster::WorkerArgs(const std::string& role, int i) {
  return {"--role=" + role,
          "--worker-id",
          role + "-" + std::to_string(i),
          "--listen",
          "127.0.0.1:0",
          "--metrics-listen",
          "127.0.0.1:0",
          "--router",
          router_address_,
          "--model",
          options_.model_dir,
          "--kv-cache-mb",
          "32"};
}

std::unique_ptr<Proc> FaultCluster::StartPrefill(int i, const std::vector<std::string>& extra) {
  std::vector<std::string> args = WorkerArgs("prefill", i);
  args.push_back("--replay-capable");
  args.insert(args.end(), options_.prefill_flags.begin(), options_.prefill_flags.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Proc>(prefill_id(i), args);
}

std::unique_ptr<Proc> FaultCluster::StartDecode(int i, const std::vector<std::string>& extra) {
  std::vector<std::string> args = WorkerArgs("decode", i);
  args.insert(args.end(), {"--kv-listen", "127.0.0.1:0"});
  args.insert(args.end(), options_.decode_flags.begin(), options_.decode_flags.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Proc>(decode_id(i), args);
}

bool FaultCluster::Live(const std::string& worker_id) {
  const auto workers = ListWorkers(router_address_);
  if (!workers) return false;
  for (const auto& w : workers->workers()) {
    if (w.info().worker_id() == worker_id) return w.live();
  }
  return false;
}

bool FaultCluster::Listed(const std::string& worker_id) {
  const auto workers = ListWorkers(router_address_);
  if (!workers) return false;
  for (const auto& w : workers->workers()) {
    if (w.info().worker_id() == worker_id) return true;
  }
  return false;
}

bool FaultCluster::WaitAllLive(Ms timeout) {
  return WaitUntil(
      [&] {
        for (size_t i = 0; i < prefill_.size(); ++i) {
          if (prefill_[i] && prefill_[i]->running() && !Live(prefill_id(i))) return false;
        }
        for (size_t i = 0; i < decode_.size(); ++i) {
          if (decode_[i] && decode_[i]->running() && !Live(decode_id(i))) return false;
        }
        return true;
      },
      timeout, Ms(50));
}

double FaultCluster::DecodeSum(const std::string& series) {
  double sum = 0;
  for (const auto& d : decode_) {
    if (d && d->running()) sum += ScrapeMetric(d->metrics(), series).value_or(0);
  }
  return sum;
}

bool FaultCluster::WaitNoKvInUse(Ms timeout, Ms* took, std::string* why) {
  const auto t0 = SteadyClock::now();
  std::string reason;
  const bool ok = WaitUntil(
      [&] {
        for (const auto& d : decode_) {
          if (!d || !d->running()) continue;
          const auto used = ScrapeMetric(d->metrics(), "ced_kv_blocks_used");
          if (used != 0.0) {
            reason = d->name() + " has " + std::to_string(used.value_or(-1)) + " KV blocks in use";
            return false;
          }
        }
        auto workers = ListWorkers(router_address_);
        if (!workers) {
          reason = "router does not answer";
          return false;
        }
        // Only workers still running: a killed one stays listed until stale.
        ced::internal::ListWorkersResponse live;
        for (const auto& w : workers->workers()) {
          if (w.live()) *live.add_workers() = w;
        }
        return AllWorkersIdle(live, &reason);
      },
      timeout, Ms(20));
  if (took != nullptr) *took = std::chrono::duration_cast<Ms>(SteadyClock::now() - t0);
  if (why != nullptr) *why = reason;
  return ok;
}

Stream::Stream(const std::string& gateway, const ced::v1::GenerateRequest& req, Ms deadline)
    : stub_(ced::v1::Gateway::NewStub(
          grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()))) {
  ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
  reader_ = stub_->Generate(&ctx_, req);
}

bool Stream::ReadTokens(int n) {
  ced::v1::GenerateResponse resp;
  while (static_cast<int>(tokens_.size()) < n) {
    if (!reader_->Read(&resp)) return false;
    tokens_.insert(tokens_.end(), resp.token_ids().begin(), resp.token_ids().end());
    last_ = resp;
  }
  return true;
}

grpc::Status Stream::Finish() {
  ced::v1::GenerateResponse resp;
  while (reader_->Read(&resp)) {
    tokens_.insert(tokens_.end(), resp.token_ids().begin(), resp.token_ids().end());
    last_ = resp;
  }
  return reader_->Finish();
}

ced::v1::GenerateRequest FaultRequest(const std::vector<int32_t>& prompt, int max_tokens,
                                      const std::string& request_id, ced::v1::ReplayOn on) {
  ced::v1::GenerateRequest req = Request(prompt, max_tokens, on);
  req.set_request_id(request_id);
  return req;
}

bool IsPrefix(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  return got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin());
}

}  // namespace ced::testing
