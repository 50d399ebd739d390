#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/common/stats.h"
#include "bench/sim/admission.h"
#include "bench/sim/cost_model.h"
#include "bench/sim/decode_instance.h"
#include "bench/sim/variable_step.h"
#include "engine/common/status.h"
#include "services/router_policy/worker_table.h"

namespace ced::sim {

double RequestResult::tpot_s() const {
  return output_tokens > 1 ? (finish_s - first_token_s) / static_cast<double>(output_tokens - 1)
                           : 0;
}

namespace {

enum class EventKind : uint8_t { kPrefillDone, kTransferDone, kHeartbeat, kEarlyReport };

// Arrivals and decode step ends are not in the heap: arrivals are read in
// order from the trace and come before any event at the same time (as if
// pushed first); each decode instance holds the end of its running step
// with its own sequence number (the heap's order, without its cost).
struct Event {
  double t;
  uint64_t seq;   // FIFO among equal times: determinism
  uint32_t gen;   // step events: the step's generation (stale when it moved)
  int32_t index;  // request or instance
  EventKind kind;
};
struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

struct Req {
  RequestSpec spec;
  std::vector<int> blocks;  // the decode instance's KV blocks, while admitted
  int prefill = -1, decode = -1;
  bool replay_on_decode = false;
  int64_t generated = 0;
  RequestResult result;
};

struct PrefillInst {
  std::string id;
  std::deque<int> queue;
  int64_t queued_tokens = 0;
  int current = -1;
  double link_free_s = 0;
  VariableStep step;
  int neighbour = -1;  // the decode instance on the same machine (colocated)
};

struct DecodeInst {
  std::string id;
  std::unique_ptr<DecodeKvPool> pool;       // the engine's block allocator
  std::unique_ptr<SimDecodeInstance> exec;  // the worker's scheduler + the cost model
  int reserved = 0;                         // admitted, not finished
  bool busy = false;
  VariableStep step;
  double end_t = 0;  // the running step's end, when busy
  uint64_t end_seq = 0;
  int neighbour = -1;  // the prefill instance on the same machine (colocated)
  EarlyReports early;  // as the decode worker's RouterClient::ReportSoon
};

absl::Time ToTime(double s) { return absl::UnixEpoch() + absl::Nanoseconds(std::llround(s * 1e9)); }

class Simulator {
 public:
  Simulator(const SimOptions& options, std::unique_ptr<CostModel> cost)
      : o_(options), cost_(std::move(cost)), table_(router::WorkerTable::Options{}) {}

  absl::Status Init(std::vector<RequestSpec> trace);
  SimSummary Run();

 private:
  void Push(double t, EventKind kind, int index, uint32_t gen = 0) {
    events_.push(Event{t, seq_++, gen, index, kind});
  }
  void OnArrival(int r);
  void RespeedPrefill(int p);
  void RespeedDecode(int d);
  void ScheduleDecodeEnd(DecodeInst& inst, double t) {
    inst.end_t = t;
    inst.end_seq = seq_++;
  }
  double PrefillSpeed(const PrefillInst& p) const;
  double DecodeSpeed(const DecodeInst& d) const;
  // Places the request, fails it, or (refuse_when_full) refuses it; false
  // when it is to wait for room (routed again at the next heartbeat).
  bool Route(int r);
  void Fail(int r);
  void Refuse(int r);
  void Finish(int r);
  void StartPrefill(int p);
  void OnPrefillDone(int p);
  void OnTransferDone(int r);
  void StartDecodeStep(int d);
  void OnDecodeStepDone(int d);
  void Heartbeat();
  void ReportDecode(DecodeInst& d, absl::Time at);
  void EarlyReport(int d);

