#include "services/decode/decode_worker.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/common/worker_util.h"
#include "services/decode/request.h"
#include "services/kv_store/tier_metrics.h"
#include "services/metrics/kernel_info.h"
#include "services/metrics/process_metrics.h"

namespace ced::services {

using ced::internal::FinishReason;
using ced::internal::TokenChunk;

namespace {

uint64_t RandomToken() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  uint64_t t = 0;
  while (t == 0) t = rng();
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(
    const DecodeWorkerOptions& options) {
  std::unique_ptr<DecodeWorker> w(new DecodeWorker(options));
  RETURN_IF_ERROR(w->Init());
  return w;
}

absl::Status DecodeWorker::Init() {
  if (!options_.router_address.empty()) {
    RETURN_IF_ERROR(
        CheckAdvertisable(options_.grpc_address, options_.advertise_address, "advertise-address"));
    RETURN_IF_ERROR(CheckAdvertisable(options_.kv_address, options_.advertise_kv_address,
                                      "advertise-kv-address"));
  }
  if (options_.engine.weights != WeightSet::kFull) {
    return absl::InvalidArgumentError("a decode worker holds the full model");
  }
  ASSIGN_OR_RETURN(engine_, Engine::Create(options_.engine));
  if (options_.warm_up) {
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(engine_->WarmUp(256, 256, /*decode_steps=*/2));
    std::fprintf(stderr, "decode %s: warmed up in %lld ms\n", options_.worker_id.c_str(),
                 static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - t0)));
  }
  SchedulerOptions so;
  so.max_batch = options_.max_batch;
  so.max_queued_requests = options_.max_queued_requests;
  so.max_queued_tokens = options_.max_queued_tokens;
  so.max_step_tokens = options_.max_step_tokens;
  so.chunked_start = false;  // Engine::Prefill / Replay run whole
  so.kv_timeout = std::chrono::milliseconds(options_.reservation_timeout_ms);
  so.attach_timeout = std::chrono::milliseconds(options_.stream_attach_timeout_ms);
  ASSIGN_OR_RETURN(sched_, Scheduler::Create(so));
  m_ = std::make_unique<Metrics>();
  auto gauge = [&](const char* name, const char* help) {
    return metrics::AddUnlabelledGauge(registry_, name, help);
  };
  auto counter = [&](const char* name, const char* help) {
    return metrics::AddUnlabelledCounter(registry_, name, help);
  };
  auto hist = [&](const char* name, const char* help, std::vector<double> b) {
    return metrics::AddUnlabelledHistogram(registry_, name, help, std::move(b));
  };
  ASSIGN_OR_RETURN(m_->running,
                   gauge("ced_decode_running_sequences", "Sequences in the decode batch."));
  ASSIGN_OR_RETURN(m_->waiting, gauge("ced_decode_waiting_sequences",
                                      "Reserved sequences waiting for K/V or a batch slot."));
  ASSIGN_OR_RETURN(m_->subscribers,
                   gauge("ced_decode_token_streams",
                         "Open multiplexed token streams (Subscribe): one per gateway using it."));
  ASSIGN_OR_RETURN(m_->kv_used,
                   gauge("ced_kv_blocks_used", "Global KV cache blocks in use (reserved)."));
  ASSIGN_OR_RETURN(m_->kv_free, gauge("ced_kv_blocks_free", "Global KV cache blocks free."));
  ASSIGN_OR_RETURN(m_->weights_bytes,
                   gauge("ced_weights_resident_bytes", "Bytes of model weights resident."));
  RETURN_IF_ERROR(metrics::RegisterCpuKernelInfo(&registry_));
  RETURN_IF_ERROR(metrics::RegisterProcessMetrics(&registry_));
  ASSIGN_OR_RETURN(m_->prefix, PrefixCacheMetrics::Create(&registry_));
  registry_.AddCollectHook([this] { m_->prefix.Update(engine_->cache_stats()); });
  RETURN_IF_ERROR(RegisterKvTierMetrics(&registry_, [this] { return engine_->kv_tier_stats(); }));
  ASSIGN_OR_RETURN(m_->steps, counter("ced_decode_steps_total", "Batched decode steps."));
  ASSIGN_OR_RETURN(m_->generated, counter("ced_generated_tokens_total", "Tokens generated."));
  ASSIGN_OR_RETURN(auto* transfer_bytes,
                   registry_.AddCounter("ced_kv_transfer_bytes_total",
                                        "K/V bytes moved over the data plane.", {"direction"}));
  m_->transfer_bytes = &transfer_bytes->WithLabels({{"direction", "in"}});
  ASSIGN_OR_RETURN(m_->replays, registry_.AddCounter("ced_replays_total",
                                                     "Replays by where they ran.", {"placement"}));
  ASSIGN_OR_RETURN(m_->requests,
                   registry_.AddCounter("ced_requests_total", "Requests by outcome.", {"outcome"}));
  ASSIGN_OR_RETURN(
      m_->admission_rejected,
      registry_.AddCounter(
          "ced_decode_admission_rejected_total",
          "Reservations refused with RESOURCE_EXHAUSTED, by the bound that refused them.",
          {"reason"}));
  for (const char* reason : {"queue_requests", "queue_tokens", "kv_blocks"})
    m_->admission_rejected->WithLabelValues({reason});
  ASSIGN_OR_RETURN(
      m_->kv_rejected,
      registry_.AddCounter("ced_kv_rejected_messages_total",
                           "K/V messages refused before a byte landed, by reason.", {"reason"}));
  for (const char* reason : kKvRejectReasons) m_->kv_rejected->WithLabelValues({reason});
  ASSIGN_OR_RETURN(m_->step_seconds,
                   hist("ced_decode_step_seconds", "Time of one batched decode step.",
                        metrics::LatencySecondsBuckets()));
  ASSIGN_OR_RETURN(m_->transfer_seconds,
                   hist("ced_kv_transfer_seconds", "Reservation to all K/V landed.",
                        metrics::LatencySecondsBuckets()));
  ASSIGN_OR_RETURN(m_->ttft_seconds, hist("ced_decode_time_to_first_token_seconds",
                                          "Reservation to first token on this worker.",
                                          metrics::LatencySecondsBuckets()));
  ASSIGN_OR_RETURN(m_->itl_seconds, hist("ced_inter_token_latency_seconds",
                                         "Time between consecutive tokens of a sequence.",
                                         metrics::LatencySecondsBuckets()));
  ASSIGN_OR_RETURN(m_->batch_size, hist("ced_decode_batch_size", "Sequences per decode step.",
                                        metrics::TokenCountBuckets()));
  m_->weights_bytes->Set(static_cast<double>(engine_->weights().resident_bytes()));
  registry_.AddCollectHook([this] {
    ced::internal::LoadReport unused;
    FillLoad(&unused);  // refreshes the load gauges at scrape time
  });

