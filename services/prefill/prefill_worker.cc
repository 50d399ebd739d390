#include "services/prefill/prefill_worker.h"

#include "services/common/prefix_metrics.h"
#include "services/kv_store/tier_metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/sampling/sampler.h"
#include "services/common/grpc_util.h"
#include "services/common/worker_util.h"
#include "services/metrics/kernel_info.h"
#include "services/metrics/process_metrics.h"
#include "services/kv_transport/payload.h"

namespace ced::services {

using Clock = std::chrono::steady_clock;
using ced::internal::PrefillResponse;
using kv_transport::ConstSpan;
using kv_transport::KvMessageHeader;
using kv_transport::KvMessageKind;

std::unique_ptr<grpc::Service> MakePrefillService(PrefillWorker* worker);

struct PrefillWorker::Metrics {
  PrefixCacheMetrics prefix;
  metrics::Gauge *queue_depth, *queued_tokens, *weights_bytes;
  metrics::Counter *prompt_tokens, *transfer_bytes, *replays;
  metrics::Family<metrics::Counter>* requests;
  // Prefill refused by a queue bound: reason = queue_requests | queue_tokens.
  metrics::Family<metrics::Counter>* admission_rejected;
  metrics::Histogram *queue_seconds, *prefill_seconds, *ttft_seconds, *transfer_seconds;
};

struct PrefillWorker::Job {
  ced::internal::PrefillRequest req;
  std::vector<int32_t> tokens;
  int cached_tokens = 0;  // prompt tokens this worker's prefix cache held
  uint64_t id_hash = 0;
  bool replay_here = false;
  int chunk = 0;
  const PrefillFaultRule* fault = nullptr;  // test only: options_.faults rule that applies
  std::shared_ptr<StreamWriter<PrefillResponse>::Handle> stream;
  Clock::time_point t_received;
  // Written by the compute thread before `computed` is set; read by whichever
  // thread completes the job.
  SeqId seq = 0;
  absl::Status status;  // the compute's outcome
  double queue_ms = 0, compute_s = 0;
  Clock::time_point t_computed;
  bool replayed = false;
  std::vector<uint8_t> tail_bytes;  // the tail message's payload
  // Guarded by the worker's mu_.
  bool cancelled = false;
  bool computed = false;  // compute over, every message queued
  int pending_sends = 0;
  Clock::time_point last_notice;  // the last progress notice sent for it (queued jobs)
  absl::Status send_error;
  int64_t sent_bytes = 0;
};

struct PrefillWorker::SendTask {
  std::shared_ptr<Job> job;
  KvMessageHeader header;
  std::vector<ConstSpan> payload;
  bool checksum_given = false;  // header.payload_checksum computed by the compute thread
};

// The messages for one decode worker, sent in order by a thread of their own.
// Guarded by the worker's mu_ (but `thread`, which QueueSend and Shutdown
// start and join).
struct PrefillWorker::SendLane {
  std::deque<std::unique_ptr<SendTask>> sends;
  std::condition_variable cv;
  bool exited = false;  // the thread left (idle too long, or stop_)
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(
    const PrefillWorkerOptions& options) {
  std::unique_ptr<PrefillWorker> w(new PrefillWorker(options));
  RETURN_IF_ERROR(w->Init());
  return w;
}

absl::Status PrefillWorker::Init() {
  if (!options_.router_address.empty()) {
    RETURN_IF_ERROR(
        CheckAdvertisable(options_.grpc_address, options_.advertise_address, "advertise-address"));
  }
  ASSIGN_OR_RETURN(engine_, Engine::Create(options_.engine));
  if (options_.warm_up) {
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(engine_->WarmUp(options_.default_chunk_tokens, options_.default_chunk_tokens,
                                    /*decode_steps=*/0));
    std::fprintf(stderr, "prefill %s: warmed up in %lld ms\n", options_.worker_id.c_str(),
                 static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - t0)));
  }
  m_ = std::make_unique<Metrics>();
  auto gauge = [&](const char* n, const char* h) {
    return metrics::AddUnlabelledGauge(registry_, n, h);
  };
  auto hist = [&](const char* n, const char* h) {
    return metrics::AddUnlabelledHistogram(registry_, n, h, metrics::LatencySecondsBuckets());
  };
  RETURN_IF_ERROR(metrics::RegisterCpuKernelInfo(&registry_));
  RETURN_IF_ERROR(metrics::RegisterProcessMetrics(&registry_));
  ASSIGN_OR_RETURN(m_->prefix, PrefixCacheMetrics::Create(&registry_));
  registry_.AddCollectHook([this] { m_->prefix.Update(engine_->cache_stats()); });
  RETURN_IF_ERROR(RegisterKvTierMetrics(&registry_, [this] { return engine_->kv_tier_stats(); }));
  ASSIGN_OR_RETURN(m_->queue_depth, gauge("ced_prefill_queue_depth", "Prefill requests waiting."));
  ASSIGN_OR_RETURN(m_->queued_tokens,
                   gauge("ced_prefill_outstanding_tokens", "Prompt tokens queued or in flight."));
  ASSIGN_OR_RETURN(m_->weights_bytes,
                   gauge("ced_weights_resident_bytes", "Bytes of model weights resident."));
  ASSIGN_OR_RETURN(m_->prompt_tokens,
                   metrics::AddUnlabelledCounter(registry_, "ced_prompt_tokens_total",
                                                 "Prompt tokens prefilled."));
  ASSIGN_OR_RETURN(auto* tb,
                   registry_.AddCounter("ced_kv_transfer_bytes_total",
                                        "K/V bytes moved over the data plane.", {"direction"}));
  m_->transfer_bytes = &tb->WithLabels({{"direction", "out"}});
  ASSIGN_OR_RETURN(auto* rp, registry_.AddCounter("ced_replays_total", "Replays by where they ran.",
                                                  {"placement"}));
  m_->replays = &rp->WithLabels({{"placement", "prefill"}});
  ASSIGN_OR_RETURN(m_->requests,
                   registry_.AddCounter("ced_requests_total", "Requests by outcome.", {"outcome"}));
  ASSIGN_OR_RETURN(
      m_->admission_rejected,
      registry_.AddCounter(
          "ced_prefill_admission_rejected_total",
          "Prefill requests refused with RESOURCE_EXHAUSTED, by the bound that refused them.",
          {"reason"}));
  for (const char* reason : {"queue_requests", "queue_tokens"})
    m_->admission_rejected->WithLabelValues({reason});
  ASSIGN_OR_RETURN(m_->queue_seconds,
                   hist("ced_prefill_queue_seconds", "Receipt to the start of its prefill."));
  ASSIGN_OR_RETURN(m_->prefill_seconds,
                   hist("ced_prefill_seconds", "Compute time of one prefill."));
  ASSIGN_OR_RETURN(m_->ttft_seconds,
                   hist("ced_prefill_time_to_first_token_seconds",
                        "Receipt to first token sampled here (replay on prefill)."));
  ASSIGN_OR_RETURN(m_->transfer_seconds,
                   hist("ced_kv_transfer_seconds",
                        "Time of one K/V message send, until the receiver's verdict."));
  m_->weights_bytes->Set(static_cast<double>(engine_->weights().resident_bytes()));
  registry_.AddCollectHook([this] {
    ced::internal::LoadReport unused;
    FillLoad(&unused);  // refreshes the queue gauges at scrape time
  });

