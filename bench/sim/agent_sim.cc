#include "bench/sim/agent_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/common/stats.h"
#include "bench/sim/admission.h"
#include "bench/sim/cost_model.h"
#include "bench/sim/decode_instance.h"
#include "bench/sim/prefix_cache_model.h"
#include "bench/sim/variable_step.h"
#include "engine/common/status.h"
#include "services/router_policy/block_index.h"
#include "services/router_policy/worker_table.h"

namespace ced::sim {
namespace {

enum class Ev : uint8_t {
  kArrival,
  kPrefillDone,
  kTransferDone,
  kDecodeDone,
  kHeartbeat,
  kEarlyReport
};

struct Event {
  double t;
  uint64_t seq;  // FIFO among equal times: determinism
  int32_t index;
  Ev kind;
  uint32_t gen;  // kPrefillDone, kDecodeDone: the step it ends (stale when rescheduled)
};
struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

struct Turn {
  AgentTurnResult r;
  int prefill = -1, decode = -1;
  bool replay_on_decode = false;
  int64_t blocks = 0;  // reserved on the decode instance
  int64_t decode_held = 0;  // positions of a held sequence the decode instance took over
};

// The synthetic chain: block j of session s's conversation.
constexpr router::BlockKey kChainRoot{0xCED0000000000000ULL, 0x5e55105ULL};
router::BlockKey ChainKey(int session, int64_t block) {
  return router::BlockKey{static_cast<uint64_t>(session) + 1, static_cast<uint64_t>(block) + 1};
}

// An instance's cache events since the router's view of it (the worker's
// event log and router client): reported on each heartbeat.
struct CacheLog {
  uint64_t next_seq = 1;  // the number of the next event
  uint64_t acked = 0;     // where the router's view ends (0: send everything)
  std::vector<std::pair<router::BlockKey, bool>> events;  // (key, stored), oldest first
  void Hook(PrefixCacheModel* cache) {
    cache->set_block_listener([this](int session, int64_t begin, int64_t end, bool stored) {
      for (int64_t j = begin; j < end; ++j) events.emplace_back(ChainKey(session, j), stored);
      next_seq += static_cast<uint64_t>(end - begin);
    });
  }
  // The net effect of the events since `acked` (a key's last event decides).
  router::BlockReport Report() const {
    router::BlockReport r;
    r.base_seq = acked;
    r.end_seq = next_seq;
    r.full = acked == 0;  // then `events` is everything since the start
    absl::flat_hash_set<router::BlockKey> seen;
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (!seen.insert(it->first).second) continue;
      if (it->second) {
        r.added.push_back(it->first);
      } else if (!r.full) {
        r.evicted.push_back(it->first);
      }
    }
    return r;
  }
};

struct PrefillInst {
  std::string id;
  VariableStep step;
  int neighbour = -1;  // the decode instance on the same machine (colocated)
  std::unique_ptr<PrefixCacheModel> cache;
  std::unique_ptr<CacheLog> log;  // stable address: the cache's listener holds it
  std::deque<int> queue;
  int64_t queued_tokens = 0;
  int current = -1;
  double link_free_s = 0;
};

struct DecodeInst {
  std::string id;
  VariableStep step;
  int neighbour = -1;  // the prefill instance on the same machine (colocated)
  std::unique_ptr<PrefixCacheModel> cache;
  std::unique_ptr<CacheLog> log;
  std::unique_ptr<SimDecodeInstance> exec;  // the worker's scheduler + the cost model
  int reserved = 0;
  bool busy = false;  // a step is under way (its kDecodeDone is pending)
  EarlyReports early;  // as the decode worker's RouterClient::ReportSoon
};

absl::Time ToTime(double s) { return absl::UnixEpoch() + absl::Nanoseconds(std::llround(s * 1e9)); }

int IndexOf(const std::string& id) {  // "p003" -> 3
  int i = 0;
  for (size_t k = 1; k < id.size(); ++k) i = 10 * i + (id[k] - '0');
  return i;
}

class AgentSim {
 public:
  AgentSim(const AgentSimOptions& o, std::unique_ptr<CostModel> cost,
           std::vector<AgentSessionSpec> sessions)
      : o_(o),
        cost_(std::move(cost)),
        sessions_(std::move(sessions)),
        table_(router::WorkerTable::Options{}),
        index_(router::BlockIndex::Options{}) {}

