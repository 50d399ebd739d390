// Turns a GenerateCall's messages (ced.v1.GenerateResponse deltas, then the
// final message) into an OpenAI response: server-sent events while it
// streams, or one JSON body. No I/O; not thread-safe (one per response).
#pragma once

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "ced/v1/gateway.pb.h"
#include "engine/tokenizer/tokenizer.h"
#include "services/gateway/openai/openai_protocol.h"

namespace ced::gateway::openai {

class ResponseBuilder {
 public:
  // `include_usage`: every chunk carries "usage": null, as OpenAI sends them,
  // and (unless `usage_chunk` is false: a response of several choices sends
  // one for all) a usage chunk ends the choice's events. `index`: the
  // choice's number.
  ResponseBuilder(ResponseHeader header, bool include_usage, int index = 0)
      : ResponseBuilder(std::move(header), include_usage, index, include_usage) {}
  ResponseBuilder(ResponseHeader header, bool include_usage, int index, bool usage_chunk)
      : header_(std::move(header)),
        include_usage_(include_usage),
        index_(index),
        usage_chunk_(usage_chunk) {}

  // The response shows the log-probabilities the messages bring (the request
  // asked for them), tokens as `tokenizer` (not owned; outlives this) spells
  // them. A text event carries those of the tokens since the last event.
  void EnableLogprobs(const Tokenizer* tokenizer) { tokenizer_ = tokenizer; }
  // Chat with tools: tool calls the model writes in `format` become the
  // message's tool_calls (ids "call_<id_prefix>_<i>"); while one may be
  // starting its text is held, and the calls go out in one chunk at the end.
  // `parallel` false: the first call only (OpenAI's parallel_tool_calls).
  void EnableToolCalls(ToolCallFormat format, std::string id_prefix, bool parallel = true) {
    tools_.emplace(format, std::move(id_prefix), parallel);
  }

  // Completions with echo: the choice's text starts with `prompt` (a
  // stream's first text event carries it).
  void SetEcho(std::string prompt) { echo_ = std::move(prompt); }

  // Streaming: appends to *out the events for `message` ("data: {...}\n\n").
  // Chat streams open with a role chunk. Deltas without text (a character
  // still incomplete) give nothing; the final message gives the last text
  // with finish_reason, then the usage chunk when asked for.
  void AppendEvents(const ced::v1::GenerateResponse& message, std::string* out);
  // Streaming: the end of the stream after the call closed with `status`:
  // "data: [DONE]\n\n", or an error event when the call failed.
  std::string End(const grpc::Status& status) const;

  // Non-streaming: collects the text; Body() once the final message came.
  void Add(const ced::v1::GenerateResponse& message);
  bool finished() const { return finished_; }
  std::string Body() const;
  // The choice once finished (either mode); its usage.
  ChoiceResult result() const;
  const UsageCounts& usage() const { return usage_; }

 private:
  void AppendEvent(const std::string& json, std::string* out) const;
  // The event of a text delta (not the first chunk, not the last): the same
  // bytes as ChunkJson gives, from a template made once per stream, since
  // only the text differs from one token to the next.
  void AppendTextEvent(const std::string& text, std::string* out);
  // Appends the message's logprobs to *to.
  void TakeLogprobs(const ced::v1::GenerateResponse& message, Logprobs* to) const;
  TokenText Token(const ced::v1::TokenLogprob& t) const;

  const ResponseHeader header_;
  const bool include_usage_;
  const int index_;
  const bool usage_chunk_;
  bool opened_ = false;
  bool finished_ = false;
  // The text event's JSON before and after its text's string value.
  std::string text_before_;
  std::string text_after_;
  std::string text_;  // non-streaming
  std::string finish_reason_;
  UsageCounts usage_;
  const Tokenizer* tokenizer_ = nullptr;  // logprobs asked for
  Logprobs logprobs_;                     // streaming: not sent yet; else all of them
  std::optional<ToolCallStream> tools_;   // tool calls asked for
  std::string echo_;                      // not yet sent / added
};

// The status of a grpc::Status as absl's (for HttpStatusOf / ErrorJson).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ced::gateway::openai
