// The overload and hostile-input tests' topology: router, prefill worker,
// decode worker and gateway as separate `ced serve --role=...` processes on
// loopback, each with its own extra flags, plus the checks every test runs
// afterwards (no KV block leaked, a normal greedy request still gets the
// colocated engine's tokens) and a direct client of the internal worker APIs
// (the test acting as the gateway).
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/service_process.h"

namespace ced::testing {

struct TopologyFlags {
  bool router = true;  // false: workers do not register, no gateway
  bool gateway = true;
  std::vector<std::string> router_flags, gateway_flags, prefill_flags, decode_flags;
};

class Topology {
 public:
  Topology(const std::string& model_dir, const TopologyFlags& flags) : model_(model_dir) {
    if (flags.router) {
      router_ = std::make_unique<ServiceProcess>(
          Args({"--role=router", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--model", model_dir},
               flags.router_flags));
      if (!router_->ready()) return;
    }
    const std::string router = router_ ? router_->grpc() : "";
    decode_ = std::make_unique<ServiceProcess>(Args(
        {"--role=decode", "--worker-id", "decode-0", "--listen", "127.0.0.1:0", "--metrics-listen",
         "127.0.0.1:0", "--kv-listen", "127.0.0.1:0", "--router", router, "--model", model_dir},
        flags.decode_flags));
    if (!decode_->ready()) return;
    prefill_ = std::make_unique<ServiceProcess>(
        Args({"--role=prefill", "--worker-id", "prefill-0", "--listen", "127.0.0.1:0",
              "--metrics-listen", "127.0.0.1:0", "--router", router, "--model", model_dir,
              "--replay-capable"},
             flags.prefill_flags));
    if (!prefill_->ready()) return;
    if (flags.router && flags.gateway) {
      gateway_ = std::make_unique<ServiceProcess>(
          Args({"--role=gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--router", router, "--model", model_dir},
               flags.gateway_flags));
      if (!gateway_->ready()) return;
      // Serving once the router lists both workers (the gateway polls every second).
      if (!WaitUntil([&] { return HealthStatus(gateway_->grpc(), "") == 1; },
                     std::chrono::seconds(60))) {
        ADD_FAILURE() << "the gateway never became SERVING\n" << Logs();
        return;
      }
    }
    ready_ = true;
  }
  ~Topology() {
    for (auto* p : {&gateway_, &prefill_, &decode_, &router_}) p->reset();
  }

  bool ready() const { return ready_; }
  ServiceProcess& router() { return *router_; }
  ServiceProcess& gateway() { return *gateway_; }
  ServiceProcess& prefill() { return *prefill_; }
  ServiceProcess& decode() { return *decode_; }
  // Every process, by role name (those started).
  std::map<std::string, ServiceProcess*> processes() {
    std::map<std::string, ServiceProcess*> out;
    if (router_) out["router"] = router_.get();
    if (gateway_) out["gateway"] = gateway_.get();
    if (prefill_) out["prefill"] = prefill_.get();
    if (decode_) out["decode"] = decode_.get();
    return out;
  }
  std::string Logs() {
    std::string out;
    for (auto& [name, p] : processes()) out += "---- " + name + " ----\n" + p->Log();
    return out;
  }

  // A metric of one process (absent: -1).
  double Metric(ServiceProcess& p, const std::string& series) {
    return ScrapeMetric(p.metrics(), series).value_or(-1);
  }

  // No KV block leaked: the decode worker's ced_kv_blocks_used is back to 0
  // (within 20 s) and, with a router, every worker is idle as it sees them.
  void ExpectNoKvLeak() {
    std::string why;
    const bool idle = WaitUntil(
        [&] {
          const auto used = ScrapeMetric(decode_->metrics(), "ced_kv_blocks_used");
          if (used != 0.0) {
            why = "decode ced_kv_blocks_used=" + (used ? std::to_string(*used) : "absent");
            return false;
          }
          if (!router_) return true;
          const auto workers = ListWorkers(router_->grpc());
          if (!workers) {
            why = "router ListWorkers failed";
            return false;
          }
          return AllWorkersIdle(*workers, &why);
        },
        std::chrono::seconds(20));
    EXPECT_TRUE(idle) << "KV blocks leaked or work left over: " << why << "\n" << Logs();
  }

 private:
  static std::vector<std::string> Args(std::vector<std::string> base,
                                       const std::vector<std::string>& extra) {
    base.insert(base.end(), extra.begin(), extra.end());
    return base;
  }

  std::string model_;
  bool ready_ = false;
  std::unique_ptr<ServiceProcess> router_, decode_, prefill_, gateway_;
};

// The test as the gateway: Reserve on the decode worker, Prefill on the
// prefill worker, follow the decode worker's token stream.
class DirectClient {
 public:
  DirectClient(const std::string& decode_grpc, const std::string& prefill_grpc)
      : decode_(ced::internal::DecodeWorker::NewStub(
            grpc::CreateChannel(decode_grpc, grpc::InsecureChannelCredentials()))),
        prefill_(ced::internal::PrefillWorker::NewStub(
            grpc::CreateChannel(prefill_grpc, grpc::InsecureChannelCredentials()))) {}

