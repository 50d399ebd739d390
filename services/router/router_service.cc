#include "services/router/router_service.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/common/block_hash_wire.h"
#include "services/common/grpc_util.h"
#include "services/router/router_validation.h"
#include "services/router_policy/errors.h"

namespace ced::router {
namespace {

constexpr const char* kRoleLabels[] = {"prefill", "decode"};
constexpr const char* kStateLabels[] = {"live", "stale"};

ced::internal::Role ToProtoRole(Role role) {
  return role == Role::kPrefill ? ced::internal::ROLE_PREFILL : ced::internal::ROLE_DECODE;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServiceImpl>> RouterServiceImpl::Create(
    const RouterServiceOptions& options) {
  if (options.registry == nullptr) {
    return absl::InvalidArgumentError("router service: metrics registry is required");
  }
  if (options.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("router service: heartbeat_timeout must be > 0");
  }
  if (options.default_replay_mode != ced::internal::REPLAY_MODE_BOUNDED &&
      options.default_replay_mode != ced::internal::REPLAY_MODE_EXACT) {
    return absl::InvalidArgumentError(
        "router service: default_replay_mode must be BOUNDED or EXACT");
  }
  if (options.block_index.max_blocks_per_worker < 2) {
    return absl::InvalidArgumentError("router service: max_blocks_per_worker must be >= 2");
  }
  std::unique_ptr<RouterServiceImpl> service(new RouterServiceImpl(options));
  CedRoutingPolicy::Options policy = options.policy;
  policy.block_index = &service->index_;
  ASSIGN_OR_RETURN(service->policy_, CedRoutingPolicy::Create(&service->table_, policy));
  RETURN_IF_ERROR(service->RegisterMetrics());
  return service;
}

RouterServiceImpl::RouterServiceImpl(const RouterServiceOptions& options)
    : options_(options),
      table_(WorkerTable::Options{options.heartbeat_timeout}),
      index_(options.block_index) {}

absl::Status RouterServiceImpl::RegisterMetrics() {
  metrics::Registry* r = options_.registry;
  ASSIGN_OR_RETURN(metrics_.decisions,
                   r->AddCounter("ced_router_decisions_total",
                                 "Routing decisions, by replay placement and local prefill.",
                                 {"replay_on", "local_prefill"}));
  ASSIGN_OR_RETURN(metrics_.route_errors,
                   r->AddCounter("ced_router_route_errors_total",
                                 "Route calls that failed, by status code.", {"code"}));
  ASSIGN_OR_RETURN(metrics_.workers,
                   r->AddGauge("ced_router_workers", "Registered workers by role and state.",
                               {"role", "state"}));
  ASSIGN_OR_RETURN(auto* registrations,
                   r->AddCounter("ced_router_registrations_total",
                                 "Accepted worker registrations (restarts included)."));
  ASSIGN_OR_RETURN(auto* heartbeats,
                   r->AddCounter("ced_router_heartbeats_total", "Accepted load reports."));
  ASSIGN_OR_RETURN(auto* stale, r->AddCounter("ced_router_stale_transitions_total",
                                              "Times a worker went stale (missed heartbeats)."));
  ASSIGN_OR_RETURN(
      metrics_.reasons,
      r->AddCounter("ced_router_route_reasons_total",
                    "Routing decisions by what placed them (placement: cache = a predicted "
                    "cached prefix, session = the session hint alone, load) and where the "
                    "prefill runs (prefill: pool, or why the decode worker runs it).",
                    {"placement", "prefill"}));
  ASSIGN_OR_RETURN(auto* prompt_tokens, r->AddCounter("ced_router_prompt_tokens_total",
                                                      "Prompt tokens of the requests placed."));
  ASSIGN_OR_RETURN(auto* hit_tokens,
                   r->AddCounter("ced_router_cache_hit_tokens_total",
                                 "Prompt tokens predicted cached on the worker chosen to prefill "
                                 "(work not recomputed), by the router's block index."));
  ASSIGN_OR_RETURN(auto* decode_hit_tokens,
                   r->AddCounter("ced_router_decode_cache_hit_tokens_total",
                                 "Prompt tokens predicted cached on the chosen decode worker "
                                 "(K/V not moved)."));
  ASSIGN_OR_RETURN(metrics_.prefix_reports,
                   r->AddCounter("ced_router_prefix_reports_total",
                                 "Workers' prefix-cache reports by outcome: delta, full, or "
                                 "resync (did not fit; a full report was asked for).",
                                 {"outcome"}));
  ASSIGN_OR_RETURN(auto* indexed,
                   r->AddGauge("ced_router_indexed_blocks",
                               "Prefix-cache blocks the router believes its workers hold, "
                               "summed over workers."));
  metrics_.prompt_tokens = &prompt_tokens->WithLabels({});
  metrics_.hit_tokens = &hit_tokens->WithLabels({});
  metrics_.decode_hit_tokens = &decode_hit_tokens->WithLabels({});
  metrics_.indexed_blocks = &indexed->WithLabels({});
  for (const char* outcome : {"delta", "full", "resync"}) {
    metrics_.prefix_reports->WithLabelValues({outcome});
  }
  for (PlacementReason p :
       {PlacementReason::kLoad, PlacementReason::kCache, PlacementReason::kSession}) {
    for (LocalPrefillReason l :
         {LocalPrefillReason::kPool, LocalPrefillReason::kShortSuffix,
          LocalPrefillReason::kShortPrompt, LocalPrefillReason::kNoPrefillWorker}) {
      metrics_.reasons->WithLabelValues({PlacementReasonName(p), LocalPrefillReasonName(l)});
    }
  }
  metrics_.registrations = &registrations->WithLabels({});
  metrics_.heartbeats = &heartbeats->WithLabels({});
  metrics_.stale_transitions = &stale->WithLabels({});
  // Export every label combination from the start (as 0).
  for (const char* replay_on : {"prefill", "decode"}) {
    for (const char* local : {"true", "false"}) {
      metrics_.decisions->WithLabelValues({replay_on, local});
    }
  }
  for (const char* role : kRoleLabels) {
    for (const char* state : kStateLabels) metrics_.workers->WithLabelValues({role, state});
  }
  r->AddCollectHook([this] { RefreshWorkerGauges(); });
  return absl::OkStatus();
}

void RouterServiceImpl::RefreshWorkerGauges() const {
  int counts[2][2] = {{0, 0}, {0, 0}};
  for (const WorkerState& w : table_.Snapshot(absl::Now())) {
    ++counts[w.info.role == Role::kPrefill ? 0 : 1][w.live ? 0 : 1];
  }
  for (int role = 0; role < 2; ++role) {
    for (int state = 0; state < 2; ++state) {
      metrics_.workers->WithLabelValues({kRoleLabels[role], kStateLabels[state]})
          .Set(counts[role][state]);
    }
  }
  metrics_.indexed_blocks->Set(static_cast<double>(index_.TotalBlocks()));
}

absl::Status RouterServiceImpl::DoRegister(const ced::internal::RegisterRequest& request,
                                           ced::internal::RegisterResponse* response) {
  if (!request.has_worker()) {
    return absl::InvalidArgumentError("worker: must be set");
  }
  const ced::internal::WorkerInfo& worker = request.worker();
  ASSIGN_OR_RETURN(WorkerInfo info, ValidateWorkerInfo(worker));
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    // Every live worker must serve the same model. A stale worker of another
    // model is forgotten (it must register again, and will be checked then).
    for (const WorkerState& other : table_.Snapshot(now)) {
      auto it = infos_.find(other.info.id);
      if (other.info.id == info.id || it == infos_.end() ||
          it->second.model_fingerprint() == worker.model_fingerprint()) {
        continue;
      }
      if (other.live) {
        return absl::FailedPreconditionError(
            absl::StrCat("worker.model_fingerprint: worker ", info.id, " serves model ",
                         worker.model_fingerprint(), " but live worker ", other.info.id,
                         " serves model ", it->second.model_fingerprint(),
                         "; every worker of a cluster must load the same model"));
      }
      (void)table_.Remove(other.info.id);
      index_.RemoveWorker(other.info.id);
      infos_.erase(it);
    }
    RETURN_IF_ERROR(table_.Register(info, now));
    infos_[info.id] = worker;
    // A (re)registered worker starts with an empty view: its first report is full.
    BlockKey root;
    int block_size = 0;
    if (!worker.prefix_root_hash().empty()) {
      root = *ParseRootHash("worker.prefix_root_hash", worker.prefix_root_hash());
      block_size = worker.block_size();
    }
    index_.ResetWorker(info.id, root, block_size);
  }
  metrics_.registrations->Increment();
  std::fprintf(stderr, "router: registered %s worker %s at %s\n",
               kRoleLabels[info.role == Role::kPrefill ? 0 : 1], info.id.c_str(),
               worker.grpc_address().c_str());
  const absl::Duration interval = options_.heartbeat_interval > absl::ZeroDuration()
                                      ? options_.heartbeat_interval
                                      : options_.heartbeat_timeout / 3;
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(interval));
  response->set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  return absl::OkStatus();
}

absl::Status RouterServiceImpl::DoHeartbeat(const ced::internal::LoadReport& request,
                                            ced::internal::HeartbeatResponse* response) {
  ASSIGN_OR_RETURN(WorkerLoad load, ValidateLoadReport(request, absl::Now()));
  std::optional<BlockReport> report;
  if (request.has_prefix_cache()) {
    ASSIGN_OR_RETURN(report, ValidatePrefixReport(request.prefix_cache()));
  }
  absl::Status status = table_.Update(request.worker_id(), load);
  if (absl::IsNotFound(status)) {
    response->set_reregister(true);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(status);
  metrics_.heartbeats->Increment();
  const int64_t refused_ns = room_refused_at_ns_.load(std::memory_order_relaxed);
  if (refused_ns != 0 && absl::GetCurrentTimeNanos() - refused_ns < int64_t{3'000'000'000}) {
    response->set_report_freed_room(true);
  }
  if (report.has_value()) {
    absl::StatusOr<uint64_t> seq = index_.Apply(request.worker_id(), *report);
    if (seq.ok()) {
      const char* outcome =
          *seq == 0 ? "resync" : (report->full || report->base_seq == 0 ? "full" : "delta");
      metrics_.prefix_reports->WithLabelValues({outcome}).Increment();
      response->set_prefix_cache_seq(*seq);
    }
  }
  return absl::OkStatus();
}

absl::Status RouterServiceImpl::DoRoute(const ced::internal::RouteRequest& request,
                                        ced::internal::RouteResponse* response) {
  ASSIGN_OR_RETURN(RouteRequest route, ValidateRouteRequest(request));
  absl::StatusOr<Decision> selected = policy_->Select(route);
  if (absl::IsResourceExhausted(selected.status()) &&
      !absl::StrContains(selected.status().message(), kLargerThanEveryCache)) {
    // No decode worker has room on its last report: ask them to report freed
    // room at once (the requests refused here wait for it, --kv-wait-ms).
    room_refused_at_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  }
  ASSIGN_OR_RETURN(Decision decision, std::move(selected));
  {
    absl::MutexLock lock(&mu_);
    auto decode = infos_.find(decision.decode_id);
    if (decode == infos_.end()) {
      return absl::UnavailableError(
          absl::StrCat("decode worker ", decision.decode_id, " left during routing; retry"));
    }
    ced::internal::WorkerEndpoint* d = response->mutable_decode();
    d->set_worker_id(decode->second.worker_id());
    d->set_grpc_address(decode->second.grpc_address());
    d->set_kv_address(decode->second.kv_address());
    if (!decision.local_prefill) {
      auto prefill = infos_.find(decision.prefill_id);
      if (prefill == infos_.end()) {
        return absl::UnavailableError(
            absl::StrCat("prefill worker ", decision.prefill_id, " left during routing; retry"));
      }
      ced::internal::WorkerEndpoint* p = response->mutable_prefill();
      p->set_worker_id(prefill->second.worker_id());
      p->set_grpc_address(prefill->second.grpc_address());
    }
  }
  response->set_local_prefill(decision.local_prefill);
  response->set_replay_on(decision.replay_on == ReplayOn::kPrefill
                              ? ced::internal::REPLAY_ON_PREFILL
                              : ced::internal::REPLAY_ON_DECODE);
  response->set_replay_mode(request.replay_mode() != ced::internal::REPLAY_MODE_UNSPECIFIED
                                ? request.replay_mode()
                                : options_.default_replay_mode);
  response->set_est_prefill_wait_tokens(decision.est_prefill_wait_tokens);
  response->set_kv_blocks(decision.kv_blocks);
  response->set_predicted_prefill_cached_tokens(decision.prefill_cached_tokens);
  response->set_predicted_decode_cached_tokens(decision.decode_cached_tokens);
  // Tell the gateway which chain to send next time (the decode worker's).
  BlockKey root;
  int block_size = 0;
  if (index_.ChainOf(decision.decode_id, &root, &block_size)) {
    std::string bytes;
    services::AppendBlockHashWire(root.hi, root.lo, &bytes);
    response->set_prefix_root_hash(std::move(bytes));
    response->set_prefix_block_size(block_size);
  }
  metrics_.prompt_tokens->Increment(static_cast<double>(route.prompt_tokens));
  metrics_.hit_tokens->Increment(static_cast<double>(decision.prefill_cached_tokens));
  metrics_.decode_hit_tokens->Increment(static_cast<double>(decision.decode_cached_tokens));
  metrics_.reasons
      ->WithLabelValues(
          {PlacementReasonName(decision.reason), LocalPrefillReasonName(decision.local_reason)})
      .Increment();
  metrics_.decisions
      ->WithLabelValues(
          {ReplayOnName(decision.replay_on), decision.local_prefill ? "true" : "false"})
      .Increment();
  return absl::OkStatus();
}

void RouterServiceImpl::DoListWorkers(ced::internal::ListWorkersResponse* response) const {
  const absl::Time now = absl::Now();
  const std::vector<WorkerState> states = table_.Snapshot(now);
  absl::MutexLock lock(&mu_);
  for (const WorkerState& state : states) {
    auto it = infos_.find(state.info.id);
    if (it == infos_.end()) continue;  // removed since the snapshot
    ced::internal::WorkerStatus* w = response->add_workers();
    *w->mutable_info() = it->second;
    w->mutable_info()->set_role(ToProtoRole(state.info.role));
    ced::internal::LoadReport* load = w->mutable_load();
    load->set_worker_id(state.info.id);
    load->set_queued_prefill_tokens(state.load.queued_prefill_tokens);
    load->set_inflight_prefill_tokens(state.load.inflight_prefill_tokens);
    load->set_running_sequences(static_cast<int32_t>(state.load.running_sequences));
    load->set_waiting_sequences(static_cast<int32_t>(state.load.waiting_sequences));
    load->set_free_kv_blocks(state.load.free_kv_blocks);
    load->set_total_kv_blocks(state.info.total_kv_blocks);
    w->set_live(state.live);
    w->set_heartbeat_age_ms(absl::ToInt64Milliseconds(now - state.load.last_heartbeat));
    w->set_pending_prefill_tokens(state.pending.prefill_tokens);
    w->set_pending_kv_blocks(state.pending.kv_blocks);
    w->set_pending_sequences(state.pending.sequences);
  }
}

void RouterServiceImpl::MarkStale(absl::Time now) {
  for (const std::string& id : table_.MarkStale(now)) {
    metrics_.stale_transitions->Increment();
    std::fprintf(stderr, "router: worker %s is stale (no heartbeat for %lld ms); no new work\n",
                 id.c_str(),
                 static_cast<long long>(absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  }
}

grpc::Status RouterServiceImpl::Register(grpc::ServerContext*,
                                         const ced::internal::RegisterRequest* request,
                                         ced::internal::RegisterResponse* response) {
  return services::ToGrpc(DoRegister(*request, response));
}

grpc::Status RouterServiceImpl::Deregister(grpc::ServerContext*,
                                           const ced::internal::DeregisterRequest* request,
                                           ced::internal::DeregisterResponse*) {
  absl::Status status = ValidateToken("worker_id", request->worker_id(), kMaxIdBytes);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = table_.Remove(request->worker_id());
    infos_.erase(request->worker_id());
    index_.RemoveWorker(request->worker_id());
  }
  if (status.ok()) {
    std::fprintf(stderr, "router: deregistered worker %s\n", request->worker_id().c_str());
  }
  return services::ToGrpc(status);
}

grpc::Status RouterServiceImpl::Heartbeat(grpc::ServerContext*,
                                          const ced::internal::LoadReport* request,
                                          ced::internal::HeartbeatResponse* response) {
  return services::ToGrpc(DoHeartbeat(*request, response));
}

absl::Status RouterServiceImpl::RouteCounted(const ced::internal::RouteRequest& request,
                                             ced::internal::RouteResponse* response) {
  absl::Status status = DoRoute(request, response);
  if (!status.ok()) {
    metrics_.route_errors->WithLabelValues({StatusCodeLabel(status.code())}).Increment();
    response->Clear();
  }
  return status;
}

grpc::ServerUnaryReactor* RouterServiceImpl::Route(grpc::CallbackServerContext* context,
                                                   const ced::internal::RouteRequest* request,
                                                   ced::internal::RouteResponse* response) {
  const absl::Status status = RouteCounted(*request, response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(services::ToGrpc(status));
  return reactor;
}

grpc::Status RouterServiceImpl::ListWorkers(grpc::ServerContext*,
                                            const ced::internal::ListWorkersRequest*,
                                            ced::internal::ListWorkersResponse* response) {
  DoListWorkers(response);
  return grpc::Status::OK;
}

}  // namespace ced::router
