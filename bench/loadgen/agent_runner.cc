#include "bench/loadgen/agent_runner.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen/agent_workload.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"

namespace ced::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// How long the issuing loop sleeps at most before polling the interrupt flag.
constexpr absl::Duration kPollSlice = absl::Milliseconds(50);

const google::protobuf::FieldDescriptor* SessionIdField() {
  const google::protobuf::FieldDescriptor* f =
      ced::v1::GenerateRequest::descriptor()->FindFieldByName("session_id");
  if (f == nullptr || f->is_repeated() ||
      f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
    return nullptr;
  }
  return f;
}

// Ids unique across load generators running at once against one gateway.
const std::string& RunTag() {
  static const std::string tag =
      absl::StrCat(getpid(), "-", absl::ToUnixMicros(absl::Now()) % 1000000);
  return tag;
}

uint64_t TurnSeed(uint64_t seed, int session, int turn) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(session) * 4096 + turn + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

bool GatewayHasSessionId() { return SessionIdField() != nullptr; }

bool SetSessionId(ced::v1::GenerateRequest* request, const std::string& session_id) {
  const google::protobuf::FieldDescriptor* f = SessionIdField();
  if (f == nullptr) return false;
  request->GetReflection()->SetString(request, f, session_id);
  return true;
}

struct AgentRunner::State {
  struct Session {
    std::vector<int32_t> prompt;  // the next turn's prompt
    int next_turn = 0;
    double next_start_s = 0;
    bool in_flight = false, done = false;
    int64_t reusable = 0;      // previous turn's prompt + answer
    int64_t final_tokens = 0;  // last OK turn's prompt + answer
  };
  mutable absl::Mutex mu;
  Clock::time_point start;  // written once by Run() before any call starts
  bool started ABSL_GUARDED_BY(mu) = false;
  absl::CondVar changed;  // a call ended
  std::vector<Session> sessions ABSL_GUARDED_BY(mu);
  std::vector<AgentTurnRecord> records ABSL_GUARDED_BY(mu);
  // The calls not yet finished, by address: Finished() gets the key of a
  // call already freed, a number, never a pointer to use.
  std::set<uintptr_t> live ABSL_GUARDED_BY(mu);
  // The live calls not yet freed: the only ones Cancel() may be called on.
  std::set<Call*> cancellable ABSL_GUARDED_BY(mu);
  int64_t issued ABSL_GUARDED_BY(mu) = 0;
  int64_t failed ABSL_GUARDED_BY(mu) = 0;
  std::set<std::string> error_outcomes ABSL_GUARDED_BY(mu);  // said on stderr
  bool issuing_done ABSL_GUARDED_BY(mu) = false;
  absl::Status flush_error ABSL_GUARDED_BY(mu);  // the first failed flush
  std::atomic<int64_t> output_tokens{0};
};

// One turn's streaming Generate call; deletes itself in OnDone after handing
// its record and answer to the runner.
class AgentRunner::Call final : public grpc::ClientReadReactor<ced::v1::GenerateResponse> {
 public:
  Call(AgentRunner* owner, ced::v1::GenerateRequest request, AgentTurnRecord record)
      : owner_(owner),
        channel_(owner->channel_),
        request_(std::move(request)),
        record_(std::move(record)) {}

  void Start() {
    context_.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(owner_->options_.request_timeout_s * 1e6)));
    owner_->stub_->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    record_.request.sent_s = owner_->Now();
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream: OnDone follows
    RequestRecord& r = record_.request;
    const int n = response_.token_ids_size();
    if (n > 0) {
      if (r.first_token_s < 0) r.first_token_s = owner_->Now();
      r.output_tokens += n;
      answer_.insert(answer_.end(), response_.token_ids().begin(), response_.token_ids().end());
      owner_->state_->output_tokens.fetch_add(n, std::memory_order_relaxed);
    }
    if (response_.has_usage()) record_.cached_prompt_tokens = response_.usage().cached_prompt_tokens();
    if (response_.has_timings()) {
      const ced::v1::Timings& t = response_.timings();
      r.server_queue_ms = t.queue_ms();
      r.server_prefill_ms = t.prefill_ms();
      r.server_transfer_ms = t.transfer_ms();
      r.server_ttft_ms = t.ttft_ms();
    }
    if (response_.has_placement()) {
      r.replay_on_decode = response_.placement().replay_on() == ced::v1::REPLAY_ON_DECODE;
    }
    if (response_.finish_reason() == ced::v1::FINISH_REASON_ERROR) finish_ = "FINISH_ERROR";
    if (response_.finish_reason() == ced::v1::FINISH_REASON_CANCELLED) finish_ = "FINISH_CANCELLED";
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.request.end_s = owner_->Now();
    record_.request.outcome = status.ok() ? finish_ : OutcomeName(status.error_code());
    if (!status.ok()) record_.request.error_message = status.error_message();
    // The runner may be destroyed as soon as Finished() reports the last
    // call (like LoadRunner's calls): free this call (its context) first,
    // and touch nothing of it after.
    AgentRunner* owner = owner_;
    const uintptr_t key = reinterpret_cast<uintptr_t>(this);
    AgentTurnRecord record = std::move(record_);
    std::vector<int32_t> answer = std::move(answer_);
    {
      absl::MutexLock lock(&owner->state_->mu);
      owner->state_->cancellable.erase(this);
    }
    delete this;
    owner->Finished(key, std::move(record), std::move(answer));
  }

 private:
  AgentRunner* const owner_;
  // Declared before the context: the channel outlives the call's context
  // even when the runner (and its reference) is gone.
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  const ced::v1::GenerateRequest request_;
  ced::v1::GenerateResponse response_;
  AgentTurnRecord record_;
  std::vector<int32_t> answer_;
  std::string finish_ = "OK";
};

