// Helpers shared by the end-to-end tests: a blocking Generate client with
// cancel/deadline knobs, the colocated reference engine, Prometheus text
// scraping, raw grpc.health.v1 checks and the router's worker list. All
// functions are thread-compatible; ColocatedEngine is not thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ced/internal/router.pb.h"
#include "ced/v1/gateway.grpc.pb.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"

namespace ced::testing {

struct GenResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  ced::v1::GenerateResponse last;  // the final message (finish_reason, usage, placement)
  std::vector<ced::v1::StepLogprobs> logprobs;  // when asked for: one per token
  int messages = 0;
};

struct GenerateOptions {
  std::chrono::milliseconds deadline{120000};  // from the start of the call
  int cancel_after_tokens = -1;  // >= 0: ClientContext::TryCancel once this many arrived
};

// Streams one Generate call to completion (blocking).
GenResult Generate(const std::string& gateway, const ced::v1::GenerateRequest& req,
                   const GenerateOptions& options = {});

// Runs every request on its own thread, all at once; results in request order.
std::vector<GenResult> GenerateConcurrently(const std::string& gateway,
                                            const std::vector<ced::v1::GenerateRequest>& reqs);

// The same engine in this process (colocated prefill + decode): the reference
// every disaggregated output must equal token for token.
class ColocatedEngine {
 public:
  // `kv_format`: the cache format override (`--kv-format` of the workers);
  // nullopt keeps the model's. Fails the test on error.
  explicit ColocatedEngine(const std::string& model_dir,
                           std::optional<KvFormat> kv_format = std::nullopt);
  bool ok() const { return engine_ != nullptr; }
  // `logits` (optional): each step's logits as the model gave them, before
  // any adjustment.
  std::vector<int32_t> Run(const std::vector<int32_t>& prompt, int max_tokens,
                           ReplayMode mode = ReplayMode::kBounded,
                           const SamplingParams& sampling = {},
                           std::vector<std::vector<float>>* logits = nullptr);
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

// Makes (once per preset; atomic writes) a model under the test temp dir.
std::string MakeModelDir(const std::string& preset);
// A deterministic prompt of n token ids in [0, 256).
std::vector<int32_t> Prompt(int n, int salt);
// A greedy token-id request that ignores EOS (so it runs to max_tokens).
ced::v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                                 ced::v1::ReplayOn on);

// The value of one sample in Prometheus text: `series` is the metric name plus
// its label block exactly as exposed, e.g. `ced_requests_total{outcome="length"}`.
std::optional<double> MetricValue(const std::string& text, const std::string& series);
// GET http://metrics_address/metrics and MetricValue of it.
std::optional<double> ScrapeMetric(const std::string& metrics_address, const std::string& series);

// Polls `done` every `poll` until it returns true or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds poll = std::chrono::milliseconds(100));

// grpc.health.v1.Health/Check of `service` ("" = the server): 1 SERVING,
// 2 NOT_SERVING, 0 UNKNOWN, -1 when the call failed (NOT_FOUND for a service
// the server does not know, UNAVAILABLE when it is down).
int HealthStatus(const std::string& address, const std::string& service);

// The router's worker list; nullopt when the call fails.
std::optional<ced::internal::ListWorkersResponse> ListWorkers(const std::string& router);

// True when every worker the router lists reports an idle state: all KV
// blocks free, no sequences, no prefill tokens queued or in flight, nothing
// pending; false for an empty list. `why` (optional) gets the first worker
// that is not idle.
bool AllWorkersIdle(const ced::internal::ListWorkersResponse& workers, std::string* why = nullptr);

}  // namespace ced::testing