  absl::Status Init();
  AgentSimSummary Run();

 private:
  void Push(double t, Ev kind, int index, uint32_t gen = 0) {
    events_.push(Event{t, seq_++, index, kind, gen});
  }
  double PrefillSpeed(const PrefillInst& p) const {
    return p.neighbour >= 0 && decode_[static_cast<size_t>(p.neighbour)].busy
               ? 1 / prefill_slowdown_
               : 1;
  }
  double DecodeSpeed(const DecodeInst& d) const {
    return d.neighbour >= 0 && prefill_[static_cast<size_t>(d.neighbour)].current >= 0
               ? 1 / decode_slowdown_
               : 1;
  }
  void RespeedPrefill(int p);
  void RespeedDecode(int d);
  int Id(int session, int turn) const { return session * o_.trace.turns + turn; }
  void OnArrival(int t);
  bool Route(int t);  // false: no room now (retry at the next heartbeat)
  void FailSession(int t);
  void RefuseSession(int t);  // refused (RESOURCE_EXHAUSTED): FailSession, marked
  void StartPrefill(int p);
  void OnPrefillDone(int p);
  void OnTransferDone(int t);
  void StartDecode(int d);  // the next step, when idle
  // The next step after one ended (was_busy) or from idle.
  void BeginDecodeStep(int d, bool was_busy);
  void OnDecodeDone(int d);
  void Finish(int t);
  void Heartbeat();
  void ReportDecode(DecodeInst& d, absl::Time at);
  void EarlyReport(int d);
  void Report(const std::string& id, CacheLog& log);

