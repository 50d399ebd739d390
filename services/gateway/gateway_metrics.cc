#include "services/gateway/gateway_metrics.h"

#include "engine/common/status.h"

namespace ced::gateway {

absl::StatusOr<GatewayMetrics> GatewayMetrics::Create(metrics::Registry* registry, bool openai) {
  GatewayMetrics m;
  ASSIGN_OR_RETURN(m.requests, registry->AddCounter("ced_gateway_requests_total",
                                                    "Generate requests by API and outcome.",
                                                    {"api", "outcome"}));
  std::vector<Api> apis = {Api::kGrpc};
  if (openai) apis.push_back(Api::kOpenAi);
  for (Api api : apis) {
    for (const char* outcome : {"length", "stop", "invalid_argument", "cancelled",
                                "deadline_exceeded", "resource_exhausted", "unavailable"}) {
      m.requests->WithLabelValues({ApiLabel(api), outcome});
    }
  }
  const std::vector<double> latency = metrics::LatencySecondsBuckets();
  ASSIGN_OR_RETURN(auto* ttft,
                   registry->AddHistogram("ced_gateway_ttft_seconds",
                                          "Time to first token, from request receipt to the "
                                          "first token written to the client.",
                                          latency, {"api"}));
  ASSIGN_OR_RETURN(auto* itl, registry->AddHistogram("ced_gateway_inter_token_latency_seconds",
                                                     "Time between consecutive tokens written "
                                                     "to the client, per token.",
                                                     latency, {"api"}));
  ASSIGN_OR_RETURN(auto* e2e,
                   registry->AddHistogram("ced_gateway_e2e_latency_seconds",
                                          "Request receipt to the final message.", latency,
                                          {"api"}));
  ASSIGN_OR_RETURN(auto* prompt,
                   registry->AddCounter("ced_gateway_prompt_tokens_total",
                                        "Prompt tokens of admitted requests.", {"api"}));
  ASSIGN_OR_RETURN(auto* generated, registry->AddCounter("ced_gateway_generated_tokens_total",
                                                         "Tokens streamed to clients.", {"api"}));
  for (Api api : apis) {
    ApiMetrics& a = api == Api::kGrpc ? m.grpc : m.openai;
    a.ttft_seconds = &ttft->WithLabelValues({ApiLabel(api)});
    a.inter_token_latency_seconds = &itl->WithLabelValues({ApiLabel(api)});
    a.e2e_latency_seconds = &e2e->WithLabelValues({ApiLabel(api)});
    a.prompt_tokens = &prompt->WithLabelValues({ApiLabel(api)});
    a.generated_tokens = &generated->WithLabelValues({ApiLabel(api)});
  }
  ASSIGN_OR_RETURN(auto* inflight, registry->AddGauge("ced_gateway_inflight_requests",
                                                      "Generate requests being served."));
  ASSIGN_OR_RETURN(auto* inflight_tokens,
                   registry->AddGauge("ced_gateway_inflight_tokens",
                                      "Prompt tokens plus max_tokens of the requests being served."));
  ASSIGN_OR_RETURN(m.rejected,
                   registry->AddCounter("ced_gateway_admission_rejected_total",
                                        "Generate requests refused by admission control, by the "
                                        "bound that refused them.",
                                        {"bound"}));
  for (const char* bound : {"requests", "tokens"}) m.rejected->WithLabelValues({bound});
  ASSIGN_OR_RETURN(m.migrations,
                   registry->AddCounter("ced_migrations_total",
                                        "Requests moved off a decode worker that died "
                                        "mid-stream, by outcome (ok, failed, limit).",
                                        {"outcome"}));
  for (const char* outcome : {"ok", "failed", "limit"}) m.migrations->WithLabelValues({outcome});
  ASSIGN_OR_RETURN(m.prefill_retries,
                   registry->AddCounter("ced_prefill_retries_total",
                                        "Prefills placed again after their prefill worker died "
                                        "before the first token, by outcome (ok, failed).",
                                        {"outcome"}));
  for (const char* outcome : {"ok", "failed"}) m.prefill_retries->WithLabelValues({outcome});
  ASSIGN_OR_RETURN(m.reserve_retries,
                   registry->AddCounter("ced_gateway_reserve_retries_total",
                                        "Requests placed on another decode worker after one "
                                        "refused their reservation with RESOURCE_EXHAUSTED (no "
                                        "K/V room), by outcome (ok, failed).",
                                        {"outcome"}));
  for (const char* outcome : {"ok", "failed"}) m.reserve_retries->WithLabelValues({outcome});
  ASSIGN_OR_RETURN(auto* kv_waits,
                   registry->AddCounter("ced_gateway_kv_waits_total",
                                        "Requests placed again after waiting for K/V room "
                                        "(--kv-wait-ms): one per wait, so a request that waits "
                                        "three times counts 3.",
                                        {}));
  m.kv_waits = &kv_waits->WithLabels({});
  ASSIGN_OR_RETURN(auto* kv_waiting,
                   registry->AddGauge("ced_gateway_kv_waiting_requests",
                                      "Requests waiting in the gateway for K/V room now "
                                      "(--kv-wait-ms), first come first served."));
  m.kv_waiting = &kv_waiting->WithLabels({});
  m.inflight_tokens = &inflight_tokens->WithLabels({});
  m.inflight_requests = &inflight->WithLabels({});
  return m;
}

void GatewayMetrics::CountRequest(Api api, const std::string& outcome) const {
  requests->WithLabelValues({ApiLabel(api), outcome}).Increment();
}

}  // namespace ced::gateway