  // `subscriber`: the open Subscribe stream its tokens go to ("": none).
  // `sampling`: the request's (default: greedy).
  grpc::Status Reserve(const std::string& id, const std::vector<int32_t>& prompt, int max_tokens,
                       ced::internal::ReserveResponse* out, const std::string& subscriber = "",
                       const ced::internal::SamplingParams* sampling = nullptr) {
    ced::internal::ReserveRequest req;
    if (sampling != nullptr) *req.mutable_sampling() = *sampling;
    req.set_request_id(id);
    req.set_subscriber_id(subscriber);
    for (int32_t t : prompt) req.add_prompt_token_ids(t);
    req.set_max_tokens(max_tokens);
    req.set_ignore_eos(true);
    req.mutable_replay()->set_replay_on(ced::internal::REPLAY_ON_DECODE);
    req.set_prefill_worker_id("prefill-0");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return decode_->Reserve(&ctx, req, out);
  }

  bool Cancel(const std::string& id) {
    ced::internal::CancelRequest req;
    req.set_request_id(id);
    ced::internal::CancelResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return decode_->Cancel(&ctx, req, &resp).ok() && resp.found();
  }

  // Prefill (replay on decode) with the reservation's token, then the tokens
  // the decode worker streams.
  GenResult Run(const std::string& id, const std::vector<int32_t>& prompt,
                const ced::internal::ReserveResponse& reserved) {
    GenResult r;
    grpc::ClientContext stream_ctx;
    stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ced::internal::StreamRequest sreq;
    sreq.set_request_id(id);
    auto stream = decode_->Stream(&stream_ctx, sreq);
    const grpc::Status prefill_status = Prefill(id, prompt, reserved);
    ced::internal::TokenChunk chunk;
    while (stream->Read(&chunk)) {
      r.tokens.insert(r.tokens.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    }
    r.status = stream->Finish();
    if (r.status.ok() && !prefill_status.ok()) r.status = prefill_status;
    return r;
  }

  // The prefill (replay on decode) of a reservation, to its end.
  grpc::Status Prefill(const std::string& id, const std::vector<int32_t>& prompt,
                       const ced::internal::ReserveResponse& reserved) {
    grpc::ClientContext prefill_ctx;
    prefill_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ced::internal::PrefillRequest preq;
    preq.set_request_id(id);
    for (int32_t t : prompt) preq.add_token_ids(t);
    preq.set_decode_worker_id("decode-0");
    preq.set_decode_kv_address(reserved.kv_address());
    preq.set_transfer_token(reserved.transfer_token());
    preq.mutable_replay()->set_replay_on(ced::internal::REPLAY_ON_DECODE);
    preq.set_kv_format(reserved.kv_format());
    auto prefill = prefill_->Prefill(&prefill_ctx, preq);
    ced::internal::PrefillResponse presp;
    while (prefill->Read(&presp)) {
    }
    return prefill->Finish();
  }

  ced::internal::DecodeWorker::Stub& decode_stub() { return *decode_; }

 private:
  std::unique_ptr<ced::internal::DecodeWorker::Stub> decode_;
  std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill_;
};

}  // namespace ced::testing