  const SimOptions& o_;
  std::unique_ptr<CostModel> cost_;
  router::WorkerTable table_;
  std::unique_ptr<router::CedRoutingPolicy> policy_;
  std::vector<Req> reqs_;
  std::vector<PrefillInst> prefill_;
  std::vector<DecodeInst> decode_;
  std::deque<int> retry_;  // waiting for decode room (not refuse_when_full)
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::vector<double> arrivals_;  // at the router, by request (non-decreasing)
  size_t next_arrival_ = 0;
  uint64_t seq_ = 0;
  double now_ = 0;
  double room_refused_at_ = -1;  // the router last refused a request for room (< 0: never)
  int unfinished_ = 0;
  int64_t prefill_room_tokens_ = 0;
  int64_t max_decode_blocks_ = 0;
  bool prefill_replays_ = false;
  std::vector<int> first_token_, finished_;  // of a decode step (scratch)
  double prefill_slowdown_ = 1, decode_slowdown_ = 1;
};

void Simulator::RespeedPrefill(int p) {
  PrefillInst& inst = prefill_[p];
  if (inst.current >= 0 && inst.step.Respeed(now_, PrefillSpeed(inst))) {
    Push(inst.step.End(now_), EventKind::kPrefillDone, p, ++inst.step.gen);
  }
}

void Simulator::RespeedDecode(int d) {
  DecodeInst& inst = decode_[d];
  if (inst.busy && inst.step.Respeed(now_, DecodeSpeed(inst)))
    ScheduleDecodeEnd(inst, inst.step.End(now_));
}

double Simulator::PrefillSpeed(const PrefillInst& p) const {
  return p.neighbour >= 0 && decode_[p.neighbour].busy ? 1 / prefill_slowdown_ : 1;
}

double Simulator::DecodeSpeed(const DecodeInst& d) const {
  return d.neighbour >= 0 && prefill_[d.neighbour].current >= 0 ? 1 / decode_slowdown_ : 1;
}

absl::Status Simulator::Init(std::vector<RequestSpec> trace) {
  const bool replay_on_decode = o_.replay_on == router::ReplayOnChoice::kDecode;
  prefill_replays_ = !replay_on_decode;
  const WeightSet prefill_set = cost_->PrefillWeightSet(prefill_replays_);
  const double prefill_room = cost_->KvRoomBytes(prefill_set, o_.prefill_gpus);
  const double decode_room = cost_->KvRoomBytes(WeightSet::kFull, o_.decode_gpus);
  if (prefill_room <= 0 || decode_room <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim: weights do not fit: prefill instance KV room ", prefill_room / 1e9,
                     " GB, decode instance KV room ", decode_room / 1e9, " GB"));
  }
  prefill_room_tokens_ = static_cast<int64_t>(prefill_room / cost_->kv_bytes_per_token());
  const int64_t blocks =
      static_cast<int64_t>(decode_room / (cost_->kv_bytes_per_token() * o_.block_size));
  max_decode_blocks_ = blocks;

  router::CedRoutingPolicy::Options policy;
  policy.count_inflight = o_.count_inflight;
  policy.decoder_only = cost_->decoder_only();
  policy.replay_on = o_.replay_on;
  policy.clock = [this] { return ToTime(now_); };
  ASSIGN_OR_RETURN(policy_, router::CedRoutingPolicy::Create(&table_, policy));