  kv_transport::TransportOptions to;
  to.kind = options_.kv_transport;
  to.log_connections = true;
  ASSIGN_OR_RETURN(transport_, kv_transport::CreateKvTransport(to));
  if (options_.faults.any_corrupt()) {
    to.corrupt_payload_checksum_for_testing = true;
    ASSIGN_OR_RETURN(corrupt_transport_, kv_transport::CreateKvTransport(to));
  }
  if (options_.faults.any()) {
    std::fprintf(stderr, "prefill %s: FAULT INJECTION enabled (%zu rules)\n",
                 options_.worker_id.c_str(), options_.faults.rules.size());
  }
  service_ = MakePrefillService(this);
  ServerOptions so;
  so.grpc_address = options_.grpc_address;
  so.metrics_address = options_.metrics_address;
  so.services = {service_.get()};
  so.health_service_name = "ced.internal.PrefillWorker";
  so.registry = &registry_;
  ASSIGN_OR_RETURN(server_, RunningServer::Start(so));
  compute_ = std::thread([this] { ComputeLoop(); });
  if (!options_.router_address.empty()) {
    RouterClient::Options ro;
    ro.router_address = options_.router_address;
    ro.worker = MakeWorkerInfo(
        *engine_, options_.worker_id, ced::internal::ROLE_PREFILL,
        options_.advertise_address.empty() ? server_->grpc_address() : options_.advertise_address,
        transport_->name());
    const bool full = engine_->weights().lm_head.loaded();
    ro.worker.set_weights(options_.engine.weights == WeightSet::kEncoderOnly && !full
                              ? ced::internal::WEIGHTS_HELD_ENCODER_ONLY
                              : ced::internal::WEIGHTS_HELD_ENCODER_REPLAY);
    ro.load = [this](ced::internal::LoadReport* r) { FillLoad(r); };
    ro.engine = engine_.get();  // prefix-cache reports for cache-aware routing
    router_ = std::make_unique<RouterClient>(std::move(ro));
    router_->Start();
  }
  return absl::OkStatus();
}