  const AgentSimOptions& o_;
  std::unique_ptr<CostModel> cost_;
  const std::vector<AgentSessionSpec> sessions_;
  router::WorkerTable table_;
  router::BlockIndex index_;
  std::unique_ptr<router::CedRoutingPolicy> policy_;
  std::vector<Turn> turns_;
  std::vector<PrefillInst> prefill_;
  std::vector<DecodeInst> decode_;
  std::deque<int> retry_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  double room_refused_at_ = -1;  // the router last refused a request for room (< 0: never)
  double prefill_slowdown_ = 1, decode_slowdown_ = 1;
  int open_sessions_ = 0;
  int64_t prefill_blocks_ = 0, decode_blocks_ = 0;
  int peak_running_ = 0;
  std::vector<int> first_token_, finished_;  // of a decode step (scratch)
};

absl::Status AgentSim::Init() {
  const bool replay_on_decode = o_.replay_on == router::ReplayOnChoice::kDecode;
  const WeightSet prefill_set = cost_->PrefillWeightSet(!replay_on_decode);
  const double per_block = cost_->kv_bytes_per_token() * o_.block_size;
  const double prefill_room =
      o_.kv_cache_bytes > 0 ? o_.kv_cache_bytes : cost_->KvRoomBytes(prefill_set, o_.prefill_gpus);
  const double decode_room = o_.kv_cache_bytes > 0
                                 ? o_.kv_cache_bytes
                                 : cost_->KvRoomBytes(WeightSet::kFull, o_.decode_gpus);
  if (prefill_room <= 0 || decode_room <= 0) {
    return absl::InvalidArgumentError("agent sim: the weights leave no KV room");
  }
  prefill_blocks_ = static_cast<int64_t>(prefill_room / per_block);
  decode_blocks_ = static_cast<int64_t>(decode_room / per_block);

  router::CedRoutingPolicy::Options policy;
  policy.decoder_only = cost_->decoder_only();
  policy.replay_on = o_.replay_on;
  policy.routing = o_.routing;
  policy.block_index = &index_;
  policy.clock = [this] { return ToTime(now_); };
  ASSIGN_OR_RETURN(policy_, router::CedRoutingPolicy::Create(&table_, policy));
  router::WeightsHeld held = router::WeightsHeld::kFull;
  if (prefill_set == WeightSet::kEncoderOnly) held = router::WeightsHeld::kEncoderOnly;
  if (prefill_set == WeightSet::kEncoderReplay) held = router::WeightsHeld::kEncoderReplay;
  for (int i = 0; i < o_.prefill_instances; ++i) {
    PrefillInst p;
    p.id = absl::StrFormat("p%03d", i);
    p.cache = std::make_unique<PrefixCacheModel>(prefill_blocks_, o_.block_size);
    p.cache->set_max_held(o_.held_sequences);
    router::WorkerInfo info;
    info.id = p.id;
    info.role = router::Role::kPrefill;
    info.weights = held;
    RETURN_IF_ERROR(table_.Register(info, ToTime(0)));
    // Like the router on registration: an empty view until the first report.
    index_.ResetWorker(p.id, kChainRoot, o_.prefix_cache ? o_.block_size : 0);
    p.log = std::make_unique<CacheLog>();
    p.log->Hook(p.cache.get());
    prefill_.push_back(std::move(p));
  }
  for (int i = 0; i < o_.decode_instances; ++i) {
    DecodeInst d;
    d.id = absl::StrFormat("d%03d", i);
    d.cache = std::make_unique<PrefixCacheModel>(decode_blocks_, o_.block_size);
    d.cache->set_max_held(o_.held_sequences);
    SimDecodeInstance::Options exec;
    exec.cost = cost_.get();
    exec.gpus = o_.decode_gpus;
    exec.max_batch = o_.max_batch;
    exec.max_step_tokens = o_.max_step_tokens;
    ASSIGN_OR_RETURN(d.exec, SimDecodeInstance::Create(exec));
    router::WorkerInfo info;
    info.id = d.id;
    info.role = router::Role::kDecode;
    info.weights = router::WeightsHeld::kFull;
    info.total_kv_blocks = decode_blocks_;
    info.block_size = o_.block_size;
    RETURN_IF_ERROR(table_.Register(info, ToTime(0)));
    index_.ResetWorker(d.id, kChainRoot, o_.prefix_cache ? o_.block_size : 0);
    d.log = std::make_unique<CacheLog>();
    d.log->Hook(d.cache.get());
    decode_.push_back(std::move(d));
  }
  if (o_.colocated) {
    for (int i = 0; i < std::min(o_.prefill_instances, o_.decode_instances); ++i) {
      prefill_[static_cast<size_t>(i)].neighbour = i;
      decode_[static_cast<size_t>(i)].neighbour = i;
    }
  }
  prefill_slowdown_ = std::max(1.0, cost_->gpu().prefill_colocated_slowdown);
  decode_slowdown_ = std::max(1.0, cost_->gpu().decode_colocated_slowdown);
  turns_.resize(sessions_.size() * static_cast<size_t>(o_.trace.turns));
  for (size_t s = 0; s < sessions_.size(); ++s) {
    for (int k = 0; k < o_.trace.turns; ++k) {
      Turn& t = turns_[static_cast<size_t>(Id(static_cast<int>(s), k))];
      t.r.session = static_cast<int>(s);
      t.r.turn = k;
      t.r.prompt_tokens = AgentTurnPromptTokens(sessions_[s], k);
      t.r.output_tokens = sessions_[s].output_tokens[static_cast<size_t>(k)];
      if (k > 0) {
        t.r.reusable_tokens = AgentTurnPromptTokens(sessions_[s], k - 1) +
                              sessions_[s].output_tokens[static_cast<size_t>(k - 1)];
      }
    }
    Push(sessions_[s].start_s + cost_->gpu().request_s, Ev::kArrival, Id(static_cast<int>(s), 0));
  }
  open_sessions_ = static_cast<int>(sessions_.size());
  Push(0, Ev::kHeartbeat, 0);
  return absl::OkStatus();
}

void AgentSim::OnArrival(int t) {
  Turn& q = turns_[static_cast<size_t>(t)];
  const int64_t need = (q.r.prompt_tokens + q.r.output_tokens + o_.block_size - 1) / o_.block_size;
  if (need > decode_blocks_ || q.r.prompt_tokens / o_.block_size + 1 > prefill_blocks_) {
    FailSession(t);  // can never fit
  } else if (!retry_.empty() || !Route(t)) {
    retry_.push_back(t);
  }
}

bool AgentSim::Route(int t) {
  Turn& q = turns_[static_cast<size_t>(t)];
  router::RouteRequest route;
  route.prompt_tokens = q.r.prompt_tokens;
  route.max_tokens = q.r.output_tokens;
  // What the gateway sends: the session and the prompt's full blocks' chain.
  route.session_id = absl::StrCat("s", q.r.session);
  route.hash_root = kChainRoot;
  route.hash_block_size = o_.block_size;
  const int64_t full_blocks = q.r.prompt_tokens / o_.block_size;
  route.block_hashes.reserve(static_cast<size_t>(full_blocks));
  for (int64_t j = 0; j < full_blocks; ++j) route.block_hashes.push_back(ChainKey(q.r.session, j));
  int64_t total = 0, shared = 0;
  auto reserve = [&](const router::Decision& decision) {
    q.decode = IndexOf(decision.decode_id);
    q.prefill = decision.local_prefill ? -1 : IndexOf(decision.prefill_id);
    DecodeInst& d = decode_[static_cast<size_t>(q.decode)];
    total = (q.r.prompt_tokens + q.r.output_tokens + o_.block_size - 1) / o_.block_size;
    shared =
        o_.prefix_cache ? d.cache->CachedTokens(q.r.session, q.r.prompt_tokens) / o_.block_size : 0;
    // The router's view is a heartbeat old: the worker checks its own blocks
    // and its scheduler's queue bounds.
    if (!d.cache->Reserve(total - shared)) {
      d.early.Refused();
      return false;
    }
    q.r.local_prefill = decision.local_prefill;
    bool reserved;
    if (q.r.local_prefill) {
      // The worker looks its prefix cache up when it reserves; the prefill
      // resumes from there and charges the recomputed positions to the step.
      // A held sequence of the session (its last turn, decoded here) is
      // continued instead (prefix_cache_model.h).
      const PrefixCacheModel::Resume from = o_.prefix_cache
                                                ? d.cache->ResumeFor(q.r.session, q.r.prompt_tokens)
                                                : PrefixCacheModel::Resume{};
      const int64_t work =
          q.r.prompt_tokens -
          ResumeEncoderStart(cost_->config(), q.r.prompt_tokens, from.tokens, from.continued);
      reserved = d.exec->Reserve(t, q.r.prompt_tokens, q.r.output_tokens, /*generated=*/0, now_,
                                 ResumedPrefillSeconds(*cost_, q.r.prompt_tokens, from.tokens, true,
                                                       o_.decode_gpus, from.continued),
                                 work);
      if (reserved) {
        d.cache->Touch(q.r.session);
        if (from.continued) d.cache->TakeHeld(q.r.session);
        q.r.cached_tokens = from.tokens;
      }
    } else {
      q.replay_on_decode =
          !cost_->decoder_only() && decision.replay_on == router::ReplayOn::kDecode;
      // The prefill instance makes the first token unless the replay runs on decode.
      reserved = d.exec->Reserve(t, q.r.prompt_tokens, q.r.output_tokens,
                                 q.replay_on_decode ? 0 : 1, now_);
      // The worker takes its held sequence of the session over here too: the
      // prefill instance then sends only what follows it.
      if (reserved && o_.prefix_cache) {
        q.decode_held = d.cache->HeldTokens(q.r.session, q.r.prompt_tokens);
        if (q.decode_held > 0) d.cache->TakeHeld(q.r.session);
      }
    }
    if (!reserved) d.cache->Release(total - shared);
    return reserved;
  };
  bool router_refused = false;
  const Placement placed = PlaceLikeTheGateway(policy_.get(), std::move(route), o_.refuse_when_full,
                                               o_.reserve_retries, reserve, &router_refused);
  if (router_refused) room_refused_at_ = now_;
  switch (placed) {
    case Placement::kWait:
      return false;
    case Placement::kRefused:
      RefuseSession(t);
      return true;
    case Placement::kFailed:
      FailSession(t);
      return true;
    case Placement::kPlaced:
      break;
  }
  DecodeInst& d = decode_[static_cast<size_t>(q.decode)];
  q.blocks = total - shared;
  ++d.reserved;
  if (q.r.local_prefill) {
    StartDecode(q.decode);
    return true;
  }
  PrefillInst& p = prefill_[static_cast<size_t>(q.prefill)];
  p.queue.push_back(t);
  p.queued_tokens += q.r.prompt_tokens;
  if (p.current < 0) StartPrefill(q.prefill);
  return true;
}

void AgentSim::RefuseSession(int t) {
  turns_[static_cast<size_t>(t)].r.refused = true;
  FailSession(t);
}

void AgentSim::FailSession(int t) {
  const Turn& q = turns_[static_cast<size_t>(t)];
  for (int k = q.r.turn; k < o_.trace.turns; ++k) {
    turns_[static_cast<size_t>(Id(q.r.session, k))].r.completed = false;
  }
  --open_sessions_;
}

void AgentSim::StartPrefill(int p) {
  PrefillInst& inst = prefill_[static_cast<size_t>(p)];
  if (inst.current >= 0 || inst.queue.empty()) return;
  const int t = inst.queue.front();
  inst.queue.pop_front();
  inst.current = t;
  Turn& q = turns_[static_cast<size_t>(t)];
  inst.queued_tokens -= q.r.prompt_tokens;
  const PrefixCacheModel::Resume from = o_.prefix_cache
                                            ? inst.cache->ResumeFor(q.r.session, q.r.prompt_tokens)
                                            : PrefixCacheModel::Resume{};
  inst.cache->Touch(q.r.session);
  if (from.continued) inst.cache->TakeHeld(q.r.session);
  q.r.cached_tokens = from.tokens;
  const double s = ResumedPrefillSeconds(*cost_, q.r.prompt_tokens, from.tokens,
                                         !q.replay_on_decode, o_.prefill_gpus, from.continued);
  const double end = inst.step.Begin(now_, s, PrefillSpeed(inst));
  Push(end, Ev::kPrefillDone, p, inst.step.gen);
  if (inst.neighbour >= 0) RespeedDecode(inst.neighbour);
}

void AgentSim::RespeedPrefill(int p) {
  PrefillInst& inst = prefill_[static_cast<size_t>(p)];
  if (inst.current >= 0 && inst.step.Respeed(now_, PrefillSpeed(inst))) {
    Push(inst.step.End(now_), Ev::kPrefillDone, p, ++inst.step.gen);
  }
}

void AgentSim::RespeedDecode(int d) {
  DecodeInst& inst = decode_[static_cast<size_t>(d)];
  if (inst.busy && inst.step.Respeed(now_, DecodeSpeed(inst))) {
    Push(inst.step.End(now_), Ev::kDecodeDone, d, ++inst.step.gen);
  }
}

void AgentSim::OnPrefillDone(int p) {
  PrefillInst& inst = prefill_[static_cast<size_t>(p)];
  const int t = inst.current;
  inst.current = -1;
  Turn& q = turns_[static_cast<size_t>(t)];
  if (o_.prefix_cache) {
    inst.cache->Store(q.r.session, q.r.prompt_tokens);
    inst.cache->Hold(q.r.session, q.r.prompt_tokens);
  }
  if (!q.replay_on_decode) q.r.first_token_s = now_;  // the prefill instance made it
  DecodeInst& d = decode_[static_cast<size_t>(q.decode)];
  const int64_t have =
      o_.prefix_cache
          ? std::max(q.decode_held, d.cache->CachedTokens(q.r.session, q.r.prompt_tokens))
          : 0;
  q.r.transferred_tokens = q.r.prompt_tokens - have;
  const double bytes = cost_->TransferBytes(q.r.prompt_tokens, q.replay_on_decode) -
                       static_cast<double>(have) * cost_->kv_bytes_per_token();
  const double start = std::max(now_, inst.link_free_s);
  inst.link_free_s = start + bytes / o_.link_bytes_per_s;
  Push(inst.link_free_s, Ev::kTransferDone, t);
  StartPrefill(p);
  if (inst.current < 0 && inst.neighbour >= 0) RespeedDecode(inst.neighbour);
}

void AgentSim::OnTransferDone(int t) {
  const Turn& q = turns_[static_cast<size_t>(t)];
  decode_[static_cast<size_t>(q.decode)].exec->OnKvLanded(t, q.replay_on_decode, now_);
  StartDecode(q.decode);
}

void AgentSim::StartDecode(int d) {
  if (decode_[static_cast<size_t>(d)].busy) return;
  BeginDecodeStep(d, /*was_busy=*/false);
}

void AgentSim::BeginDecodeStep(int d, bool was_busy) {
  DecodeInst& inst = decode_[static_cast<size_t>(d)];
  const double seconds = inst.exec->BeginStep(now_);
  peak_running_ = std::max(peak_running_, inst.exec->running());
  inst.busy = seconds >= 0;
  if (inst.busy) {
    const double end = inst.step.Begin(now_, seconds, DecodeSpeed(inst));
    Push(end, Ev::kDecodeDone, d, inst.step.gen);
  }
  if (inst.busy != was_busy && inst.neighbour >= 0) RespeedPrefill(inst.neighbour);
}

void AgentSim::OnDecodeDone(int d) {
  DecodeInst& inst = decode_[static_cast<size_t>(d)];
  inst.exec->EndStep(&first_token_, &finished_);
  peak_running_ = std::max(peak_running_, inst.exec->running());
  for (int t : first_token_) turns_[static_cast<size_t>(t)].r.first_token_s = now_;
  for (int t : finished_) Finish(t);
  BeginDecodeStep(d, /*was_busy=*/true);
}

void AgentSim::Finish(int t) {
  Turn& q = turns_[static_cast<size_t>(t)];
  q.r.finish_s = now_;
  q.r.completed = true;
  DecodeInst& d = decode_[static_cast<size_t>(q.decode)];
  d.cache->Release(q.blocks);
  --d.reserved;
  if (const double at = d.early.AfterRelease(now_); at >= 0 && open_sessions_ > 0) {
    Push(at, Ev::kEarlyReport, q.decode);
  }
  // Prompt + answer; the last answer token's K/V is never computed.
  if (o_.prefix_cache) {
    d.cache->Store(q.r.session, q.r.prompt_tokens + q.r.output_tokens - 1);
    d.cache->Hold(q.r.session, q.r.prompt_tokens + q.r.output_tokens - 1);
  }
  const AgentSessionSpec& s = sessions_[static_cast<size_t>(q.r.session)];
  if (q.r.turn + 1 < o_.trace.turns) {
    const int next = Id(q.r.session, q.r.turn + 1);
    turns_[static_cast<size_t>(next)].r.arrival_s = now_ + s.think_time_s;
    Push(now_ + s.think_time_s + cost_->gpu().request_s, Ev::kArrival, next);
  } else {
    --open_sessions_;
  }
}

void AgentSim::Heartbeat() {
  const absl::Time at = ToTime(now_);
  for (const PrefillInst& p : prefill_) {
    router::WorkerLoad load;
    load.queued_prefill_tokens = p.queued_tokens;
    load.inflight_prefill_tokens =
        p.current >= 0 ? turns_[static_cast<size_t>(p.current)].r.prompt_tokens : 0;
    load.last_heartbeat = at;
    (void)table_.Update(p.id, load);  // registered in Init: cannot be NOT_FOUND
    Report(p.id, *p.log);
  }
  for (DecodeInst& d : decode_) ReportDecode(d, at);
  while (!retry_.empty() && Route(retry_.front())) retry_.pop_front();
  if (open_sessions_ > 0) Push(now_ + o_.heartbeat_s, Ev::kHeartbeat, 0);
}

void AgentSim::ReportDecode(DecodeInst& d, absl::Time at) {
  router::WorkerLoad load;
  load.running_sequences = d.exec->running();
  load.waiting_sequences = d.reserved - load.running_sequences;
  load.free_kv_blocks = d.cache->capacity_blocks() - d.cache->reserved_blocks();
  load.last_heartbeat = at;
  d.early.OnReport(load.free_kv_blocks, d.cache->capacity_blocks(), now_, room_refused_at_);
  (void)table_.Update(d.id, load);
  Report(d.id, *d.log);
}

void AgentSim::EarlyReport(int d) {
  ReportDecode(decode_[static_cast<size_t>(d)], ToTime(now_));
  while (!retry_.empty() && Route(retry_.front())) retry_.pop_front();
}

void AgentSim::Report(const std::string& id, CacheLog& log) {
  absl::StatusOr<uint64_t> seq = index_.Apply(id, log.Report());
  // Always current here (no report is lost); 0 would ask for a full one.
  if (seq.ok() && *seq == log.next_seq) {
    log.acked = *seq;
    log.events.clear();
  }
}

AgentSimSummary AgentSim::Run() {
  // Turn 0 arrives at the session's start (request_s added like later turns).
  for (size_t s = 0; s < sessions_.size(); ++s) {
    turns_[static_cast<size_t>(Id(static_cast<int>(s), 0))].r.arrival_s = sessions_[s].start_s;
  }
  while (!events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    switch (e.kind) {
      case Ev::kArrival:
        OnArrival(e.index);
        break;
      case Ev::kPrefillDone:
        // A step rescheduled by a change of speed ends at its newest event.
        if (e.gen == prefill_[static_cast<size_t>(e.index)].step.gen) OnPrefillDone(e.index);
        break;
      case Ev::kTransferDone:
        OnTransferDone(e.index);
        break;
      case Ev::kDecodeDone:
        if (e.gen == decode_[static_cast<size_t>(e.index)].step.gen) OnDecodeDone(e.index);
        break;
      case Ev::kHeartbeat:
        Heartbeat();
        break;
      case Ev::kEarlyReport:
        EarlyReport(e.index);
        break;
    }
  }
  AgentSimSummary s;
  s.kv_bytes_per_token = cost_->kv_bytes_per_token();
  s.peak_running = peak_running_;
  for (const DecodeInst& d : decode_) s.decode_steps += d.exec->decode_steps();
  std::vector<std::vector<double>> ttft(static_cast<size_t>(o_.trace.turns));
  std::vector<double> later;
  std::vector<int64_t> cached(ttft.size(), 0), reusable(ttft.size(), 0);
  s.by_turn.resize(ttft.size());
  for (const Turn& q : turns_) {
    s.turns.push_back(q.r);
    if (!q.r.completed) {
      ++s.failed;
      if (q.r.refused) ++s.refused;
      continue;
    }
    const size_t k = static_cast<size_t>(q.r.turn);
    ttft[k].push_back(q.r.ttft_s());
    if (k > 0) later.push_back(q.r.ttft_s());
    AgentTurnSummary& ts = s.by_turn[k];
    ++ts.completed;
    ts.prompt_tokens_mean += static_cast<double>(q.r.prompt_tokens);
    ts.cached_tokens_mean += static_cast<double>(q.r.cached_tokens);
    cached[k] += q.r.cached_tokens;
    reusable[k] += q.r.reusable_tokens;
    s.makespan_s = std::max(s.makespan_s, q.r.finish_s);
  }
  int64_t cached_later = 0, reusable_later = 0;
  for (size_t k = 0; k < ttft.size(); ++k) {
    AgentTurnSummary& ts = s.by_turn[k];
    ts.turn = static_cast<int>(k) + 1;
    // As the load generator computes them (linear interpolation).
    ts.ttft_p50_s = bench::Percentile(ttft[k], 50);
    ts.ttft_p90_s = bench::Percentile(ttft[k], 90);
    if (ts.completed > 0) {
      ts.prompt_tokens_mean /= ts.completed;
      ts.cached_tokens_mean /= ts.completed;
    }
    ts.hit_rate = reusable[k] > 0 ? static_cast<double>(cached[k]) / reusable[k] : 0;
    if (k > 0) {
      cached_later += cached[k];
      reusable_later += reusable[k];
    }
  }
  s.ttft_later_p50_s = bench::Percentile(later, 50);
  s.ttft_later_p90_s = bench::Percentile(later, 90);
  s.hit_rate_later = reusable_later > 0 ? static_cast<double>(cached_later) / reusable_later : 0;
  for (const PrefillInst& p : prefill_) s.evicted_blocks += p.cache->evicted_blocks();
  for (const DecodeInst& d : decode_) s.evicted_blocks += d.cache->evicted_blocks();
  return s;
}

}  // namespace

