// The OpenAI wire format of the gateway's HTTP API: request bodies of
// /v1/completions and /v1/chat/completions parsed into a ced.v1
// GenerateRequest (the gRPC API's request, so both APIs share validation),
// and the JSON of responses, stream chunks and errors. Pure functions, no
// I/O; thread-safe.
//
// Request fields (JSON null = absent):
//   model (required), prompt (string, token ids, or a list of one of either),
//   messages (chat), max_tokens, max_completion_tokens (chat), temperature,
//   top_p, seed, stop (string or list of strings), n (1..16), stream,
//   stream_options.include_usage, user (ignored), presence_penalty,
//   frequency_penalty, logit_bias, logprobs (chat: a boolean, with
//   top_logprobs 0..20; completions: 0..20 of the most probable tokens, or
//   false).
//   echo (completions: the prompt's text before the completion; not with
//   logprobs, which would need the prompt's).
//   Accepted at their neutral value only: echo (chat: false), best_of (1),
//   tool_choice ("none"/"auto"), parallel_tool_calls.
//   Extensions: top_k, stop_token_ids, ignore_eos, replay_on ("prefill",
//   "decode", "auto"), replay_mode ("bounded", "exact"), add_bos
//   (completions; default true: the tokenizer's BOS, like add_special_tokens),
//   session_id (a routing hint), request_id.
//   Chat: tools (passed to the template; with tool_choice not "none", tool
//   calls in the output become tool_calls: tool_calls.h).
// Any other field: 400 naming it. Errors are InvalidArgument whose message
// starts with the field; FieldOf() gives the field for OpenAI's `param`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ced/v1/gateway.pb.h"
#include "engine/chat/chat_template.h"
#include "services/gateway/openai/tool_calls.h"
#include "services/gateway/request_validation.h"

namespace ced::gateway::openai {

enum class Endpoint { kCompletions, kChat };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;                   // choices: n independent completions of the prompt
  bool has_seed = false;       // `seed` given (not null)
  // prompt / prompt_token_ids (completions; chat fills it after rendering),
  // sampling, stop and the extensions. max_tokens is 0 when not given.
  ced::v1::GenerateRequest generate;
  std::vector<ChatMessage> messages;    // chat
  std::vector<std::string> tools_json;  // chat: `tools`, each as JSON text
  bool tool_choice_none = false;        // chat: "tool_choice": "none"
  bool parallel_tool_calls = true;      // chat: false keeps the first call only
  // Completions: the prompt's text comes before the completion's (the
  // server fills echo_text: the prompt as given, token ids decoded).
  bool echo = false;
  std::string echo_text;
};

// The most choices (`n`) one request may ask for.
inline constexpr int kMaxChoices = 16;

// Parses a request body for `endpoint`. InvalidArgument naming the field
// (FieldOf names it) for malformed JSON, wrong types, unknown fields and bad
// values that need no model facts (the rest is ValidateGenerateRequest's).
absl::StatusOr<OpenAiRequest> ParseRequest(Endpoint endpoint, std::string_view body);

// POST /tokenize (vLLM's): {"model"?, "prompt", "add_special_tokens"?} or
// {"model"?, "messages", "add_generation_prompt"?, "tools"?}.
struct TokenizeBody {
  std::string model;  // empty: not given
  bool chat = false;  // messages instead of prompt
  std::string prompt;
  bool add_special_tokens = true;  // prompt: the tokenizer's BOS
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::vector<std::string> tools_json;
};
absl::StatusOr<TokenizeBody> ParseTokenizeRequest(std::string_view body);
// POST /detokenize: {"model"?, "tokens": [ids]} (ranges are the caller's to
// check against the vocabulary).
struct DetokenizeBody {
  std::string model;
  std::vector<int32_t> tokens;
};
absl::StatusOr<DetokenizeBody> ParseDetokenizeRequest(std::string_view body);

// The HTTP status and OpenAI error body for a status:
// InvalidArgument/FailedPrecondition 400, Unauthenticated 401,
// PermissionDenied 403, NotFound 404, AlreadyExists 409, ResourceExhausted
// 429, Unavailable 503, DeadlineExceeded 504, Cancelled 499, else 500.
int HttpStatusOf(absl::StatusCode code);
// {"error": {"message", "type", "param", "code"}}; `code` may be empty (null).
std::string ErrorJson(const std::string& message, const std::string& type, const std::string& param,
                      const std::string& code);
std::string ErrorJson(const absl::Status& status);

// The parts of a response that do not change while it streams.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

struct UsageCounts {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;
};

// "stop" / "length" from the final message's finish_reason.
std::string FinishReasonName(ced::v1::FinishReason reason);

// Log-probabilities of some generated tokens, as a response shows them: a
// token by its bytes (a token may hold part of a character: its text then
// shows U+FFFD, its "bytes" the exact ones).
struct TokenText {
  std::string bytes;
  float logprob = 0.0f;
};
struct LogprobEntry {
  TokenText token;
  std::vector<TokenText> top;  // most probable first
};
struct Logprobs {
  std::vector<LogprobEntry> entries;
  // Completions: where the first entry's text starts in the choice's text,
  // in code points (text_offset counts on from it).
  int text_offset = 0;
};
// The number of code points `bytes` shows as (ill-formed bytes as U+FFFD):
// how far a token moves the completions text_offset.
int TextLength(const std::string& bytes);

// A whole (non-streamed) response.
std::string CompletionJson(const ResponseHeader& header, const std::string& text,
                           const std::string& finish_reason, const UsageCounts& usage,
                           const Logprobs* logprobs = nullptr);
// One choice of a whole response.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;
  std::optional<Logprobs> logprobs;  // null when not asked for
  // Chat: the calls the model wrote (`text` is then the content before them,
  // null when empty, and finish_reason "tool_calls").
  std::vector<ToolCall> tool_calls;
};
// A whole response with several choices (index = position).
std::string CompletionJson(const ResponseHeader& header, const std::vector<ChoiceResult>& choices,
                           const UsageCounts& usage);

// One stream chunk: `text` as choices[0].text / choices[0].delta.content
// of the choice numbered `index`;
// finish_reason "" = null. `role_only` (chat's first chunk): the delta is
// {"role": "assistant", "content": ""}. `with_usage_null` adds "usage": null
// (OpenAI's shape when include_usage is on). `logprobs`: the chunk's tokens'
// (null when not given). The shapes of "logprobs": chat {"content": [{token,
// logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal":
// null}; completions {tokens, token_logprobs, top_logprobs: [{text:
// logprob}] (the top ones and the token itself), text_offset}.
std::string ChunkJson(const ResponseHeader& header, const std::string& text,
                      const std::string& finish_reason, bool role_only, bool with_usage_null,
                      int index = 0, const Logprobs* logprobs = nullptr);
// A chat stream chunk whose delta holds these tool calls (each with its
// index, id, type and the whole arguments).
std::string ToolCallsChunkJson(const ResponseHeader& header, const std::vector<ToolCall>& calls,
                               bool with_usage_null, int index = 0,
                               const Logprobs* logprobs = nullptr);
// `text` as a JSON string value, quotes included, escaped as every JSON
// body here is (invalid UTF-8 becomes U+FFFD).
std::string JsonString(const std::string& text);
// The final usage chunk: "choices": [] and usage.
std::string UsageChunkJson(const ResponseHeader& header, const UsageCounts& usage);

// GET /v1/models.
// `max_model_len` (the context, prompt + completion tokens) as vLLM and
// SGLang report it, for clients that size their prompts by it.
std::string ModelsJson(const std::string& model, int64_t created, int max_model_len);

}  // namespace ced::gateway::openai