PrefillWorker::PrefillWorker(const PrefillWorkerOptions& o) : options_(o) {}

PrefillWorker::~PrefillWorker() { Shutdown(); }

void PrefillWorker::FillLoad(ced::internal::LoadReport* report) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t queued = 0;
  for (const auto& j : queue_) queued += static_cast<int64_t>(j->tokens.size());
  report->set_queued_prefill_tokens(queued);
  report->set_inflight_prefill_tokens(current_remaining_tokens_);
  const CacheStats cs = engine_->cache_stats();
  report->set_free_kv_blocks(cs.available_blocks());
  report->set_total_kv_blocks(cs.global_blocks_total);
  m_->queue_depth->Set(static_cast<double>(queue_.size()));
  m_->queued_tokens->Set(static_cast<double>(queued + current_remaining_tokens_));
}

void PrefillWorker::Drain() {
  draining_ = true;
  if (server_) server_->SetServing(false);
  if (router_) router_->Stop();
  const auto until = Clock::now() + std::chrono::milliseconds(options_.drain_timeout_ms);
  while (Clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool sending = false;
      for (const auto& [peer, lane] : lanes_) sending = sending || !lane->sends.empty();
      if (queue_.empty() && current_ == nullptr && !sending && in_transfer_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void PrefillWorker::Shutdown() {
  if (router_) router_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    for (auto& j : queue_) {
      j->stream->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill worker shutting down"));
    }
    queue_.clear();
    if (current_) current_->cancelled = true;
    for (auto& j : in_transfer_) j->cancelled = true;
  }
  cv_.notify_all();
  if (compute_.joinable()) compute_.join();
  // No lane starts from here on: only the compute thread queues messages.
  std::vector<SendLane*> lanes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [peer, lane] : lanes_) {
      lane->cv.notify_all();
      lanes.push_back(lane.get());
    }
  }
  for (SendLane* lane : lanes) {
    if (lane->thread.joinable()) lane->thread.join();
  }
  if (server_) server_->Shutdown(500);
  transport_.reset();
}