  router::WeightsHeld held = router::WeightsHeld::kFull;
  if (prefill_set == WeightSet::kEncoderOnly) held = router::WeightsHeld::kEncoderOnly;
  if (prefill_set == WeightSet::kEncoderReplay) held = router::WeightsHeld::kEncoderReplay;
  for (int i = 0; i < o_.prefill_instances; ++i) {
    PrefillInst p;
    p.id = absl::StrFormat("p%03d", i);
    RETURN_IF_ERROR(table_.Register({p.id, router::Role::kPrefill, held, 0, 0}, ToTime(0)));
    prefill_.push_back(std::move(p));
  }
  for (int i = 0; i < o_.decode_instances; ++i) {
    DecodeInst d;
    d.id = absl::StrFormat("d%03d", i);
    d.pool = std::make_unique<DecodeKvPool>(blocks, o_.block_size);
    SimDecodeInstance::Options exec;
    exec.cost = cost_.get();
    exec.gpus = o_.decode_gpus;
    exec.max_batch = o_.max_batch;
    exec.max_step_tokens = o_.max_step_tokens;
    ASSIGN_OR_RETURN(d.exec, SimDecodeInstance::Create(exec));
    RETURN_IF_ERROR(table_.Register(
        {d.id, router::Role::kDecode, router::WeightsHeld::kFull, blocks, o_.block_size},
        ToTime(0)));
    decode_.push_back(std::move(d));
  }
  if (o_.colocated) {
    for (int i = 0; i < std::min(o_.prefill_instances, o_.decode_instances); ++i) {
      prefill_[i].neighbour = i;
      decode_[i].neighbour = i;
    }
  }
  prefill_slowdown_ = std::max(1.0, cost_->gpu().prefill_colocated_slowdown);
  decode_slowdown_ = std::max(1.0, cost_->gpu().decode_colocated_slowdown);
  auto earlier = [](const RequestSpec& a, const RequestSpec& b) {
    return a.arrival_s < b.arrival_s;
  };
  if (!std::is_sorted(trace.begin(), trace.end(), earlier)) {
    std::stable_sort(trace.begin(), trace.end(), earlier);
  }
  reqs_.reserve(trace.size());
  arrivals_.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    Req r;
    r.spec = trace[i];
    r.result.arrival_s = r.spec.arrival_s;
    r.result.prompt_tokens = r.spec.prompt_tokens;
    r.result.output_tokens = r.spec.output_tokens;
    // The path to the router (gateway, RPC hops) before the request is placed.
    arrivals_.push_back(r.spec.arrival_s + cost_->gpu().request_s);
    reqs_.push_back(std::move(r));
  }
  unfinished_ = static_cast<int>(reqs_.size());
  Push(0, EventKind::kHeartbeat, 0);
  return absl::OkStatus();
}

bool Simulator::Route(int r) {
  Req& q = reqs_[r];
  router::RouteRequest route;
  route.prompt_tokens = q.spec.prompt_tokens;
  route.max_tokens = q.spec.output_tokens;
  // Ids are a letter and the instance's index (Init).
  auto index = [](const std::string& id) {
    int i = 0;
    for (size_t k = 1; k < id.size(); ++k) i = 10 * i + (id[k] - '0');
    return i;
  };
  auto reserve = [&](const router::Decision& decision) {
    q.decode = index(decision.decode_id);
    q.prefill = index(decision.prefill_id);
    q.replay_on_decode = !cost_->decoder_only() && decision.replay_on == router::ReplayOn::kDecode;
    DecodeInst& d = decode_[q.decode];
    // The router's view is a heartbeat old: the worker checks its own blocks
    // and its scheduler's queue bounds. The prefill instance makes the first
    // token unless the replay runs on decode.
    if (!d.pool->TryAdmit(q.spec.prompt_tokens, q.spec.output_tokens, &q.blocks)) {
      d.early.Refused();
      return false;
    }
    if (!d.exec->Reserve(r, q.spec.prompt_tokens, q.spec.output_tokens, q.replay_on_decode ? 0 : 1,
                         now_)) {
      d.pool->Release(&q.blocks);
      return false;
    }
    return true;
  };
  bool router_refused = false;
  const Placement placed = PlaceLikeTheGateway(policy_.get(), std::move(route), o_.refuse_when_full,
                                               o_.reserve_retries, reserve, &router_refused);
  if (router_refused) room_refused_at_ = now_;
  switch (placed) {
    case Placement::kWait:
      return false;
    case Placement::kRefused:
      Refuse(r);
      return true;
    case Placement::kFailed:
      Fail(r);
      return true;
    case Placement::kPlaced:
      break;
  }
  DecodeInst& d = decode_[q.decode];
  ++d.reserved;
  PrefillInst& p = prefill_[q.prefill];
  p.queue.push_back(r);
  p.queued_tokens += q.spec.prompt_tokens;
  if (p.current < 0) StartPrefill(q.prefill);
  return true;
}