  kv_transport::TransportOptions to;
  to.kind = options_.kv_transport;
  to.log_connections = true;
  ASSIGN_OR_RETURN(transport_, kv_transport::CreateKvTransport(to));
  sink_ = MakeDecodeSink(this);
  ASSIGN_OR_RETURN(kv_address_, transport_->Listen(options_.kv_address, sink_.get()));

  service_ = MakeDecodeService(this);
  ServerOptions server_options;
  server_options.grpc_address = options_.grpc_address;
  server_options.metrics_address = options_.metrics_address;
  server_options.services = {service_.get()};
  server_options.health_service_name = "ced.internal.DecodeWorker";
  server_options.registry = &registry_;
  ASSIGN_OR_RETURN(server_, RunningServer::Start(server_options));

  if (!options_.router_address.empty()) {
    RouterClient::Options ro;
    ro.router_address = options_.router_address;
    ro.worker = MakeWorkerInfo(
        *engine_, options_.worker_id, ced::internal::ROLE_DECODE,
        options_.advertise_address.empty() ? server_->grpc_address() : options_.advertise_address,
        transport_->name());
    ro.worker.set_kv_address(options_.advertise_kv_address.empty() ? kv_address_
                                                                   : options_.advertise_kv_address);
    ro.worker.set_weights(ced::internal::WEIGHTS_HELD_FULL);
    ro.load = [this](ced::internal::LoadReport* r) { FillLoad(r); };
    ro.engine = engine_.get();  // prefix-cache reports for cache-aware routing
    // The router refused requests for room: report the next room freed at once.
    ro.on_report_freed_room = [this] { refused_for_room_.store(true); };
    router_ = std::make_unique<RouterClient>(std::move(ro));
    router_->Start();
  }
  // After router_ is set: the loop reads it (RouterClient::ReportSoon).
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

DecodeWorker::DecodeWorker(const DecodeWorkerOptions& options) : options_(options) {}

DecodeWorker::~DecodeWorker() { Shutdown(); }

void DecodeWorker::FillLoad(ced::internal::LoadReport* report) {
  const CacheStats cs = engine_->cache_stats();
  int running = 0, waiting = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = sched_->running();
    waiting = sched_->waiting();
  }
  report->set_running_sequences(running);
  report->set_waiting_sequences(waiting);
  report->set_free_kv_blocks(cs.available_blocks());
  report->set_total_kv_blocks(cs.global_blocks_total);
  reported_tight_.store(cs.available_blocks() * 4 < cs.global_blocks_total);
  m_->running->Set(running);
  m_->waiting->Set(waiting);
  m_->kv_used->Set(cs.global_blocks_total - cs.available_blocks());
  m_->kv_free->Set(cs.available_blocks());
}