absl::Status PrefillWorker::Enqueue(std::shared_ptr<Job> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) return absl::UnavailableError("prefill worker is draining");
  if (queue_.size() >= static_cast<size_t>(options_.max_queued_requests)) {
    m_->admission_rejected->WithLabelValues({"queue_requests"}).Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("prefill queue is full (", options_.max_queued_requests, " requests)"));
  }
  int64_t queued_tokens = 0;
  for (const auto& j : queue_) queued_tokens += static_cast<int64_t>(j->tokens.size());
  if (queued_tokens + static_cast<int64_t>(job->tokens.size()) > options_.max_queued_tokens) {
    m_->admission_rejected->WithLabelValues({"queue_tokens"}).Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "prefill queue is full: ", queued_tokens, " prompt tokens queued and ", job->tokens.size(),
        " more would exceed --max-queued-tokens ", options_.max_queued_tokens));
  }
  queue_.push_back(std::move(job));
  cv_.notify_all();
  return absl::OkStatus();
}

bool PrefillWorker::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  bool found = false;
  for (auto& j : queue_) {
    if (j->req.request_id() == request_id) {
      j->cancelled = true;
      found = true;
    }
  }
  if (current_ && current_->req.request_id() == request_id) {
    current_->cancelled = true;
    found = true;
  }
  for (auto& j : in_transfer_) {
    if (j->req.request_id() == request_id) {
      j->cancelled = true;
      found = true;
    }
  }
  return found;
}

void PrefillWorker::QueueSend(const std::shared_ptr<Job>& job, KvMessageHeader h,
                              std::vector<ConstSpan> payload, bool checksum_given) {
  auto task = std::make_unique<SendTask>();
  task->job = job;
  task->header = h;
  task->payload = std::move(payload);
  task->checksum_given = checksum_given;
  std::lock_guard<std::mutex> lock(mu_);
  ++job->pending_sends;
  // Lanes whose thread left on its own are joined (at once: it only had to
  // return) and forgotten; one starts when its peer has a message again.
  for (auto it = lanes_.begin(); it != lanes_.end();) {
    if (!it->second->exited) {
      ++it;
      continue;
    }
    if (it->second->thread.joinable()) it->second->thread.join();
    it = lanes_.erase(it);
  }
  std::unique_ptr<SendLane>& lane = lanes_[job->req.decode_kv_address()];
  if (lane == nullptr) {
    lane = std::make_unique<SendLane>();
    lane->thread = std::thread([this, l = lane.get()] { SenderLoop(l); });
  }
  lane->sends.push_back(std::move(task));
  lane->cv.notify_all();
}

void PrefillWorker::SendNotice(const std::shared_ptr<Job>& job) {
  KvMessageHeader h;
  h.kind = KvMessageKind::kGlobalRange;  // the empty range [0, 0), no payload
  h.request_id = job->id_hash;
  h.transfer_token = job->req.transfer_token();
  h.format = engine_->kv_format();
  // Best effort: a decode worker that predates notices, or whose reservation
  // ended, refuses them, and the job's own K/V will tell. An unreachable peer
  // fails the job now: its K/V could never land, so it must not take compute
  // (or the sender) from the other peers' jobs.
  auto done = [this, job](absl::Status status) {
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!job->send_error.ok()) return;
    job->send_error = absl::Status(
        status.code(),
        absl::StrCat("sending K/V to ", job->req.decode_kv_address(), ": ", status.message()));
  };
  // Asynchronous: a notice never holds up the sender thread, whatever the peer.
  transport_->SendAsync(job->req.decode_kv_address(), h, {}, /*checksum_given=*/false,
                        std::move(done));
}

void PrefillWorker::NotifyQueued() {
  const auto now = Clock::now();
  const auto interval = std::chrono::milliseconds(options_.progress_notice_interval_ms);
  std::vector<std::shared_ptr<Job>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& j : queue_) {
      if (j->cancelled || !j->send_error.ok() || now - j->last_notice < interval) continue;
      j->last_notice = now;
      due.push_back(j);
    }
  }
  for (const auto& j : due) SendNotice(j);  // without mu_: `done` may run here
}

