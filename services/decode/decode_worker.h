// The decode worker (DESIGN.md §2): full model, continuous batching. A
// request is admitted only with its KV blocks reserved (Reserve); its K/V
// lands straight into those blocks through the KV transport; the worker runs
// the replay when told, then decodes it in the batch and streams its tokens.
//
// Threads: gRPC threads (Reserve/Stream/Cancel), transport threads (the KV
// sink), and one loop thread that owns all engine compute. What runs when
// (admission bounds, batching, the step token budget, timeouts) is decided
// by a ced::Scheduler (engine/scheduler); the loop executes its plans.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "engine/runtime/engine.h"
#include "engine/scheduler/scheduler.h"
#include "engine/sampling/sampler.h"
#include "services/common/grpc_util.h"
#include "services/common/router_client.h"
#include "services/common/stream_writer.h"
#include "services/kv_transport/transport.h"
#include "services/metrics/registry.h"

namespace ced::services {

struct DecodeWorkerOptions {
  std::string worker_id = "decode-0";
  EngineOptions engine;
  std::string grpc_address = "127.0.0.1:0";
  std::string metrics_address = "127.0.0.1:0";
  std::string kv_address = "127.0.0.1:0";   // KV transport listener
  std::string kv_transport = "ucx";         // ucx | inproc
  std::string router_address;               // empty: do not register
  std::string advertise_address;            // registered gRPC address (default: bound one)
  std::string advertise_kv_address;         // registered KV address (default: bound one)
  // Engine::WarmUp (a 256-token local prefill and two decode steps) before serving.
  bool warm_up = true;
  int max_batch = 64;                        // sequences per decode step
  // Tokens of work per step: one per decoding sequence, plus the prefill /
  // replay tokens of requests started in the step (the first start of a step
  // always runs). Bounds how long starts stall the running batch.
  int64_t max_step_tokens = 2048;
  // Admission: reservations not yet decoding (waiting for their K/V or a
  // batch slot), in requests and in prompt tokens; beyond either bound
  // Reserve answers RESOURCE_EXHAUSTED at once. KV blocks bound the rest.
  int max_queued_requests = 256;
  int64_t max_queued_tokens = int64_t{1} << 20;
  // An inactivity timeout: a reservation still waiting for K/V ends
  // (DEADLINE_EXCEEDED, "no K/V progress ...") once no K/V message of its
  // request (a chunk, the tail, or the prefill worker's progress notice) has
  // landed for this long. Not a bound on the whole transfer: a slow prefill
  // that keeps sending chunks runs on, and the client's deadline bounds it.
  int reservation_timeout_ms = 30000;
  int stream_attach_timeout_ms = 10000;      // reserved but never streamed
  int drain_timeout_ms = 30000;              // SIGTERM: finish in-flight work for this long
  // Test-only (hidden `--step-delay-ms-for-testing`): sleep this long before
  // each decode step, so a test's streams are still running when it acts.
  int step_delay_ms_for_testing = 0;
};

// Where a request's token chunks go: its own Stream call, or the gateway's
// multiplexed Subscribe stream (ced.internal.DecodeWorker). Called with the
// worker's mu_ held.
class ChunkOut {
 public:
  virtual ~ChunkOut() = default;
  virtual void Push(ced::internal::TokenChunk chunk) = 0;
  virtual void Close(const grpc::Status& status) = 0;
};

class DecodeWorker {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Start(const DecodeWorkerOptions& options);
  ~DecodeWorker();
  const std::string& grpc_address() const { return server_->grpc_address(); }
  const std::string& metrics_address() const { return server_->metrics_address(); }
  const std::string& kv_address() const { return kv_address_; }
  // NOT_SERVING, refuse new reservations, finish running requests (bounded
  // by drain_timeout_ms), then stop.
  void Drain();
  void Shutdown();

  class Service;
  class Sink;
  struct Request;

 private:
  explicit DecodeWorker(const DecodeWorkerOptions& options);
  absl::Status Init();
  void SchedulerLoop();
  // Ends a request the scheduler ended (mu_ held).
  void EndRequest(Request* r, const EndedRequest& e);
  void FillLoad(ced::internal::LoadReport* report);

  // Called with mu_ held by the service and the sink.
  absl::StatusOr<ced::internal::ReserveResponse> Reserve(const ced::internal::ReserveRequest& r);
  void AttachStream(const std::string& request_id, std::shared_ptr<ChunkOut> stream);
  // A Subscribe stream opened (ALREADY_EXISTS when its name is taken) or
  // ended; ending cancels the requests still on it.
  absl::Status Subscribe(const std::string& subscriber_id,
                         std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out);
  void Unsubscribe(const std::string& subscriber_id);
  bool Cancel(const std::string& request_id, const std::string& why);

  // Scheduler helpers (engine_mu_ held).
  void StartRequest(Request* r);
  // `logprobs`: the token's, when the request asked for them.
  void Emit(Request* r, int32_t token, const StepLogprobs* logprobs);
  void Finish(Request* r, ced::internal::FinishReason reason, const std::string& detail,
              const grpc::Status& status);

  DecodeWorkerOptions options_;
  std::unique_ptr<Engine> engine_;
  std::mutex engine_mu_;  // engine compute and sequence create/release
  std::unique_ptr<kv_transport::KvTransport> transport_;
  std::unique_ptr<kv_transport::KvSink> sink_;
  std::string kv_address_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<RouterClient> router_;
  metrics::Registry registry_;
  struct Metrics;
  std::unique_ptr<Metrics> m_;

  std::mutex mu_;  // requests, transfer state, sched_
  std::condition_variable cv_;
  std::unique_ptr<Scheduler> sched_;
  std::map<std::string, std::unique_ptr<Request>> requests_;
  std::map<uint64_t, Request*> by_token_;
  // Open Subscribe streams by name.
  std::map<std::string, std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle>>
      subscribers_;
  // Ids cancelled before their Reserve arrived (the calls race): a later
  // Reserve of one of them is refused instead of holding blocks. Bounded.
  std::map<std::string, std::chrono::steady_clock::time_point> cancelled_early_;
  bool stop_ = false;
  std::atomic<bool> draining_{false};
  // A reservation was refused for room (K/V blocks, queue bounds) since the
  // loop last told the router: the next room freed is reported at once
  // (RouterClient::ReportSoon), not at the next heartbeat, so that waiting
  // requests (the gateway's --kv-wait-ms) are placed as soon as it exists.
  std::atomic<bool> refused_for_room_{false};
  // The last load report showed less than a quarter of the K/V blocks free:
  // the router may refuse requests for room on that view (without asking
  // this worker), so room freed is reported at once too.
  std::atomic<bool> reported_tight_{false};
  // Set when Shutdown() starts ending the streams it still holds: from then
  // on the Cancel RPC answers UNAVAILABLE, so the gateway knows this worker
  // is gone (not merely that one stream failed) and migrates those requests.
  std::atomic<bool> shutting_down_{false};
  std::thread scheduler_;
};

}  // namespace ced::services