std::string AgentSimSummary::ToString() const {
  return absl::StrFormat(
      "turns=%d failed=%d refused=%d ttft_later=%.17g/%.17g hit=%.17g makespan=%.17g "
      "evicted=%d steps=%d peak_running=%d",
      turns.size(), failed, refused, ttft_later_p50_s, ttft_later_p90_s, hit_rate_later, makespan_s,
      evicted_blocks, decode_steps, peak_running);
}

absl::StatusOr<AgentSimSummary> RunAgentSimulation(const AgentSimOptions& o) {
  if (o.prefill_instances < 1 || o.decode_instances < 1 || o.prefill_gpus < 1 ||
      o.decode_gpus < 1) {
    return absl::InvalidArgumentError(
        "agent sim: instance counts and GPUs per instance must be >= 1");
  }
  if (o.block_size < 1 || o.max_batch < 1 || o.max_step_tokens < 1 || !(o.heartbeat_s > 0) ||
      !(o.link_bytes_per_s > 0) || !(o.kv_cache_bytes >= 0)) {
    return absl::InvalidArgumentError(
        "agent sim: block_size, max_batch, max_step_tokens, heartbeat and link bandwidth must be "
        "> 0");
  }
  if (o.reserve_retries < 0) {
    return absl::InvalidArgumentError("agent sim: reserve_retries must be >= 0");
  }
  if (o.held_sequences < 0) {
    return absl::InvalidArgumentError("agent sim: held_sequences must be >= 0");
  }
  ASSIGN_OR_RETURN(std::vector<AgentSessionSpec> sessions, MakeAgentTrace(o.trace));
  for (const AgentSessionSpec& s : sessions) {
    const int64_t longest = AgentTurnPromptTokens(s, o.trace.turns - 1) + s.output_tokens.back();
    if (longest > o.model.max_position) {
      return absl::InvalidArgumentError(absl::StrCat("agent sim: a session reaches ", longest,
                                                     " tokens, over max_position ",
                                                     o.model.max_position));
    }
  }
  CostModel::Options cost;
  cost.config = o.model;
  cost.gpu = o.gpu;
  cost.link_bytes_per_s = o.link_bytes_per_s;
  ASSIGN_OR_RETURN(std::unique_ptr<CostModel> model, CostModel::Create(cost));
  AgentSim sim(o, std::move(model), std::move(sessions));
  RETURN_IF_ERROR(sim.Init());
  return sim.Run();
}