absl::StatusOr<std::unique_ptr<AgentRunner>> AgentRunner::Create(
    const AgentRunOptions& options, std::vector<sim::AgentSessionSpec> trace) {
  if (options.target.empty()) return absl::InvalidArgumentError("loadgen: target is empty");
  if (!(options.request_timeout_s > 0)) {
    return absl::InvalidArgumentError("loadgen: request_timeout_s must be > 0");
  }
  if (trace.empty()) return absl::InvalidArgumentError("loadgen: the agent trace has no session");
  for (const sim::AgentSessionSpec& s : trace) {
    if (s.output_tokens.empty() || s.tool_result_tokens.size() + 1 != s.output_tokens.size() ||
        s.first_prompt_tokens < 1) {
      return absl::InvalidArgumentError("loadgen: malformed agent session spec");
    }
  }
  return std::unique_ptr<AgentRunner>(new AgentRunner(options, std::move(trace)));
}

AgentRunner::AgentRunner(AgentRunOptions options, std::vector<sim::AgentSessionSpec> trace)
    : options_(std::move(options)), trace_(std::move(trace)), state_(std::make_unique<State>()) {
  channel_ = grpc::CreateChannel(options_.target, grpc::InsecureChannelCredentials());
  stub_ = ced::v1::Gateway::NewStub(channel_);
  absl::MutexLock lock(&state_->mu);
  state_->sessions.resize(trace_.size());
  for (size_t s = 0; s < trace_.size(); ++s) {
    State::Session& session = state_->sessions[s];
    session.prompt = AgentTurnTokens(options_.seed, static_cast<int>(s), 0, trace_[s]);
    session.next_start_s = trace_[s].start_s;
  }
}

AgentRunner::~AgentRunner() {
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](std::set<uintptr_t>* live) { return live->empty(); }, &state_->live));
}

double AgentRunner::Now() const {
  return std::chrono::duration<double>(Clock::now() - state_->start).count();
}

bool AgentRunner::Interrupted() const {
  return options_.interrupt != nullptr && options_.interrupt->load(std::memory_order_relaxed);
}

absl::Status AgentRunner::FlushWorkers() {
  for (const std::string& address : options_.flush_workers) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    ced::internal::FlushCacheRequest req;
    req.set_reason("ced-loadgen --flush-workers");
    req.set_wait_for_tiers(true);
    ced::internal::FlushCacheResponse resp;
    grpc::Status status;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      status = ced::internal::DecodeWorker::NewStub(channel)->FlushCache(&ctx, req, &resp);
    }
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {  // not a decode worker
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      status = ced::internal::PrefillWorker::NewStub(channel)->FlushCache(&ctx, req, &resp);
    }
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrCat("loadgen: FlushCache on worker ", address, ": ",
                                                 status.error_message()));
    }
  }
  return absl::OkStatus();
}

