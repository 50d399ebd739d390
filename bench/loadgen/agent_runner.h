// Drives the agent trace (agent_workload.h) against one gateway over ced.v1
// gRPC: every session sends its turns one after the other, turn k built from
// turn k-1's prompt and the token ids the server streamed back, after the
// think time; sessions run concurrently (callback API, no thread per call).
// A failed turn ends its session (the next prompt would need its answer).
// Run() returns once every session ended; a deadline bounds every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/loadgen/runner.h"
#include "bench/loadgen/stats.h"
#include "bench/sim/agent_workload.h"
#include "ced/v1/gateway.grpc.pb.h"

namespace ced::loadgen {

struct AgentRunOptions {
  std::string target;              // gateway address, host:port
  double request_timeout_s = 300;  // each call's deadline, from its start
  float temperature = 0;           // 0 = greedy
  ced::v1::ReplayOn replay_on = ced::v1::REPLAY_ON_UNSPECIFIED;
  ced::v1::ReplayMode replay_mode = ced::v1::REPLAY_MODE_UNSPECIFIED;
  // Send one `session_id` per session (a routing hint) when this build's
  // ced.v1.GenerateRequest has the field (GatewayHasSessionId()).
  bool send_session_id = true;
  uint64_t seed = 1;  // token contents and sampling seeds
  // Polled while running (may be null): once true, no new turn starts and
  // the calls in flight are cancelled.
  const std::atomic<bool>* interrupt = nullptr;
  // Workers (gRPC addresses) whose prefix caches are flushed, waiting for
  // their KV tiers' writes, before every turn after a session's first (the
  // turn's call starts after the flush; its time is recorded apart).
  std::vector<std::string> flush_workers;
};

// One turn as the client saw it. request.index numbers turns in the order
// they were issued; request.prompt_tokens is the prompt actually sent.
struct AgentTurnRecord {
  int session = 0;
  int turn = 0;
  RequestRecord request;
  // usage.cached_prompt_tokens of the final message; -1 when none arrived.
  int64_t cached_prompt_tokens = -1;
  // Prompt tokens a cache could hold from the session's previous turn: its
  // prompt + its answer (0 for turn 0).
  int64_t reusable_tokens = 0;
  // With flush_workers: how long the flush before this turn took (seconds).
  double flush_s = 0;
};

struct AgentRunResult {
  std::vector<AgentTurnRecord> turns;  // by (session, turn)
  int64_t planned_turns = 0;           // sessions x turns
  // Context length each session reached: its last OK turn's prompt + answer.
  std::vector<int64_t> session_final_tokens;
  double duration_s = 0;  // start -> last call's end
  bool session_id_sent = false;
};

// Whether this build's ced.v1.GenerateRequest has a string `session_id`
// field (looked up by reflection, so the load generator needs no change when
// the field is added to the proto).
bool GatewayHasSessionId();
// Sets it when present; false when the proto has no such field.
bool SetSessionId(ced::v1::GenerateRequest* request, const std::string& session_id);

class AgentRunner final {
 public:
  // Validates the options (a target, positive timeout) and the trace.
  static absl::StatusOr<std::unique_ptr<AgentRunner>> Create(
      const AgentRunOptions& options, std::vector<sim::AgentSessionSpec> trace);
  ~AgentRunner();

  // Blocks until every session ended. Call once.
  absl::StatusOr<AgentRunResult> Run();
  // Thread-safe; callable while Run() blocks.
  Progress Snapshot() const;

 private:
  class Call;
  struct State;
  AgentRunner(AgentRunOptions options, std::vector<sim::AgentSessionSpec> trace);
  void Launch(int session);                                      // state mutex not held
  // FlushCache (waiting for the tiers) on every options_.flush_workers.
  absl::Status FlushWorkers();
  // `call`: the address the finished call had (it was freed already).
  void Finished(uintptr_t call, AgentTurnRecord record, std::vector<int32_t> answer);
  double Now() const;
  bool Interrupted() const;

  const AgentRunOptions options_;
  const std::vector<sim::AgentSessionSpec> trace_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  std::unique_ptr<State> state_;
};

}  // namespace ced::loadgen
