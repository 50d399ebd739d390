// Timed streaming clients for the services bench: one request through the
// public gateway, or the same work done by calling the workers directly
// (DecodeWorker.Reserve + Stream, and PrefillWorker.Prefill unless the decode
// worker prefills locally), as the gateway itself would. Every call blocks
// until the stream ends. The functions are thread-safe (gRPC stubs are).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"

namespace ced::bench {

struct GenerateArgs {
  std::string request_id;  // unique per request
  std::vector<int32_t> prompt;
  int max_tokens = 8;
  ced::v1::ReplayOn replay_on = ced::v1::REPLAY_ON_DECODE;
  bool ignore_eos = true;
};

// Client-side timing of one streamed request. Times are milliseconds since the
// call started (the client's clock, before the request is sent).
struct StreamResult {
  absl::Status status;
  std::vector<double> token_ms;  // arrival of each generated token, in order
  double end_ms = 0;             // stream finished
  int messages = 0;              // messages (events) that carried tokens
  // Through the gateway: its final message.
  ced::v1::Timings gateway_timings;
  ced::v1::Placement placement;
  // Direct: the decode worker's last chunk and the prefill worker's summary.
  ced::internal::Timings decode_timings;
  ced::internal::PrefillDone prefill_done;
  double ttft_ms() const { return token_ms.empty() ? -1 : token_ms.front(); }
  // Mean gap between consecutive tokens after the first (-1 with < 2 tokens).
  double tpot_ms() const {
    return token_ms.size() < 2 ? -1 : (token_ms.back() - token_ms.front()) / (token_ms.size() - 1);
  }
};

StreamResult GatewayGenerate(ced::v1::Gateway::Stub* gateway, const GenerateArgs& args);

// The same request through the gateway's OpenAI-compatible HTTP API:
// `POST /v1/completions` with `stream: true` and usage in the last event,
// the prompt as token ids (no BOS added), on a keep-alive connection of the
// calling thread's (made on its first request).
// OpenAI's events carry text, not token ids, and one event may hold several
// tokens (a byte token that is not a whole character yet waits for the next):
// token_ms gets the first token at the first event with text, the usage's
// completion tokens in all, and the last at the last text event, the ones
// between spread evenly (so TTFT and the mean TPOT are exact).
StreamResult OpenAiGenerate(const std::string& http_address, const std::string& model,
                            const GenerateArgs& args);

struct DirectTarget {
  ced::internal::DecodeWorker::Stub* decode = nullptr;
  ced::internal::PrefillWorker::Stub* prefill = nullptr;  // unused with local prefill
  std::string decode_worker_id, decode_kv_address, prefill_worker_id;
};

// With local_prefill the decode worker prefills (and replays) by itself.
StreamResult DirectGenerate(const DirectTarget& target, const GenerateArgs& args,
                            bool local_prefill);

// Deterministic pseudo-random prompt of `n` printable-ASCII byte tokens
// (ids 32..126, valid in every preset); a different `salt` gives a different
// prompt from its first token on, so no request hits a prefix cache.
std::vector<int32_t> MakePrompt(int n, uint64_t salt);

}  // namespace ced::bench
