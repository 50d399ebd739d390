// State shared by the gateway's RPC handlers and its per-request calls: the
// model facts, the tokenizer, stubs and channels, metrics, admission.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/router.grpc.pb.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "services/gateway/access_log.h"
#include "services/gateway/call_threads.h"
#include "services/gateway/gateway_metrics.h"
#include "services/gateway/kv_wait_queue.h"
#include "services/gateway/prefix_chain.h"
#include "services/gateway/request_validation.h"
#include "services/gateway/stream_relay.h"
#include "services/gateway/token_mux.h"

namespace ced::gateway {

struct GatewaySettings {
  std::string router_address;
  // A router in this process (--embed-router): its channel (in-process, for
  // ListWorkers and health) and its placement, called directly on every
  // request's path instead of a Route RPC. Null: the router at router_address.
  std::shared_ptr<grpc::Channel> router_channel;
  std::function<absl::Status(const ced::internal::RouteRequest&, ced::internal::RouteResponse*)>
      local_route;
  std::string model_name;
  ModelConfig model;
  RequestLimits limits;
  int max_inflight = 256;
  // Sum over admitted requests of prompt tokens + max_tokens.
  int64_t max_inflight_tokens = int64_t{1} << 20;
  // Bounds on internal calls (each also bounded by the client's deadline).
  absl::Duration route_timeout = absl::Seconds(2);
  absl::Duration reserve_timeout = absl::Seconds(10);
  absl::Duration cancel_timeout = absl::Seconds(1);
  // How long to wait for the prefill stream's end after the last token.
  absl::Duration prefill_grace = absl::Seconds(5);
  // For requests that leave them unspecified; UNSPECIFIED = the router's default.
  ced::internal::ReplayOn default_replay_on = ced::internal::REPLAY_ON_UNSPECIFIED;
  ced::internal::ReplayMode default_replay_mode = ced::internal::REPLAY_MODE_UNSPECIFIED;
  // Request migration: a request whose decode worker dies mid-stream goes on
  // on another one, at most this many times (the next death: UNAVAILABLE).
  // With a limit > 0 a prefill worker that dies before the request's first
  // decoded token is also replaced, once. 0 = off: UNAVAILABLE at once.
  int migration_limit = 3;
  // A decode worker that refuses the Reserve with RESOURCE_EXHAUSTED (its
  // K/V cache cannot hold prompt + max_tokens now, or its queue is full)
  // holds nothing of the request: it is routed again away from every worker
  // that refused it, at most this many times; then the client gets
  // RESOURCE_EXHAUSTED naming them. 0 = off: the first refusal ends it.
  int reserve_retries = 2;
  // A request refused for K/V room before its first token (by the router:
  // no decode worker has room now; or by every decode worker it was placed
  // on) waits, placed again after 20 ms, 40 .. 500 ms, until this long
  // after it arrived (or its deadline): what a full cache answers is a
  // queue, not an error. Zero: the refusal reaches the client at once.
  // Never for a request no decode worker's whole cache can hold.
  absl::Duration kv_wait = absl::ZeroDuration();
  // A migrating request (its decode worker is gone) that finds no worker to
  // move to (the router has none, or is itself unreachable) tries again every
  // 250 ms until this long after its first try (or its deadline): a new
  // worker takes it, or the gone one once it is back (restarted under its
  // id: the router lists it live and it answers).
  // Zero: the router's UNAVAILABLE reaches the client at once.
  absl::Duration migration_wait = absl::ZeroDuration();
  // Tokens come on one multiplexed stream per decode worker (TokenMux);
  // false: one Stream call per request. Opening a worker's stream waits at
  // most mux_open_timeout (then that request uses its own Stream).
  bool decode_mux = true;
  absl::Duration mux_open_timeout = absl::Seconds(2);
  // Where every answered Generate request is logged (--access-log); null: nowhere.
  std::shared_ptr<AccessLog> access_log;
};

// What a request costs against --max-inflight-tokens: its prompt plus the
// most tokens it may generate (the KV it can come to hold downstream).
inline int64_t AdmissionTokens(const ValidatedRequest& r) {
  return static_cast<int64_t>(r.prompt_token_ids.size()) + r.max_tokens;
}

// Thread-safe.
class GatewayCore {
 public:
  GatewayCore(GatewaySettings settings, std::unique_ptr<Tokenizer> tokenizer,
              GatewayMetrics metrics);

  const GatewaySettings& settings() const { return settings_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GatewayMetrics& metrics() const { return metrics_; }
  ced::internal::Router::Stub* router() { return router_.get(); }
  // Places a request: settings().local_route when the router is embedded
  // (`done` runs inline), else the Route RPC under `context` (its deadline
  // bounds the call; `done` runs on a gRPC thread when it completes). `done`
  // runs once; `request` and `response` must outlive it.
  void RouteAsync(grpc::ClientContext* context, const ced::internal::RouteRequest* request,
                  ced::internal::RouteResponse* response,
                  std::function<void(grpc::Status)> done);
  // The block chain prompts are hashed with for cache-aware routing.
  PrefixChain& prefix_chain() { return prefix_chain_; }
  // Where the calls' worker streams complete.
  StreamRelay& relay() { return relay_; }
  // The multiplexed token streams to the decode workers.
  TokenMuxPool& muxes() { return muxes_; }
  // The requests waiting for decode room (--kv-wait-ms), first come first.
  KvWaitQueue& kv_waiters() { return kv_waiters_; }
  // One channel per worker address, created on first use and kept.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address);

  // Admission control: a request costing `tokens` (prompt + max_tokens) is
  // admitted only while fewer than max_inflight requests and at most
  // max_inflight_tokens - tokens tokens are in flight. Otherwise it is not
  // admitted and the returned message (for RESOURCE_EXHAUSTED) names the
  // bound; "" means admitted. Nothing queues: the caller rejects at once.
  std::string TryAdmit(int64_t tokens);
  // Gives back an admitted request's slot and tokens.
  void Release(int64_t tokens);
  int inflight_requests() const;
  int64_t inflight_tokens() const;

  // Writes `record` to settings().access_log, if any.
  void LogAccess(const AccessRecord& record) const {
    if (settings_.access_log != nullptr) settings_.access_log->Write(record);
  }

  // The threads calls run on.
  CallThreads& call_threads() { return call_threads_; }
  // Counts running calls; WaitForCalls blocks until none run.
  void CallStarted();
  void CallEnded();
  void WaitForCalls();

  // "gw-" + 16 random hex digits.
  std::string NewRequestId();
  // Marks `id` in flight on this gateway; false if it already is (the workers
  // key a request's sequence, transfer and cancellation by it, so a second one
  // must never reach them). ReleaseRequestId when the call ends.
  bool ClaimRequestId(const std::string& id);
  void ReleaseRequestId(const std::string& id);

 private:
  const GatewaySettings settings_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const GatewayMetrics metrics_;
  std::unique_ptr<ced::internal::Router::Stub> router_;
  PrefixChain prefix_chain_;
  StreamRelay relay_;
  TokenMuxPool muxes_;
  KvWaitQueue kv_waiters_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> inflight_ids_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inflight_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int running_calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t id_state_ ABSL_GUARDED_BY(mu_);
  CallThreads call_threads_;  // last: its idle threads end first
};

}  // namespace ced::gateway