void DecodeWorker::Drain() {
  draining_ = true;
  if (server_) server_->SetServing(false);
  if (router_) router_->Stop();
  const auto until = Clock::now() + std::chrono::milliseconds(options_.drain_timeout_ms);
  while (Clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (requests_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void DecodeWorker::Shutdown() {
  shutting_down_ = true;
  if (router_) router_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !scheduler_.joinable()) return;
    stop_ = true;
    for (auto& [id, r] : requests_) {
      if (r->stream)
        r->stream->Close(
            grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker shutting down"));
    }
    // After every request's end went out on them.
    for (auto& [id, out] : subscribers_) {
      out->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker shutting down"));
    }
  }
  cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  if (server_) server_->Shutdown(500);
  transport_.reset();  // completes in-flight receives before the engine goes
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.clear();
    by_token_.clear();
  }
}

absl::StatusOr<ced::internal::ReserveResponse> DecodeWorker::Reserve(
    const ced::internal::ReserveRequest& req) {
  if (draining_) return absl::UnavailableError("decode worker is draining");
  const ModelConfig& c = engine_->config();
  RETURN_IF_ERROR(ValidateReserve(req, c));
  auto r = std::make_unique<Request>();
  r->id = req.request_id();
  r->id_hash = RequestIdHash(req.request_id());
  r->prompt.assign(req.prompt_token_ids().begin(), req.prompt_token_ids().end());
  r->sampling = FromProto(req.sampling());
  if (r->sampling.adjusts_logits()) r->history = SamplingHistory(r->prompt, r->sampling);
  r->stop.max_tokens = req.max_tokens();
  r->stop.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  r->replay_mode = req.replay().mode() == ced::internal::REPLAY_MODE_EXACT ? ReplayMode::kExact
                                                                           : ReplayMode::kBounded;
  r->replay_window = req.replay().replay_window();
  r->local_prefill = req.local_prefill();
  r->prefill_worker_id = req.prefill_worker_id();
  r->received.assign(r->prompt.size(), 0);
  r->t_reserve = Clock::now();
  const int n = static_cast<int>(r->prompt.size());
  r->replay_work_tokens =
      c.IsDecoderOnly() ? 0 : n - engine_->ReplayStart(n, r->replay_mode, r->replay_window);
  std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> subscriber;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (requests_.count(r->id)) {
      return absl::AlreadyExistsError(absl::StrCat("request_id '", r->id, "' is already reserved"));
    }
    if (!req.subscriber_id().empty()) {
      auto sub = subscribers_.find(req.subscriber_id());
      if (sub == subscribers_.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "subscriber_id: no Subscribe stream named '", req.subscriber_id(), "' is open here"));
      }
      subscriber = sub->second;
      r->subscriber_id = req.subscriber_id();
    }
    if (cancelled_early_.erase(r->id) > 0) {
      return absl::CancelledError(absl::StrCat("request_id '", r->id, "' was cancelled"));
    }
    // Bounded queue: reservations that do not decode yet (admissions in
    // progress included: the scheduler counts them from Add).
    AddRejection why;
    absl::Status added = sched_->Add({r->id, n, !r->local_prefill}, r->t_reserve, &why);
    switch (why) {
      case AddRejection::kNone:
        break;
      case AddRejection::kDuplicate:
        return absl::AlreadyExistsError(
            absl::StrCat("request_id '", r->id, "' is already reserved"));
      case AddRejection::kQueueRequests:
        m_->admission_rejected->WithLabelValues({"queue_requests"}).Increment();
        refused_for_room_.store(true);
        return absl::ResourceExhaustedError(
            absl::StrCat("decode worker: ", sched_->queued_requests(),
                         " reservations already wait for K/V or a batch slot (--max-queued ",
                         options_.max_queued_requests, "); retry later"));
      case AddRejection::kQueueTokens:
        m_->admission_rejected->WithLabelValues({"queue_tokens"}).Increment();
        refused_for_room_.store(true);
        return absl::ResourceExhaustedError(absl::StrCat(
            "decode worker: ", sched_->queued_tokens(), " prompt tokens already wait and ", n,
            " more would exceed --max-queued-tokens ", options_.max_queued_tokens,
            "; retry later"));
    }
    RETURN_IF_ERROR(added);
  }
  // Until activated below, an early return takes the request back out of
  // the scheduler's queue.
  struct Admitting {
    DecodeWorker* w;
    std::string id;
    bool done = false;
    ~Admitting() {
      if (done) return;
      {
        std::lock_guard<std::mutex> lock(w->mu_);
        w->sched_->Remove(id);
      }
      w->cv_.notify_all();  // the loop may wait for admissions to finish
    }
  } admitting{this, r->id};
  // A local prefill reads what the KV tiers hold of the prompt's prefix
  // first, without the engine's lock: a disk read or a Redis round trip must
  // not hold up the decode steps of every running sequence. A remote prefill
  // reads no tier here: the prefill worker reads the prefix from its own
  // cache and tiers anyway (it computes the suffix from it) and sends every
  // block this hot cache lacks over the K/V transport while it computes, so
  // a second read of the same prefix, in front of the prefill, would only
  // delay the first token (an empty prefetch: only the hot cache is used).
  const TierPrefetch prefetched =
      r->local_prefill ? engine_->PrefetchFromTiers(r->prompt) : TierPrefetch{};
  {
    std::lock_guard<std::mutex> lock(engine_mu_);
    // The prefix cache may already hold the prompt's first blocks (an earlier
    // turn of the session): they are shared, and the prefill worker skips them.
    int cached = 0;
    auto seq = engine_->CreateSequenceForPrompt(
        r->prompt, static_cast<int>(r->prompt.size()) + req.max_tokens(), &cached,
        /*max_cached_tokens=*/-1, &prefetched);
    if (!seq.ok()) {
      if (absl::IsResourceExhausted(seq.status())) {
        m_->admission_rejected->WithLabelValues({"kv_blocks"}).Increment();
        refused_for_room_.store(true);
        return absl::ResourceExhaustedError(
            absl::StrCat("decode worker: ", seq.status().message(), "; retry later"));
      }
      return seq.status();
    }
    r->seq = *seq;
    r->cached_tokens = cached;
    m_->prefix.CountLookup(static_cast<int>(r->prompt.size()), cached);
    if (!r->local_prefill) {
      std::fill(r->received.begin(), r->received.begin() + cached, 1);
      r->received_tokens = cached;
      // The prompt's blocks are the prefill worker's to write to the shared
      // store; this worker writes those of the tokens it generates.
      CED_CHECK(engine_->LeaveSharedWritesToPeer(r->seq, static_cast<int>(r->prompt.size())).ok());
    }
  }
  r->prefill_work_tokens =
      n - engine_->ResumeStart(n, r->cached_tokens, r->replay_mode, r->replay_window);
  r->transfer_token = RandomToken();
  ced::internal::ReserveResponse resp;
  resp.set_transfer_token(r->transfer_token);
  resp.set_kv_address(kv_address_);
  const CacheStats cs = engine_->cache_stats();
  resp.set_block_size(cs.block_size);
  resp.set_num_blocks((r->prompt.size() + req.max_tokens() + cs.block_size - 1) / cs.block_size);
  resp.set_kv_format(std::string(kernels::KvFormatName(engine_->kv_format())));
  resp.set_cached_prefix_tokens(r->local_prefill ? 0 : r->cached_tokens);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The scheduler holds the id from Add on, so no duplicate got in.
    CED_CHECK(!requests_.count(r->id));
    CED_CHECK(sched_->Activate(r->id, r->local_prefill ? r->prefill_work_tokens : 0).ok());
    admitting.done = true;
    if (subscriber != nullptr) {
      // Its tokens go to the gateway's Subscribe stream: no Stream call follows.
      r->stream = MakeSubscribedOut(std::move(subscriber), r->id);
      sched_->Attach(r->id);
    }
    by_token_[r->transfer_token] = r.get();
    requests_[r->id] = std::move(r);
    cv_.notify_all();
    return resp;
  }
}

