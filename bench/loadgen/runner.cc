#include "bench/loadgen/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ced::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string OutcomeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

namespace {

// How long the issuing loop sleeps at most before polling the interrupt flag.
constexpr absl::Duration kPollSlice = absl::Milliseconds(50);

}  // namespace

struct LoadRunner::State {
  mutable absl::Mutex mu;
  // Written once by Run() under `mu`, before any call starts.
  Clock::time_point start;
  bool started ABSL_GUARDED_BY(mu) = false;
  absl::CondVar changed;  // a call ended
  std::vector<RequestRecord> records ABSL_GUARDED_BY(mu);
  std::set<Call*> live ABSL_GUARDED_BY(mu);
  int64_t issued ABSL_GUARDED_BY(mu) = 0;
  int64_t failed ABSL_GUARDED_BY(mu) = 0;
  std::set<std::string> error_outcomes ABSL_GUARDED_BY(mu);  // said on stderr
  bool issuing_done ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  std::atomic<int64_t> output_tokens{0};
};

// One streaming Generate call. Owned by itself: deleted by OnDone, after it
// hands its record to the runner.
class LoadRunner::GrpcCall final : public LoadRunner::Call,
                                   public grpc::ClientReadReactor<ced::v1::GenerateResponse> {
 public:
  GrpcCall(LoadRunner* owner, const PlannedRequest& planned)
      : owner_(owner),
        channel_(owner->channel_),
        request_(MakeGenerateRequest(planned, owner->options_)) {
    record_.index = planned.index;
    record_.prompt_tokens = planned.prompt_tokens;
    record_.max_tokens = planned.output_tokens;
    if (owner->options_.concurrency == 0) record_.planned_s = planned.arrival_s;
  }

  void Start() override {
    context_.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(owner_->options_.request_timeout_s * 1e6)));
    owner_->stub_->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    record_.sent_s = owner_->Now();
    StartCall();
  }

  void Cancel() override { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream: OnDone follows
    const int n = response_.token_ids_size();
    if (n > 0) {
      if (record_.first_token_s < 0) record_.first_token_s = owner_->Now();
      record_.output_tokens += n;
      owner_->state_->output_tokens.fetch_add(n, std::memory_order_relaxed);
    }
    if (response_.has_timings()) {
      const ced::v1::Timings& t = response_.timings();
      record_.server_queue_ms = t.queue_ms();
      record_.server_prefill_ms = t.prefill_ms();
      record_.server_transfer_ms = t.transfer_ms();
      record_.server_ttft_ms = t.ttft_ms();
    }
    if (response_.has_placement()) {
      record_.replay_on_decode = response_.placement().replay_on() == ced::v1::REPLAY_ON_DECODE;
    }
    if (response_.finish_reason() == ced::v1::FINISH_REASON_ERROR) finish_ = "FINISH_ERROR";
    if (response_.finish_reason() == ced::v1::FINISH_REASON_CANCELLED) finish_ = "FINISH_CANCELLED";
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.end_s = owner_->Now();
    record_.outcome = status.ok() ? finish_ : OutcomeName(status.error_code());
    if (!status.ok()) record_.error_message = status.error_message();
    // The runner may be destroyed as soon as Finished() reports the last
    // call: free this call (its context) first, and touch nothing after.
    LoadRunner* owner = owner_;
    Call* key = this;
    RequestRecord record = std::move(record_);
    delete this;
    owner->Finished(key, std::move(record));
  }

 private:
  LoadRunner* const owner_;
  // Declared before the context: the channel outlives the call's context
  // even when the runner (and its reference) is gone.
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  const ced::v1::GenerateRequest request_;
  ced::v1::GenerateResponse response_;
  RequestRecord record_;
  std::string finish_ = "OK";
};

ced::v1::GenerateRequest MakeGenerateRequest(const PlannedRequest& planned,
                                             const RunOptions& options) {
  ced::v1::GenerateRequest req;
  if (planned.prompt_text.empty()) {
    req.mutable_prompt_token_ids()->Add(planned.prompt_token_ids.begin(),
                                        planned.prompt_token_ids.end());
  } else {
    req.set_prompt(planned.prompt_text);
  }
  req.set_max_tokens(static_cast<int32_t>(planned.output_tokens));
  req.set_ignore_eos(true);
  req.set_temperature(options.temperature);
  req.set_seed(planned.seed);
  req.set_replay_on(options.replay_on);
  // Unique across load generators running at once against one gateway (an id
  // already in flight there is refused): this process's id, then the index.
  static const std::string run_tag =
      absl::StrCat(getpid(), "-", absl::ToUnixMicros(absl::Now()) % 1000000);
  req.set_request_id(absl::StrCat("loadgen-", run_tag, "-", planned.index));
  return req;
}