void AgentRunner::Launch(int s) {
  ced::v1::GenerateRequest req;
  AgentTurnRecord record;
  double flush_s = 0;
  {
    int turn;
    {
      absl::MutexLock lock(&state_->mu);
      turn = state_->sessions[static_cast<size_t>(s)].next_turn;
    }
    if (turn > 0 && !options_.flush_workers.empty()) {
      const auto t0 = Clock::now();
      if (absl::Status st = FlushWorkers(); !st.ok()) {
        absl::MutexLock lock(&state_->mu);
        if (state_->flush_error.ok()) state_->flush_error = st;
      }
      flush_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  {
    absl::MutexLock lock(&state_->mu);
    State::Session& session = state_->sessions[static_cast<size_t>(s)];
    session.in_flight = true;
    const int turn = session.next_turn;
    const sim::AgentSessionSpec& spec = trace_[static_cast<size_t>(s)];
    req.mutable_prompt_token_ids()->Add(session.prompt.begin(), session.prompt.end());
    req.set_max_tokens(static_cast<int32_t>(spec.output_tokens[static_cast<size_t>(turn)]));
    req.set_ignore_eos(true);
    req.set_temperature(options_.temperature);
    req.set_seed(TurnSeed(options_.seed, s, turn));
    req.set_replay_on(options_.replay_on);
    req.set_replay_mode(options_.replay_mode);
    req.set_request_id(absl::StrCat("agent-", RunTag(), "-s", s, "-t", turn));
    if (options_.send_session_id) SetSessionId(&req, absl::StrCat("agent-", RunTag(), "-s", s));
    record.session = s;
    record.turn = turn;
    record.reusable_tokens = session.reusable;
    record.flush_s = flush_s;
    record.request.index = state_->issued;
    record.request.prompt_tokens = static_cast<int64_t>(session.prompt.size());
    record.request.max_tokens = req.max_tokens();
    record.request.planned_s = session.next_start_s;
    ++state_->issued;
  }
  Call* call = new Call(this, std::move(req), std::move(record));
  {
    absl::MutexLock lock(&state_->mu);
    state_->live.insert(reinterpret_cast<uintptr_t>(call));
    state_->cancellable.insert(call);
  }
  call->Start();
}

void AgentRunner::Finished(uintptr_t call, AgentTurnRecord record, std::vector<int32_t> answer) {
  absl::MutexLock lock(&state_->mu);
  State::Session& session = state_->sessions[static_cast<size_t>(record.session)];
  const sim::AgentSessionSpec& spec = trace_[static_cast<size_t>(record.session)];
  session.in_flight = false;
  const bool ok = record.request.ok();
  if (!ok) ++state_->failed;
  NoteFirstError(record.request, &state_->error_outcomes);
  if (ok) {
    session.reusable = static_cast<int64_t>(session.prompt.size() + answer.size());
    session.final_tokens = session.reusable;
    const int next = record.turn + 1;
    if (next < static_cast<int>(spec.output_tokens.size())) {
      session.prompt = AppendTurn(session.prompt, answer,
                                  AgentTurnTokens(options_.seed, record.session, next, spec));
      session.next_turn = next;
      session.next_start_s = record.request.end_s + spec.think_time_s;
    } else {
      session.done = true;
    }
  } else {
    session.done = true;  // the next prompt would need this turn's answer
  }
  state_->records.push_back(std::move(record));
  state_->live.erase(call);
  state_->changed.SignalAll();
}

absl::StatusOr<AgentRunResult> AgentRunner::Run() {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->started) return absl::FailedPreconditionError("loadgen: Run() called twice");
    state_->start = Clock::now();
    state_->started = true;
  }
  while (!Interrupted()) {
    int pick = -1;
    {
      absl::MutexLock lock(&state_->mu);
      double earliest = std::numeric_limits<double>::infinity();
      for (size_t s = 0; s < state_->sessions.size(); ++s) {
        const State::Session& session = state_->sessions[s];
        if (session.done || session.in_flight) continue;
        if (session.next_start_s < earliest) {
          earliest = session.next_start_s;
          pick = static_cast<int>(s);
        }
      }
      if (pick < 0) {
        if (state_->live.empty()) break;  // every session ended
        state_->changed.WaitWithTimeout(&state_->mu, kPollSlice);
        continue;
      }
      const double wait = earliest - Now();
      if (wait > 0) {
        state_->changed.WaitWithTimeout(&state_->mu, std::min(absl::Seconds(wait), kPollSlice));
        continue;  // a call may have ended meanwhile: choose again
      }
    }
    Launch(pick);
  }
  absl::MutexLock lock(&state_->mu);
  state_->issuing_done = true;
  bool cancelled = false;
  while (!state_->live.empty()) {
    if (Interrupted() && !cancelled) {
      cancelled = true;
      for (Call* call : state_->cancellable) call->Cancel();
    }
    state_->changed.WaitWithTimeout(&state_->mu, kPollSlice);
  }
  // The run did not measure what it was asked to (turns after an unflushed cache).
  if (!state_->flush_error.ok()) return state_->flush_error;
  AgentRunResult result;
  result.turns = std::move(state_->records);
  std::sort(result.turns.begin(), result.turns.end(),
            [](const AgentTurnRecord& a, const AgentTurnRecord& b) {
              return a.session != b.session ? a.session < b.session : a.turn < b.turn;
            });
  for (const AgentTurnRecord& t : result.turns) {
    result.duration_s = std::max(result.duration_s, t.request.end_s);
  }
  for (const sim::AgentSessionSpec& s : trace_) {
    result.planned_turns += static_cast<int64_t>(s.output_tokens.size());
  }
  for (const State::Session& s : state_->sessions) result.session_final_tokens.push_back(s.final_tokens);
  result.session_id_sent = options_.send_session_id && GatewayHasSessionId();
  return result;
}

Progress AgentRunner::Snapshot() const {
  Progress p;
  absl::MutexLock lock(&state_->mu);
  p.issued = state_->issued;
  p.in_flight = static_cast<int64_t>(state_->live.size());
  p.done = p.issued - p.in_flight;
  p.failed = state_->failed;
  p.issuing_done = state_->issuing_done;
  p.output_tokens = state_->output_tokens.load(std::memory_order_relaxed);
  p.elapsed_s = state_->started ? Now() : 0;
  return p;
}

}  // namespace ced::loadgen