void Simulator::Fail(int r) {
  reqs_[r].result.completed = false;
  --unfinished_;
}

void Simulator::Refuse(int r) {
  reqs_[r].result.refused = true;
  Fail(r);
}

void Simulator::Finish(int r) {
  Req& q = reqs_[r];
  if (q.result.finish_s < 0) q.result.finish_s = now_;  // else: done on prefill (OnPrefillDone)
  q.result.completed = true;
  q.result.replayed_on_decode = q.replay_on_decode;
  DecodeInst& d = decode_[q.decode];
  d.pool->Release(&q.blocks);
  --d.reserved;
  --unfinished_;
  if (const double at = d.early.AfterRelease(now_); at >= 0 && unfinished_ > 0) {
    Push(at, EventKind::kEarlyReport, q.decode);
  }
}

void Simulator::StartPrefill(int p) {
  PrefillInst& inst = prefill_[p];
  if (inst.current >= 0 || inst.queue.empty()) return;
  const int r = inst.queue.front();
  inst.queue.pop_front();
  inst.current = r;
  const Req& q = reqs_[r];
  inst.queued_tokens -= q.spec.prompt_tokens;
  const double step =
      cost_->PrefillSeconds(q.spec.prompt_tokens, !q.replay_on_decode, o_.prefill_gpus);
  const double end = inst.step.Begin(now_, step, PrefillSpeed(inst));
  Push(end, EventKind::kPrefillDone, p, inst.step.gen);
  if (inst.neighbour >= 0) RespeedDecode(inst.neighbour);
}

void Simulator::OnPrefillDone(int p) {
  PrefillInst& inst = prefill_[p];
  const int r = inst.current;
  inst.current = -1;
  Req& q = reqs_[r];
  q.result.prefill_s = now_ - inst.step.start_s;
  if (!q.replay_on_decode) {  // the prefill instance made the first token
    q.result.first_token_s = now_;
    q.generated = 1;
  }
  // A one-token answer is the client's now; its K/V still goes to the decode
  // instance, whose scheduler holds the reservation until it lands and ends
  // it there (its blocks are released then, in Finish).
  if (q.generated >= q.spec.output_tokens) q.result.finish_s = now_;
  const double start = std::max(now_, inst.link_free_s);
  inst.link_free_s = start + cost_->TransferSeconds(q.spec.prompt_tokens, q.replay_on_decode);
  Push(inst.link_free_s, EventKind::kTransferDone, r);
  StartPrefill(p);
  if (inst.current < 0 && inst.neighbour >= 0) RespeedDecode(inst.neighbour);
}

void Simulator::OnTransferDone(int r) {
  const Req& q = reqs_[r];
  DecodeInst& inst = decode_[q.decode];
  inst.exec->OnKvLanded(r, q.replay_on_decode, now_);
  if (!inst.busy) StartDecodeStep(q.decode);
}

void Simulator::StartDecodeStep(int d) {
  DecodeInst& inst = decode_[d];
  const double seconds = inst.exec->BeginStep(now_);
  const bool was_busy = inst.busy;
  inst.busy = seconds >= 0;
  if (inst.busy) ScheduleDecodeEnd(inst, inst.step.Begin(now_, seconds, DecodeSpeed(inst)));
  if (inst.busy != was_busy && inst.neighbour >= 0) RespeedPrefill(inst.neighbour);
}

void Simulator::OnDecodeStepDone(int d) {
  DecodeInst& inst = decode_[d];
  inst.exec->EndStep(&first_token_, &finished_);
  for (int r : first_token_) reqs_[r].result.first_token_s = now_;
  for (int r : finished_) Finish(r);
  StartDecodeStep(d);
}