void PrefillWorker::SenderLoop(SendLane* lane) {
  // A lane idle this long ends its thread (decode workers come and go).
  constexpr auto kIdle = std::chrono::seconds(10);
  while (true) {
    std::unique_ptr<SendTask> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      lane->cv.wait_for(lock, kIdle, [&] { return stop_ || !lane->sends.empty(); });
      if (lane->sends.empty()) {
        lane->exited = true;
        return;
      }
      task = std::move(lane->sends.front());
      lane->sends.pop_front();
    }
    Job& job = *task->job;
    absl::Status status;
    const PrefillFaultRule* fault = job.fault;
    auto must_skip = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return !job.send_error.ok() || (job.cancelled && !(fault != nullptr && fault->ignore_cancel));
    };
    bool skip = must_skip();
    if (!skip && fault != nullptr && fault->send_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fault->send_delay_ms));
      skip = must_skip();
    }
    const auto t0 = Clock::now();
    if (!skip) {
      kv_transport::KvTransport* transport =
          fault != nullptr && fault->corrupt_checksum ? corrupt_transport_.get() : transport_.get();
      status =
          task->checksum_given
              ? transport->SendChecksummed(job.req.decode_kv_address(), task->header, task->payload)
              : transport->Send(job.req.decode_kv_address(), task->header, task->payload);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::unique_lock<std::mutex> lock(mu_);
    if (!skip) {
      m_->transfer_seconds->Observe(secs);
      if (status.ok()) {
        job.sent_bytes += static_cast<int64_t>(task->header.payload_bytes);
        m_->transfer_bytes->Increment(static_cast<double>(task->header.payload_bytes));
      } else if (job.send_error.ok()) {
        job.send_error = absl::Status(
            status.code(),
            absl::StrCat("sending K/V to ", job.req.decode_kv_address(), ": ", status.message()));
      }
    }
    const bool last = --job.pending_sends == 0 && job.computed;
    lock.unlock();
    cv_.notify_all();
    if (last) Complete(task->job);
  }
}

void PrefillWorker::ReleaseCompleted() {
  std::vector<std::pair<SeqId, bool>> seqs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seqs.swap(release_);
  }
  for (auto [seq, hold] : seqs) {
    (void)(hold ? engine_->HoldSequence(seq) : engine_->ReleaseSequence(seq));
  }
}

bool PrefillWorker::WaitForRelease() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stop_ || !release_.empty() || in_transfer_.empty(); });
    if (release_.empty()) return false;
  }
  ReleaseCompleted();
  return true;
}

void PrefillWorker::ComputeLoop() {
  while (true) {
    ReleaseCompleted();
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty() || !release_.empty(); });
      if (stop_) return;
      if (queue_.empty()) continue;  // sequences to release first
      job = queue_.front();
      queue_.pop_front();
      current_ = job;
      current_remaining_tokens_ = static_cast<int64_t>(job->tokens.size());
    }
    RunJob(job);
    std::lock_guard<std::mutex> lock(mu_);
    current_.reset();
    current_remaining_tokens_ = 0;
  }
}

}  // namespace ced::services