std::string AgentSimTable(const AgentSimSummary& s) {
  std::string out = absl::StrFormat(
      "TTFT turns >= 2: p50 %.1f ms, p90 %.1f ms; hit rate (cached / previous prompt + answer) "
      "%.1f%%; %d failed turns (%d refused); makespan %.1f s; %d blocks evicted\n\n"
      "| turn | completed | TTFT ms p50 / p90 | prompt tokens | cached | hit rate |\n"
      "|---:|---:|---:|---:|---:|---:|\n",
      1e3 * s.ttft_later_p50_s, 1e3 * s.ttft_later_p90_s, 100 * s.hit_rate_later, s.failed,
      s.refused, s.makespan_s, s.evicted_blocks);
  for (const AgentTurnSummary& t : s.by_turn) {
    absl::StrAppend(
        &out, absl::StrFormat("| %d | %d | %.1f / %.1f | %.0f | %.0f | %s |\n", t.turn, t.completed,
                              1e3 * t.ttft_p50_s, 1e3 * t.ttft_p90_s, t.prompt_tokens_mean,
                              t.cached_tokens_mean,
                              t.turn == 1 ? "–" : absl::StrFormat("%.1f%%", 100 * t.hit_rate)));
  }
  return out;
}

std::string AgentSimJson(const AgentSimSummary& s) {
  nlohmann::json turns = nlohmann::json::array();
  for (const AgentTurnSummary& t : s.by_turn) {
    turns.push_back({{"turn", t.turn},
                     {"ok", t.completed},
                     {"ttft_ms", {{"p50", 1e3 * t.ttft_p50_s}, {"p90", 1e3 * t.ttft_p90_s}}},
                     {"prompt_tokens_mean", t.prompt_tokens_mean},
                     {"cached_tokens_mean", t.cached_tokens_mean},
                     {"hit_rate", t.hit_rate}});
  }
  nlohmann::json requests = nlohmann::json::array();
  for (const AgentTurnResult& r : s.turns) {
    requests.push_back({{"session", r.session},
                        {"turn", r.turn + 1},
                        {"completed", r.completed},
                        {"refused", r.refused},
                        {"arrival_s", r.arrival_s},
                        {"ttft_ms", r.completed ? 1e3 * r.ttft_s() : -1.0},
                        {"prompt_tokens", r.prompt_tokens},
                        {"cached_tokens", r.cached_tokens},
                        {"local_prefill", r.local_prefill}});
  }
  const nlohmann::json doc = {
      {"ttft_later_turns_ms",
       {{"p50", 1e3 * s.ttft_later_p50_s}, {"p90", 1e3 * s.ttft_later_p90_s}}},
      {"hit_rate_later_turns", s.hit_rate_later},
      {"failed", s.failed},
      {"refused", s.refused},
      {"makespan_s", s.makespan_s},
      {"turns", std::move(turns)},
      {"requests", std::move(requests)}};
  return doc.dump(1) + "\n";
}

}  // namespace ced::sim