absl::StatusOr<ced::v1::ModelInfoResponse> FetchModelInfo(const std::string& target,
                                                          double timeout_s) {
  auto stub =
      ced::v1::Gateway::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  ced::v1::ModelInfoResponse info;
  grpc::Status s = stub->ModelInfo(&ctx, {}, &info);
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
    return absl::UnavailableError(absl::StrCat(
        "--target ", target, " is not a gateway (UNIMPLEMENTED: it does not serve ModelInfo)"));
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("gateway ", target,
                                               ": ModelInfo failed: ", OutcomeName(s.error_code()),
                                               " ", s.error_message()));
  }
  return info;
}

absl::StatusOr<std::unique_ptr<LoadRunner>> LoadRunner::Create(const RunOptions& options,
                                                               Workload* workload) {
  if (options.target.empty()) return absl::InvalidArgumentError("loadgen: target is empty");
  if (options.duration_s <= 0 && options.max_requests <= 0) {
    return absl::InvalidArgumentError(
        "loadgen: a run needs a bound: duration_s > 0 or max_requests > 0");
  }
  if (!(options.request_timeout_s > 0)) {
    return absl::InvalidArgumentError("loadgen: request_timeout_s must be > 0");
  }
  if (options.concurrency < 0)
    return absl::InvalidArgumentError("loadgen: concurrency must be >= 0");
  if (workload == nullptr) return absl::InvalidArgumentError("loadgen: no workload");
  return std::unique_ptr<LoadRunner>(new LoadRunner(options, workload));
}

LoadRunner::LoadRunner(RunOptions options, Workload* workload)
    : options_(std::move(options)), workload_(workload), state_(std::make_unique<State>()) {
  channel_ = grpc::CreateChannel(options_.target, grpc::InsecureChannelCredentials());
  stub_ = ced::v1::Gateway::NewStub(channel_);
}

LoadRunner::~LoadRunner() {
  // Run() returns only once every call ended; a runner destroyed without
  // Run() has none. Wait anyway, in case Run() was left by an error.
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](std::set<Call*>* live) { return live->empty(); }, &state_->live));
}

double LoadRunner::Now() const {
  return std::chrono::duration<double>(Clock::now() - state_->start).count();
}

bool LoadRunner::Interrupted() const {
  return options_.interrupt != nullptr && options_.interrupt->load(std::memory_order_relaxed);
}

void LoadRunner::Launch(const PlannedRequest& planned) {
  Call* call = options_.api == Api::kOpenAi ? NewHttpCall(planned)
                                            : static_cast<Call*>(new GrpcCall(this, planned));
  {
    absl::MutexLock lock(&state_->mu);
    state_->live.insert(call);
    ++state_->issued;
  }
  call->Start();
}

void LoadRunner::AddOutputTokens(int64_t n) {
  state_->output_tokens.fetch_add(n, std::memory_order_relaxed);
}

void LoadRunner::Finished(Call* call, RequestRecord record) {
  absl::MutexLock lock(&state_->mu);
  if (!record.ok()) ++state_->failed;
  NoteFirstError(record, &state_->error_outcomes);
  state_->records.push_back(std::move(record));
  state_->live.erase(call);
  state_->changed.SignalAll();
}

absl::StatusOr<RunResult> LoadRunner::Run() {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->started) return absl::FailedPreconditionError("loadgen: Run() called twice");
    state_->start = Clock::now();
    state_->started = true;
  }
  const double duration = options_.duration_s;
  auto past_duration = [&] { return duration > 0 && Now() >= duration; };
  for (int64_t i = 0; options_.max_requests <= 0 || i < options_.max_requests; ++i) {
    const PlannedRequest planned = workload_->Get(i);
    if (options_.concurrency > 0) {
      absl::MutexLock lock(&state_->mu);
      while (static_cast<int>(state_->live.size()) >= options_.concurrency && !Interrupted() &&
             !past_duration()) {
        state_->changed.WaitWithTimeout(&state_->mu, kPollSlice);
      }
    } else {
      if (duration > 0 && planned.arrival_s >= duration) break;
      for (double wait = planned.arrival_s - Now(); wait > 0 && !Interrupted();
           wait = planned.arrival_s - Now()) {
        absl::SleepFor(std::min(absl::Seconds(wait), kPollSlice));
      }
    }
    // Open loop: the arrival time alone decides (a late wake-up still sends).
    if (Interrupted() || (options_.concurrency > 0 && past_duration())) break;
    Launch(planned);
  }
  absl::MutexLock lock(&state_->mu);
  state_->issuing_done = true;
  while (!state_->live.empty()) {
    if (Interrupted() && !state_->cancelled) {
      state_->cancelled = true;
      for (Call* call : state_->live) call->Cancel();
    }
    state_->changed.WaitWithTimeout(&state_->mu, kPollSlice);
  }
  RunResult result;
  result.records = std::move(state_->records);
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  for (const RequestRecord& r : result.records)
    result.duration_s = std::max(result.duration_s, r.end_s);
  return result;
}

Progress LoadRunner::Snapshot() const {
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