namespace ced::services {

void PrefillWorker::Fail(Job& job, const absl::Status& s) {
  m_->requests
      ->WithLabels({{"outcome", s.code() == absl::StatusCode::kCancelled ? "cancelled" : "error"}})
      .Increment();
  job.stream->Close(ToGrpc(s));
}

void PrefillWorker::RunJob(const std::shared_ptr<Job>& jp) {
  Job& job = *jp;
  const ModelConfig& c = engine_->config();
  const PrefillFaultRule* fault = job.fault;
  const bool deaf = fault != nullptr && fault->ignore_cancel;
  auto is_cancelled = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return (job.cancelled && !deaf) || !job.send_error.ok();
  };
  auto fail = [&](const absl::Status& s) { Fail(job, s); };
  absl::Status unreachable;  // a progress notice found its decode worker gone
  {
    std::lock_guard<std::mutex> lock(mu_);
    unreachable = job.send_error;
  }
  if (!unreachable.ok()) return fail(unreachable);
  if (is_cancelled()) return fail(absl::CancelledError("prefill cancelled before it started"));
  // Tells the decode worker the compute started: its reservation timeout
  // counts from here until the first chunk lands.
  SendNotice(jp);
  const int n = static_cast<int>(job.tokens.size());
  SeqId seq;
  {
    // Room held by earlier jobs whose K/V is still in flight comes back when
    // their last message is acknowledged.
    // The longest cached prefix of the prompt is reused (§1.6): the prefill
    // computes only the encoder rebuild and the new tokens.
    int cached = 0;
    auto s = engine_->CreateSequenceForPrompt(job.tokens, n, &cached);
    while (absl::IsResourceExhausted(s.status()) && WaitForRelease()) {
      s = engine_->CreateSequenceForPrompt(job.tokens, n, &cached);
    }
    if (!s.ok()) return fail(s.status());
    seq = *s;
    job.cached_tokens = cached;
    m_->prefix.CountLookup(n, cached);
  }
  job.seq = seq;
  KvMessageHeader base;
  base.request_id = job.id_hash;
  base.transfer_token = job.req.transfer_token();
  base.format = engine_->kv_format();
  PrefillOptions po;
  po.replay = job.req.replay().mode() == ced::internal::REPLAY_MODE_EXACT ? ReplayMode::kExact
                                                                          : ReplayMode::kBounded;
  po.replay_window = job.req.replay().replay_window();
  po.defer_replay = !job.replay_here;
  po.chunk_tokens = job.chunk;
  po.cancelled = is_cancelled;
  int chunks_done = 0;
  po.on_chunk = [&](int begin, int end) {
    // The queue moves as this job computes: its requests' reservations live on.
    NotifyQueued();
    if (fault != nullptr && fault->stall_after_chunks > 0 &&
        chunks_done++ >= fault->stall_after_chunks) {
      // Test only: the compute stops making progress until cancelled.
      while (!is_cancelled()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_remaining_tokens_ = n - end;
    }
    if (fault != nullptr && fault->chunk_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fault->chunk_delay_ms));
    }
    const int skip = std::min(end, std::max(begin, job.req.skip_prefix_tokens()));
    if (skip >= end) return;
    if (fault != nullptr && fault->truncate && end == n) return;
    auto regions = engine_->GlobalRegions(seq, skip, end);
    if (!regions.ok()) return;
    KvMessageHeader h = base;
    h.kind = KvMessageKind::kGlobalRange;
    h.token_begin = static_cast<uint32_t>(skip);
    h.token_end = static_cast<uint32_t>(end);
    std::vector<ConstSpan> payload;
    for (const ByteRegion& r : *regions) {
      payload.push_back({r.data, r.size});
      h.payload_bytes += r.size;
    }
    // The chunk's K/V was just written by this thread: checksum it while it is
    // still in this core's cache, so the transport need not read it again
    // (host memory only; a device cache is checksummed by its transport).
    const bool checksum_here = options_.engine.device == "cpu";
    if (checksum_here) h.payload_checksum = kv_transport::ChecksumSpans(payload);
    QueueSend(jp, h, std::move(payload), checksum_here);
  };
  const auto t0 = Clock::now();
  job.queue_ms = std::chrono::duration<double, std::milli>(t0 - job.t_received).count();
  m_->queue_seconds->Observe(job.queue_ms / 1000.0);
  auto pre = engine_->Prefill(seq, job.tokens, po);
  // From here until the last message is acknowledged: the transfer time not
  // hidden behind the prefill compute.
  job.t_computed = Clock::now();
  job.compute_s = std::chrono::duration<double>(job.t_computed - t0).count();
  absl::Status status = pre.status();
  int32_t first = -1;
  StepLogprobs first_logprobs;
  if (status.ok()) {
    m_->prefill_seconds->Observe(job.compute_s);
    m_->prompt_tokens->Increment(n);
    job.replayed = pre->replay_done && !c.IsDecoderOnly();
    if (pre->replay_done) {
      const SamplingParams sampling = FromProto(job.req.sampling());
      first = SampleStep(pre->logits.data(), c.vocab_size, sampling,
                         SamplingHistory(job.tokens, sampling), 0, &first_logprobs);
      if (!c.IsDecoderOnly()) m_->replays->Increment();
      ced::internal::PrefillResponse r;
      r.mutable_first_token()->set_token_id(first);
      if (sampling.logprobs) ToProto(first_logprobs, r.mutable_first_token()->mutable_logprobs());
      const double ttft =
          std::chrono::duration<double, std::milli>(Clock::now() - job.t_received).count();
      r.mutable_first_token()->set_ttft_ms(ttft);
      m_->ttft_seconds->Observe(ttft / 1000.0);
      job.stream->Push(std::move(r));
    }
    auto tail = engine_->ExportTail(seq, first);
    status = tail.status();
    if (tail.ok()) {
      // The decode worker streams the first token too: with its logprobs.
      if (first >= 0 && job.req.sampling().logprobs()) {
        tail->first_logprobs = ToPairs(first_logprobs);
      }
      job.tail_bytes = EncodeTail(*tail);
    }
  }
  if (status.ok()) {
    KvMessageHeader h = base;
    h.kind = KvMessageKind::kTail;
    h.token_begin = 0;
    h.token_end = static_cast<uint32_t>(n);
    h.flags = kv_transport::kKvFlagFinal;
    h.payload_bytes = job.tail_bytes.size();
    QueueSend(jp, h, {{job.tail_bytes.data(), job.tail_bytes.size()}});
  }
  // The compute thread moves on; the job completes when its last message is
  // acknowledged (here, when none is still in flight).
  bool last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.status = status;
    job.computed = true;
    in_transfer_.push_back(jp);
    last = job.pending_sends == 0;
  }
  if (last) Complete(jp);
}