void DecodeWorker::AttachStream(const std::string& request_id, std::shared_ptr<ChunkOut> stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    stream->Close(grpc::Status(grpc::StatusCode::NOT_FOUND,
                               absl::StrCat("request_id '", request_id, "' is not reserved here")));
    return;
  }
  Request* r = it->second.get();
  if (r->stream) {
    stream->Close(grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                               absl::StrCat("request_id '", request_id, "' is already streamed")));
    return;
  }
  r->stream = std::move(stream);
  sched_->Attach(request_id);
  for (auto& chunk : r->pending) r->stream->Push(std::move(chunk));
  r->pending.clear();
  if (r->final_status.has_value()) r->stream->Close(*r->final_status);
  cv_.notify_all();
}

absl::Status DecodeWorker::Subscribe(
    const std::string& subscriber_id,
    std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out) {
  if (subscriber_id.empty() || subscriber_id.size() > 128) {
    return absl::InvalidArgumentError("subscriber_id: must be 1..128 bytes");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return absl::UnavailableError("decode worker shutting down");
  if (!subscribers_.emplace(subscriber_id, out).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("subscriber_id '", subscriber_id, "' is already open here"));
  }
  out->Push(ced::internal::TokenBatch());  // open: Reserve takes the name from now on
  m_->subscribers->Set(static_cast<double>(subscribers_.size()));
  return absl::OkStatus();
}

