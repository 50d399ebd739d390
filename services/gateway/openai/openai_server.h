// The gateway's OpenAI-compatible HTTP API (cpp-httplib): POST
// /v1/completions and /v1/chat/completions (JSON or, with "stream": true,
// server-sent events), GET /v1/models and GET /health.
//
// Every request takes the gRPC API's path: its body becomes a ced.v1
// GenerateRequest (openai_protocol.h), checked by ValidateGenerateRequest,
// admitted and run by StartGenerate / GenerateCall, and counted in the same
// metrics with api="openai". A client that hangs up (seen on its socket while
// the request runs) cancels the request on both workers. TLS and bearer
// tokens follow the gateway's SecurityConfig (the gRPC listener's).
//
// Threads: one thread accepts; each connection is served on a thread of a
// pool (a request blocks its thread while it runs). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/common/security.h"
#include "services/gateway/gateway_core.h"

namespace ced::gateway::openai {

struct OpenAiServerOptions {
  std::string listen_address = "127.0.0.1:0";  // host:port; port 0 picks one
  // The chat template: `chat_template_file` when set, else the model's
  // tokenizer_config.json (model_dir may be empty), else the built-in one.
  std::string model_dir;
  std::string chat_template_file;
  // How tool calls in a chat model's output become `tool_calls` (requests
  // with `tools`, tool_choice not "none"): "auto" (the format the chat
  // template writes tool calls in), "none", "hermes", "deepseek_v3".
  std::string tool_call_parser = "auto";
  // Usage in a final chunk of every stream, as if each request set
  // stream_options.include_usage.
  bool force_usage = false;
  // HTTP carries no deadline: each request gets this long.
  absl::Duration request_timeout = absl::Minutes(10);
  int max_request_bytes = 4 << 20;  // larger bodies: 413
  int threads = 264;                // connections served at once (their threads start on demand)
  // A client that takes no bytes for this long is dropped (its call cancelled).
  absl::Duration write_timeout = absl::Seconds(30);
  // Streamed tokens go from the call's thread straight to a plain TCP socket
  // (false: the connection's thread writes every event, as under TLS).
  bool direct_stream = true;
  services::SecurityConfig security;
};

class OpenAiServer {
 public:
  // `core` is not owned and must outlive the server; `serving` says whether
  // the workers are there (GET /health). INVALID_ARGUMENT for a bad chat
  // template or TLS material, UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(const OpenAiServerOptions& options,
                                                             GatewayCore* core,
                                                             std::function<bool()> serving);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // "host:port" actually bound.
  const std::string& address() const;
  // New connections are refused; requests in flight go on.
  void StopAccepting();
  // Stops accepting, waits at most `drain` for the requests in flight,
  // cancels the rest and returns once every connection is closed. Idempotent.
  void Shutdown(absl::Duration drain);

 private:
  class Impl;
  explicit OpenAiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ced::gateway::openai
