// The ced.internal.Router gRPC service: a worker registry (WorkerTable) and
// per-request placement (CedRoutingPolicy), plus the endpoints, fingerprints
// and metrics that the pure policy library does not know about.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/router.grpc.pb.h"
#include "services/metrics/registry.h"
#include "services/router_policy/block_index.h"
#include "services/router_policy/policy.h"
#include "services/router_policy/worker_table.h"

namespace ced::router {

struct RouterServiceOptions {
  // A worker silent for longer than this gets no work.
  absl::Duration heartbeat_timeout = absl::Milliseconds(3000);
  // Told to workers at registration; 0 = heartbeat_timeout / 3.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // policy.block_index is the service's own (set by Create).
  CedRoutingPolicy::Options policy;
  BlockIndex::Options block_index;
  // Used when a RouteRequest leaves replay_mode unspecified.
  ced::internal::ReplayMode default_replay_mode = ced::internal::REPLAY_MODE_BOUNDED;
  // Families are registered here; not owned, must outlive the service.
  metrics::Registry* registry = nullptr;
};

// Thread-safe: every RPC may run concurrently (gRPC's sync thread pool;
// Route, on every request's path, runs on the callback API: it answers from
// the thread that received it, without a hand-off to the pool).
// Every field a peer sends is validated; errors are INVALID_ARGUMENT with a
// message naming the field (e.g. "worker.block_size: must be > 0 ...").
class RouterServiceImpl final
    : public ced::internal::Router::WithCallbackMethod_Route<ced::internal::Router::Service> {
 public:
  // INVALID_ARGUMENT for a missing registry or bad policy options.
  static absl::StatusOr<std::unique_ptr<RouterServiceImpl>> Create(
      const RouterServiceOptions& options);

  grpc::Status Register(grpc::ServerContext* context, const ced::internal::RegisterRequest* request,
                        ced::internal::RegisterResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context,
                          const ced::internal::DeregisterRequest* request,
                          ced::internal::DeregisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const ced::internal::LoadReport* request,
                         ced::internal::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Route(grpc::CallbackServerContext* context,
                                  const ced::internal::RouteRequest* request,
                                  ced::internal::RouteResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const ced::internal::ListWorkersRequest* request,
                           ced::internal::ListWorkersResponse* response) override;

  // Logs workers that went stale since the last call (the stale thread of
  // RouterServer calls it periodically). Selection never depends on it.
  void MarkStale(absl::Time now);

  // The same operations without gRPC (used by the RPC handlers; tests may call
  // them directly).
  absl::Status DoRegister(const ced::internal::RegisterRequest& request,
                          ced::internal::RegisterResponse* response);
  absl::Status DoHeartbeat(const ced::internal::LoadReport& request,
                           ced::internal::HeartbeatResponse* response);
  absl::Status DoRoute(const ced::internal::RouteRequest& request,
                       ced::internal::RouteResponse* response);
  // What the Route RPC does: DoRoute, and on an error counts it and clears
  // `response`. A gateway embedding the router calls it in-process.
  absl::Status RouteCounted(const ced::internal::RouteRequest& request,
                            ced::internal::RouteResponse* response);
  void DoListWorkers(ced::internal::ListWorkersResponse* response) const;

 private:
  struct Metrics {
    metrics::Family<metrics::Counter>* decisions = nullptr;
    metrics::Family<metrics::Counter>* route_errors = nullptr;
    metrics::Family<metrics::Gauge>* workers = nullptr;
    metrics::Counter* registrations = nullptr;
    metrics::Counter* heartbeats = nullptr;
    metrics::Counter* stale_transitions = nullptr;
    metrics::Family<metrics::Counter>* reasons = nullptr;
    metrics::Counter* prompt_tokens = nullptr;
    metrics::Counter* hit_tokens = nullptr;
    metrics::Counter* decode_hit_tokens = nullptr;
    metrics::Family<metrics::Counter>* prefix_reports = nullptr;
    metrics::Gauge* indexed_blocks = nullptr;
  };

  explicit RouterServiceImpl(const RouterServiceOptions& options);
  absl::Status RegisterMetrics();
  void RefreshWorkerGauges() const;

  const RouterServiceOptions options_;
  WorkerTable table_;
  BlockIndex index_;
  std::unique_ptr<CedRoutingPolicy> policy_;
  Metrics metrics_;

  // Endpoint and identity of each registered worker (what WorkerTable does
  // not hold). Register checks fingerprints and updates both under mu_.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ced::internal::WorkerInfo> infos_ ABSL_GUARDED_BY(mu_);
  // When Route last refused a request for decode room (that could fit in an
  // empty cache); heartbeats in the few seconds after ask for early reports.
  std::atomic<int64_t> room_refused_at_ns_{0};
};

}  // namespace ced::router