void Simulator::Heartbeat() {
  const absl::Time t = ToTime(now_);
  for (const PrefillInst& p : prefill_) {
    router::WorkerLoad load;
    load.queued_prefill_tokens = p.queued_tokens;
    load.inflight_prefill_tokens = p.current >= 0 ? reqs_[p.current].spec.prompt_tokens : 0;
    load.last_heartbeat = t;
    (void)table_.Update(p.id, load);  // registered above: cannot be NOT_FOUND
  }
  for (DecodeInst& d : decode_) ReportDecode(d, t);
  while (!retry_.empty() && Route(retry_.front())) retry_.pop_front();
  if (unfinished_ > 0) Push(now_ + o_.heartbeat_s, EventKind::kHeartbeat, 0);
}

void Simulator::ReportDecode(DecodeInst& d, absl::Time at) {
  router::WorkerLoad load;
  load.running_sequences = d.exec->running();
  load.waiting_sequences = d.reserved - load.running_sequences;
  load.free_kv_blocks = d.pool->free_blocks();
  load.last_heartbeat = at;
  d.early.OnReport(load.free_kv_blocks, d.pool->total_blocks(), now_, room_refused_at_);
  (void)table_.Update(d.id, load);
}

void Simulator::EarlyReport(int d) {
  ReportDecode(decode_[d], ToTime(now_));
  while (!retry_.empty() && Route(retry_.front())) retry_.pop_front();
}

void Simulator::OnArrival(int r) {
  const Req& q = reqs_[r];
  if (q.spec.prompt_tokens > prefill_room_tokens_ ||
      BlocksForRequest(q.spec.prompt_tokens, q.spec.output_tokens, o_.block_size) >
          max_decode_blocks_) {
    Fail(r);  // can never fit
  } else if (!retry_.empty() || !Route(r)) {
    retry_.push_back(r);  // FIFO behind earlier waiting requests
  }
}

SimSummary Simulator::Run() {
  while (unfinished_ > 0) {
    // The earliest decode step end, by (time, sequence).
    int d = -1;
    for (size_t i = 0; i < decode_.size(); ++i) {
      const DecodeInst& inst = decode_[i];
      if (inst.busy && (d < 0 || inst.end_t < decode_[d].end_t ||
                        (inst.end_t == decode_[d].end_t && inst.end_seq < decode_[d].end_seq))) {
        d = static_cast<int>(i);
      }
    }
    const bool heap = !events_.empty();
    if (d >= 0 && heap) {
      const Event& top = events_.top();
      if (top.t < decode_[d].end_t || (top.t == decode_[d].end_t && top.seq < decode_[d].end_seq)) {
        d = -1;
      }
    }
    const double next = d >= 0 ? decode_[d].end_t : heap ? events_.top().t : 0;
    if (next_arrival_ < arrivals_.size() &&
        ((d < 0 && !heap) || arrivals_[next_arrival_] <= next)) {
      now_ = arrivals_[next_arrival_];
      OnArrival(static_cast<int>(next_arrival_++));
      continue;
    }
    if (d >= 0) {
      now_ = decode_[d].end_t;
      OnDecodeStepDone(d);
      continue;
    }
    if (!heap) break;
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    switch (e.kind) {
      case EventKind::kPrefillDone:
        if (e.gen == prefill_[e.index].step.gen) OnPrefillDone(e.index);
        break;
      case EventKind::kTransferDone:
        OnTransferDone(e.index);
        break;
      case EventKind::kHeartbeat:
        Heartbeat();
        break;
      case EventKind::kEarlyReport:
        EarlyReport(e.index);
        break;
    }
  }

  SimSummary s;
  s.requests = static_cast<int>(reqs_.size());
  for (const DecodeInst& d : decode_) s.decode_steps += d.exec->decode_steps();
  std::vector<double> ttft, tpot;
  double first_arrival = reqs_.empty() ? 0 : reqs_.front().spec.arrival_s,
         last_finish = first_arrival;
  int64_t output_tokens = 0;
  s.results.reserve(reqs_.size());
  ttft.reserve(reqs_.size());
  tpot.reserve(reqs_.size());
  for (const Req& q : reqs_) {
    const RequestResult& r = q.result;
    s.results.push_back(r);
    if (!r.completed) {
      ++s.failed;
      if (r.refused) ++s.refused;
      continue;
    }
    ++s.completed;
    if (r.replayed_on_decode) ++s.replays_on_decode;
    ttft.push_back(r.ttft_s());
    tpot.push_back(r.tpot_s());
    output_tokens += r.output_tokens;
    last_finish = std::max(last_finish, r.finish_s);
    if (r.ttft_s() <= o_.ttft_slo_s && r.tpot_s() <= o_.tpot_slo_s) ++s.met_slo;
  }
  s.attainment = s.requests > 0 ? static_cast<double>(s.met_slo) / s.requests : 0;
  s.makespan_s = last_finish - first_arrival;
  if (s.makespan_s > 0) {
    s.throughput = s.completed / s.makespan_s;
    s.goodput = s.met_slo / s.makespan_s;
    s.output_tokens_per_s = static_cast<double>(output_tokens) / s.makespan_s;
  }
  // Percentiles as the load generator computes them (linear interpolation):
  // predictions and measurements are compared like for like.
  s.ttft_p50 = bench::Percentile(ttft, 50);
  s.ttft_p90 = bench::Percentile(ttft, 90);
  s.ttft_p99 = bench::Percentile(ttft, 99);
  s.tpot_p50 = bench::Percentile(tpot, 50);
  s.tpot_p90 = bench::Percentile(tpot, 90);
  s.tpot_p99 = bench::Percentile(tpot, 99);
  return s;
}

}  // namespace

