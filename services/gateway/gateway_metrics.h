// The gateway's Prometheus metrics. Pointers stay valid for the registry's
// lifetime; every metric is thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "services/gateway/generate_sink.h"
#include "services/metrics/registry.h"

namespace ced::gateway {

// The per-request series of one public API (label api="grpc" / "openai").
struct ApiMetrics {
  metrics::Histogram* ttft_seconds = nullptr;
  metrics::Histogram* inter_token_latency_seconds = nullptr;
  metrics::Histogram* e2e_latency_seconds = nullptr;
  metrics::Counter* prompt_tokens = nullptr;
  metrics::Counter* generated_tokens = nullptr;
};

struct GatewayMetrics {
  // Registers every family in `registry` (not owned; must outlive the
  // result). The api="openai" series exist only with `openai` (the HTTP API
  // is enabled), so a gRPC-only gateway exports one series per metric.
  static absl::StatusOr<GatewayMetrics> Create(metrics::Registry* registry, bool openai = false);

  // outcome: "length", "stop" for completed requests, otherwise the
  // lower-case status code ("invalid_argument", "cancelled", ...).
  void CountRequest(Api api, const std::string& outcome) const;
  // Api::kOpenAi only when created with `openai`.
  const ApiMetrics& For(Api api) const { return api == Api::kGrpc ? grpc : openai; }

  metrics::Family<metrics::Counter>* requests = nullptr;  // labels: api, outcome
  ApiMetrics grpc, openai;
  metrics::Gauge* inflight_requests = nullptr;
  metrics::Gauge* inflight_tokens = nullptr;  // prompt + max_tokens of admitted requests
  // Requests refused by admission control, by the bound that refused them
  // ("requests": --max-inflight, "tokens": --max-inflight-tokens).
  metrics::Family<metrics::Counter>* rejected = nullptr;
  // A request's decode worker died mid-stream (GenerateCall): outcome "ok"
  // (the stream went on, on another decode worker), "failed" (no other
  // worker took it) or "limit" (--migration-limit reached: UNAVAILABLE).
  metrics::Family<metrics::Counter>* migrations = nullptr;
  // A request's prefill worker died before its first token: outcome "ok"
  // (the prefill was placed again) or "failed".
  metrics::Family<metrics::Counter>* prefill_retries = nullptr;
  // A decode worker refused a request's Reserve with RESOURCE_EXHAUSTED (no
  // K/V room) and the request was routed again: outcome "ok" (the next
  // worker reserved it) or "failed" (refused too, or no other worker).
  metrics::Family<metrics::Counter>* reserve_retries = nullptr;
  // Placements again after waiting for K/V room (GatewaySettings::kv_wait).
  metrics::Counter* kv_waits = nullptr;
  // Requests waiting for K/V room now (KvWaitQueue).
  metrics::Gauge* kv_waiting = nullptr;
};

}  // namespace ced::gateway