void PrefillWorker::Complete(const std::shared_ptr<Job>& jp) {
  Job& job = *jp;
  const bool deaf = job.fault != nullptr && job.fault->ignore_cancel;
  absl::Status status = job.status;
  absl::Status send_error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    send_error = job.send_error;
    if (status.ok() && !send_error.ok()) status = send_error;
    if (status.ok() && job.cancelled && !deaf) status = absl::CancelledError("prefill cancelled");
  }
  const double transfer_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - job.t_computed).count();
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled && send_error.ok()) {
    // Tell the decode worker to stop waiting for this transfer.
    KvMessageHeader h;
    h.request_id = job.id_hash;
    h.transfer_token = job.req.transfer_token();
    h.format = engine_->kv_format();
    h.kind = KvMessageKind::kAbort;
    // Without waiting: the decode worker may be gone too.
    transport_->SendAsync(job.req.decode_kv_address(), h, {}, /*checksum_given=*/false,
                          [](absl::Status) {});
  }
  // Every message is acknowledged: the cache (and the tail's bytes) may go.
  {
    std::lock_guard<std::mutex> lock(mu_);
    release_.push_back({job.seq, status.ok()});
    in_transfer_.erase(std::find(in_transfer_.begin(), in_transfer_.end(), jp));
  }
  cv_.notify_all();
  if (!status.ok()) return Fail(job, status);
  ced::internal::PrefillResponse done;
  auto* d = done.mutable_done();
  d->set_prompt_tokens(static_cast<int32_t>(job.tokens.size()));
  d->set_cached_tokens(job.cached_tokens);
  d->set_transferred_bytes(job.sent_bytes);
  d->set_replayed(job.replayed);
  d->mutable_timings()->set_queue_ms(job.queue_ms);
  d->mutable_timings()->set_prefill_ms(job.compute_s * 1000.0);
  d->mutable_timings()->set_transfer_ms(transfer_ms);
  job.stream->Push(std::move(done));
  job.stream->Close(grpc::Status::OK);
  m_->requests->WithLabels({{"outcome", "ok"}}).Increment();
}

class PrefillWorker::Service final : public ced::internal::PrefillWorker::CallbackService {
 public:
  explicit Service(PrefillWorker* w) : w_(w) {}