std::string SimSummary::ToString() const {
  return absl::StrFormat(
      "requests=%d completed=%d failed=%d refused=%d met=%d attainment=%.17g "
      "ttft=%.17g/%.17g/%.17g "
      "tpot=%.17g/%.17g/%.17g makespan=%.17g goodput=%.17g steps=%d replays_on_decode=%d",
      requests, completed, failed, refused, met_slo, attainment, ttft_p50, ttft_p90, ttft_p99,
      tpot_p50, tpot_p90, tpot_p99, makespan_s, goodput, decode_steps, replays_on_decode);
}

absl::StatusOr<SimSummary> RunSimulation(const SimOptions& o) {
  if (o.prefill_instances < 1 || o.decode_instances < 1 || o.prefill_gpus < 1 ||
      o.decode_gpus < 1) {
    return absl::InvalidArgumentError("sim: instance counts and GPUs per instance must be >= 1");
  }
  if (o.block_size < 1 || o.max_batch < 1 || o.max_step_tokens < 1 || !(o.heartbeat_s > 0)) {
    return absl::InvalidArgumentError(
        "sim: block_size, max_batch, max_step_tokens and heartbeat must be > 0");
  }
  if (o.reserve_retries < 0) {
    return absl::InvalidArgumentError("sim: reserve_retries must be >= 0");
  }
  CostModel::Options cost;
  cost.config = o.model;
  cost.gpu = o.gpu;
  cost.link_bytes_per_s = o.link_bytes_per_s;  // unless the device sets its own
  ASSIGN_OR_RETURN(std::unique_ptr<CostModel> model, CostModel::Create(cost));
  std::vector<RequestSpec> trace = o.requests;
  if (trace.empty()) {
    ASSIGN_OR_RETURN(trace, MakeWorkload(o.workload));
  }
  for (const RequestSpec& r : trace) {
    if (r.prompt_tokens < 1 || r.output_tokens < 1) {
      return absl::InvalidArgumentError("sim: every request needs prompt and output >= 1 token");
    }
  }
  Simulator sim(o, std::move(model));
  RETURN_IF_ERROR(sim.Init(std::move(trace)));
  return sim.Run();
}

}  // namespace ced::sim
