// Drives one load-generator run against a gateway over gRPC (ced.v1.Gateway,
// callback API: no thread per request). Open loop: requests start at the
// workload's Poisson arrival times; closed loop (`concurrency` > 0): a fixed
// number in flight, the next one starting when one ends. A run is bounded:
// it stops issuing after `duration_s` or `max_requests` (whichever first),
// every call carries a deadline, and Run() returns once no call is in flight.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/loadgen/stats.h"
#include "bench/loadgen/workload.h"
#include "ced/v1/gateway.grpc.pb.h"

namespace ced::loadgen {

// The gateway API a run drives: ced.v1 gRPC, or the OpenAI-compatible HTTP
// API (POST /v1/completions with "stream": true; the target is then the
// gateway's --http-listen address).
enum class Api { kGrpc, kOpenAi };

struct RunOptions {
  std::string target;             // gateway address, host:port
  Api api = Api::kGrpc;
  std::string model;              // Api::kOpenAi: the "model" field
  double duration_s = 0;          // stop issuing after this long; 0 = no time bound
  int64_t max_requests = 0;       // stop after issuing this many; 0 = no count bound
  int concurrency = 0;            // > 0: closed loop (arrival times are ignored)
  double request_timeout_s = 60;  // each call's deadline, counted from its start
  float temperature = 0;          // 0 = greedy
  ced::v1::ReplayOn replay_on = ced::v1::REPLAY_ON_UNSPECIFIED;
  // Polled while running (may be null). Once true: no new request, and the
  // calls in flight are cancelled (they end as CANCELLED).
  const std::atomic<bool>* interrupt = nullptr;
};

// A consistent view of a run in progress (for a progress bar).
struct Progress {
  int64_t issued = 0, done = 0, failed = 0, in_flight = 0, output_tokens = 0;
  double elapsed_s = 0;
  bool issuing_done = false;  // the bound was reached; draining in-flight calls
};

struct RunResult {
  std::vector<RequestRecord> records;  // one per issued request, by index
  double duration_s = 0;               // start -> last call's end
};

// The request sent for `planned`: ignore_eos, max_tokens = output_tokens.
ced::v1::GenerateRequest MakeGenerateRequest(const PlannedRequest& planned,
                                             const RunOptions& options);

// Asks the gateway for its model (also a reachability check), with a deadline.
absl::StatusOr<ced::v1::ModelInfoResponse> FetchModelInfo(const std::string& target,
                                                          double timeout_s = 10);
// The same over the OpenAI API: GET /v1/models (only model_name is filled).
absl::StatusOr<ced::v1::ModelInfoResponse> FetchOpenAiModel(const std::string& target,
                                                            double timeout_s = 10);
// The JSON body of POST /v1/completions for `planned` (streamed, with usage).
std::string MakeOpenAiBody(const PlannedRequest& planned, const RunOptions& options);

// "OK", "CANCELLED", ... (the gRPC code's name).
std::string OutcomeName(grpc::StatusCode code);

class LoadRunner final {
 public:
  // Validates the options (a target, at least one bound, positive timeout)
  // and opens the channel. `workload` must outlive the runner.
  static absl::StatusOr<std::unique_ptr<LoadRunner>> Create(const RunOptions& options,
                                                            Workload* workload);
  ~LoadRunner();

  // Blocks until the run ends. Call once. Errors only for local failures;
  // failed requests are records, not errors.
  absl::StatusOr<RunResult> Run();

  // Thread-safe; callable while Run() blocks.
  Progress Snapshot() const;

  const RunOptions& options() const { return options_; }

 private:
  // One request in flight (either API); deletes itself after Finished().
  class Call {
   public:
    virtual ~Call() = default;
    virtual void Start() = 0;
    // Any thread; the call then ends soon (as CANCELLED).
    virtual void Cancel() = 0;
  };
  class GrpcCall;  // ced.v1.Gateway/Generate, a callback reactor
  class HttpCall;  // OpenAI SSE stream on a thread of its own (runner_openai.cc)
  LoadRunner(RunOptions options, Workload* workload);
  void Launch(const PlannedRequest& planned);
  Call* NewHttpCall(const PlannedRequest& planned);
  void AddOutputTokens(int64_t n);  // for Snapshot()
  void Finished(Call* call, RequestRecord record);
  double Now() const;
  bool Interrupted() const;

  struct State;
  const RunOptions options_;
  Workload* const workload_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  std::unique_ptr<State> state_;
};

}  // namespace ced::loadgen