void DecodeWorker::Unsubscribe(const std::string& subscriber_id) {
  std::vector<std::string> orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto sub = subscribers_.find(subscriber_id);
    if (sub == subscribers_.end()) return;
    // A cancelled reactor must still finish, or gRPC never lets it go (and
    // the server's shutdown waits for it).
    sub->second->Close(grpc::Status(grpc::StatusCode::CANCELLED, "subscriber stream ended"));
    subscribers_.erase(sub);
    m_->subscribers->Set(static_cast<double>(subscribers_.size()));
    for (auto& [id, r] : requests_) {
      if (r->subscriber_id == subscriber_id && !r->finished) orphans.push_back(id);
    }
  }
  // Nobody reads their tokens any more.
  for (const std::string& id : orphans) Cancel(id, "the subscriber stream ended");
}

bool DecodeWorker::Cancel(const std::string& request_id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    // The Reserve may still be on its way: remember the id for a while.
    const auto now = Clock::now();
    for (auto t = cancelled_early_.begin(); t != cancelled_early_.end();) {
      t = now - t->second > std::chrono::seconds(60) ? cancelled_early_.erase(t) : std::next(t);
    }
    if (cancelled_early_.size() < 10000) cancelled_early_[request_id] = now;
    return false;
  }
  it->second->cancelled = true;
  sched_->Cancel(request_id, why);  // keeps the first reason
  cv_.notify_all();
  return true;
}

}  // namespace ced::services