  grpc::ServerWriteReactor<PrefillResponse>* Prefill(
      grpc::CallbackServerContext* ctx, const ced::internal::PrefillRequest* req) override {
    auto job = std::make_shared<Job>();
    job->t_received = Clock::now();
    const std::string id = req->request_id();
    PrefillWorker* w = w_;
    auto* writer = new StreamWriter<PrefillResponse>([w, id] { w->Cancel(id); });
    job->stream = writer->handle();
    absl::Status s = Validate(*req);
    if (s.ok()) {
      job->req = *req;
      job->tokens.assign(req->token_ids().begin(), req->token_ids().end());
      job->id_hash = RequestIdHash(id);
      job->replay_here = req->replay().replay_on() == ced::internal::REPLAY_ON_PREFILL;
      job->chunk = req->chunk_size() > 0 ? req->chunk_size() : w_->options_.default_chunk_tokens;
      job->fault = w_->options_.faults.Find(id);
      s = w_->Enqueue(job);
    }
    if (!s.ok()) writer->handle()->Close(ToGrpc(s));
    return writer;
  }

  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const ced::internal::CancelRequest* req,
                                   ced::internal::CancelResponse* resp) override {
    resp->set_found(w_->Cancel(req->request_id()));
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx,
                                  const ced::internal::DrainRequest* req,
                                  ced::internal::DrainResponse*) override {
    return AnswerDrain(ctx, "prefill worker", req->reason());
  }

  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* ctx,
                                       const ced::internal::FlushCacheRequest* req,
                                       ced::internal::FlushCacheResponse* resp) override {
    return AnswerFlushCache(ctx, "prefill worker", *w_->engine_, *req, resp);
  }

 private:
  absl::Status Validate(const ced::internal::PrefillRequest& req) const {
    const ModelConfig& c = w_->engine_->config();
    if (req.request_id().empty() || req.request_id().size() > 256) {
      return absl::InvalidArgumentError("request_id: must be 1..256 bytes");
    }
    RETURN_IF_ERROR(ValidatePrompt(req.token_ids(), c, "token_ids"));
    if (req.decode_kv_address().empty()) {
      return absl::InvalidArgumentError("decode_kv_address: required");
    }
    if (req.transfer_token() == 0) return absl::InvalidArgumentError("transfer_token: required");
    if (req.chunk_size() < 0 || req.chunk_size() > 65536) {
      return absl::InvalidArgumentError("chunk_size: must be in [0, 65536]");
    }
    if (req.skip_prefix_tokens() < 0 || req.skip_prefix_tokens() > req.token_ids_size()) {
      return absl::InvalidArgumentError("skip_prefix_tokens: out of range");
    }
    const std::string format(kernels::KvFormatName(w_->engine_->kv_format()));
    if (!req.kv_format().empty() && req.kv_format() != format) {
      return absl::InvalidArgumentError(absl::StrCat("kv_format: the decode worker expects ",
                                                     req.kv_format(), ", this worker stores ",
                                                     format));
    }
    if (absl::Status s = ValidateSamplingParams(FromProto(req.sampling())); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.", s.message()));
    }
    if (!ced::internal::ReplayOn_IsValid(req.replay().replay_on()) ||
        !ced::internal::ReplayMode_IsValid(req.replay().mode())) {
      return absl::InvalidArgumentError("replay: unknown enum value");
    }
    if (req.replay().replay_window() < 0 ||
        (req.replay().replay_window() > 0 &&
         req.replay().replay_window() < std::max(c.sliding_window, 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay.replay_window: must be 0 or >= ", std::max(c.sliding_window, 1)));
    }
    if (req.replay().replay_on() == ced::internal::REPLAY_ON_PREFILL && !c.IsDecoderOnly() &&
        !w_->engine_->weights().lm_head.loaded()) {
      return absl::FailedPreconditionError(
          "replay.replay_on: this prefill worker holds encoder-only weights and cannot replay");
    }
    return absl::OkStatus();
  }

  PrefillWorker* w_;
};

std::unique_ptr<grpc::Service> MakePrefillService(PrefillWorker* worker) {
  return std::make_unique<PrefillWorker::Service>(worker);
}

}  // namespace ced::services
