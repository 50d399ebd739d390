// `ced client generate|tokenize|model-info`: a command-line client of the
// public gateway API (ced.v1.Gateway); `ced client drain|flush-cache`: the
// workers' admin calls Drain and FlushCache (internal tier).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/internal/router.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/service_commands.h"
#include "services/cli/terminal_text.h"
#include "services/common/grpc_util.h"
#include "services/common/host_port.h"

namespace ced::cli {
namespace {

using Clock = std::chrono::steady_clock;

// `address` and `expected` ("a gateway", "a prefill or decode worker") name
// what answered UNIMPLEMENTED: a server of another role (gRPC says only the
// code).
int RpcFail(const std::string& words, const grpc::Status& status, const std::string& address = "",
            const std::string& expected = "") {
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && status.error_message().empty() &&
      !address.empty()) {
    return Fail(words, absl::StrCat(address, " is not ", expected,
                                    " (UNIMPLEMENTED: it does not serve that call)"));
  }
  return Fail(
      words,
      absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                   ": ", status.error_message()));
}

// A stub for the gateway --gateway names, once the address is one a peer can
// dial (INVALID_ARGUMENT naming the flag otherwise).
absl::StatusOr<std::unique_ptr<ced::v1::Gateway::Stub>> GatewayStub(const Flags& flags) {
  const std::string address = flags.Get("gateway");
  if (absl::Status s = services::CheckPeerAddress("gateway", address); !s.ok()) return s;
  return ced::v1::Gateway::NewStub(services::MakeChannel(address));
}

std::string ToJson(const google::protobuf::Message& message, bool all_fields = false) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = all_fields;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

void SetTimeout(grpc::ClientContext* ctx, int64_t timeout_ms) {
  if (timeout_ms > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
}

// A client subcommand's flags, parsed, with its --timeout-ms. `exit` is set
// when the command is done: 0 after printing --help, 2 after a usage error
// (printed, naming the flag).
struct ClientFlags {
  std::optional<Flags> flags;
  int64_t timeout_ms = 0;
  std::optional<int> exit;
};

ClientFlags ParseClientFlags(const char* words, const std::vector<FlagSpec>& specs,
                             const std::vector<std::string>& args, const char* usage,
                             const char* description) {
  ClientFlags out;
  auto flags = Flags::Parse(specs, args);
  if (!flags.ok()) {
    out.exit = Fail(words, std::string(flags.status().message()), 2);
    return out;
  }
  if (flags->help()) {
    std::printf("%s", FormatHelp(usage, description, specs).c_str());
    out.exit = 0;
    return out;
  }
  auto timeout = flags->GetInt("timeout-ms");
  if (!timeout.ok()) {
    out.exit = Fail(words, std::string(timeout.status().message()), 2);
    return out;
  }
  out.timeout_ms = *timeout;
  out.flags = *std::move(flags);
  return out;
}

// Takes every --stop value out of `args` (the flag parser keeps only the last
// of a repeated flag). Each value is a comma-separated list of C-escaped
// strings: "\n\n" is two newlines, "\x2c" a comma.
absl::Status ExtractStops(std::vector<std::string>* args, std::vector<std::string>* stops) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    std::string value;
    if (a == "--stop") {
      if (i + 1 >= args->size()) return absl::InvalidArgumentError("flag --stop needs a value");
      value = (*args)[++i];
    } else if (a.rfind("--stop=", 0) == 0) {
      value = a.substr(7);
    } else {
      rest.push_back(a);
      continue;
    }
    for (absl::string_view piece : absl::StrSplit(value, ',')) {
      std::string unescaped, error;
      if (!absl::CUnescape(piece, &unescaped, &error)) {
        return absl::InvalidArgumentError(absl::StrCat("--stop '", piece, "': ", error));
      }
      stops->push_back(unescaped);
    }
  }
  *args = std::move(rest);
  return absl::OkStatus();
}

absl::Status ParseIds(const std::string& text, google::protobuf::RepeatedField<int32_t>* ids) {
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: '", piece, "' is not an integer"));
    }
    ids->Add(id);
  }
  return absl::OkStatus();
}

constexpr char kGenerateWords[] = "client generate";

int Generate(const std::vector<std::string>& raw_args) {
  std::vector<FlagSpec> specs = {
      {"gateway", "127.0.0.1:50050", "gateway address"},
      {"prompt", "", "prompt text (or give it as the argument)"},
      {"prompt-ids", "", "prompt as token ids, e.g. 1,2,3 (instead of text)"},
      {"add-bos", "true", "prepend BOS to a text prompt (--add-bos=false to not)", true},
      {"max-tokens", "64", "tokens to generate at most (>= 1)"},
      {"temperature", "0", "0 = greedy"},
      {"top-k", "0", "0 = off"},
      {"top-p", "0", "nucleus mass in (0, 1]; 0 = off"},
      {"seed", "0", "sampling seed: same seed, same tokens"},
      {"stop", "", "stop strings, comma-separated, C escapes (\\n, \\x2c); repeatable"},
      {"stop-token-ids", "", "stop token ids, comma-separated"},
      {"ignore-eos", "", "keep generating after EOS", true},
      {"logprobs", "-1",
       "also ask for each token's log-probability and those of the N (0..20) most probable "
       "tokens of its step (in the --json messages); -1 = off"},
      {"replay-on", "", "prefill, decode or auto (empty: the server's default)"},
      {"replay-mode", "", "bounded or exact (empty: the server's default)"},
      {"request-id", "", "request id (empty: the gateway makes one)"},
      {"session-id", "",
       "session id: a routing hint that keeps a conversation's turns on the worker that holds "
       "its K/V (empty: none)"},
      {"timeout-ms", "0", "deadline for the whole request (0 = none)"},
      {"json", "", "print every response message as JSON instead of text", true},
  };
  for (FlagSpec& spec : SamplingFlagSpecs("1")) specs.push_back(std::move(spec));
  std::vector<std::string> args = raw_args;
  ced::v1::GenerateRequest request;
  std::vector<std::string> stops;
  if (absl::Status s = ExtractStops(&args, &stops); !s.ok()) {
    return Fail(kGenerateWords, std::string(s.message()), 2);
  }
  ClientFlags parsed =
      ParseClientFlags(kGenerateWords, specs, args, "ced client generate [flags] [PROMPT]",
                       "Streams a completion from a running gateway: the text on stdout, then "
                       "finish reason, usage, timings and placement on stderr.");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  std::string prompt = flags->Get("prompt");
  if (!flags->positional().empty()) {
    if (!prompt.empty() || flags->positional().size() > 1) {
      return Fail(kGenerateWords, "give the prompt once (--prompt or one argument)", 2);
    }
    prompt = flags->positional()[0];
  }
  request.set_prompt(prompt);
  request.set_add_bos(flags->GetBool("add-bos"));
  if (absl::Status s = ParseIds(flags->Get("prompt-ids"), request.mutable_prompt_token_ids());
      !s.ok()) {
    return Fail(kGenerateWords, std::string(s.message()), 2);
  }
  if (absl::Status s = ParseIds(flags->Get("stop-token-ids"), request.mutable_stop_token_ids());
      !s.ok()) {
    return Fail(kGenerateWords, std::string(s.message()), 2);
  }
  for (const std::string& stop : stops) request.add_stop(stop);
  auto max_tokens = flags->GetInt("max-tokens");
  auto sampling = ParseSamplingFlags(*flags);
  for (const absl::Status& s : {max_tokens.status(), sampling.status()}) {
    if (!s.ok()) return Fail(kGenerateWords, std::string(s.message()), 2);
  }
  // Range checks are the gateway's job: it answers INVALID_ARGUMENT naming the field.
  request.set_max_tokens(static_cast<int32_t>(*max_tokens));
  request.set_top_k(static_cast<int32_t>(sampling->top_k));
  request.set_seed(static_cast<uint64_t>(sampling->seed));
  request.set_temperature(static_cast<float>(sampling->temperature));
  request.set_top_p(static_cast<float>(sampling->top_p));
  request.set_presence_penalty(static_cast<float>(sampling->presence_penalty));
  request.set_frequency_penalty(static_cast<float>(sampling->frequency_penalty));
  request.set_repetition_penalty(static_cast<float>(sampling->repetition_penalty));
  for (const auto& [id, bias] : sampling->logit_bias) (*request.mutable_logit_bias())[id] = bias;
  request.set_ignore_eos(flags->GetBool("ignore-eos"));
  auto logprobs = flags->GetInt("logprobs");
  if (!logprobs.ok()) return Fail(kGenerateWords, std::string(logprobs.status().message()), 2);
  if (*logprobs >= 0) {  // the range is the gateway's to check
    request.set_logprobs(true);
    request.set_top_logprobs(static_cast<int32_t>(std::min<int64_t>(*logprobs, 1 << 30)));
  }
  request.set_request_id(flags->Get("request-id"));
  request.set_session_id(flags->Get("session-id"));
  const std::string replay_on = flags->Get("replay-on");
  if (replay_on == "prefill")
    request.set_replay_on(ced::v1::REPLAY_ON_PREFILL);
  else if (replay_on == "decode")
    request.set_replay_on(ced::v1::REPLAY_ON_DECODE);
  else if (replay_on == "auto")
    request.set_replay_on(ced::v1::REPLAY_ON_AUTO);
  else if (!replay_on.empty())
    return Fail(kGenerateWords, "--replay-on must be prefill, decode or auto", 2);
  const std::string mode = flags->Get("replay-mode");
  if (mode == "bounded")
    request.set_replay_mode(ced::v1::REPLAY_MODE_BOUNDED);
  else if (mode == "exact")
    request.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
  else if (!mode.empty())
    return Fail(kGenerateWords, "--replay-mode must be bounded or exact", 2);

  auto stub = GatewayStub(*flags);
  if (!stub.ok()) return Fail(kGenerateWords, std::string(stub.status().message()), 2);
  grpc::ClientContext ctx;
  SetTimeout(&ctx, parsed.timeout_ms);
  const bool json = flags->GetBool("json");
  const Clock::time_point start = Clock::now();
  Clock::time_point first = start, last = start;
  int tokens = 0;
  ced::v1::GenerateResponse response, final_message;
  auto reader = (*stub)->Generate(&ctx, request);
  while (reader->Read(&response)) {
    if (response.token_ids_size() > 0) {
      if (tokens == 0) first = Clock::now();
      last = Clock::now();
      tokens += response.token_ids_size();
    }
    if (json) {
      std::printf("%s\n", ToJson(response).c_str());
    } else {
      cli::PrintText(response.text());
    }
    std::fflush(stdout);
    if (response.finish_reason() != ced::v1::FINISH_REASON_UNSPECIFIED) final_message = response;
  }
  const grpc::Status status = reader->Finish();
  if (!json) std::fputs("\n", stdout);
  std::fflush(stdout);  // the text ends before the summary on stderr, also through a pipe
  if (!status.ok()) return RpcFail(kGenerateWords, status, flags->Get("gateway"), "a gateway");
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const ced::v1::Usage& usage = final_message.usage();
  const ced::v1::Timings& t = final_message.timings();
  const ced::v1::Placement& p = final_message.placement();
  const std::string finish = ced::v1::FinishReason_Name(final_message.finish_reason());
  std::fprintf(
      stderr,
      "[ced] %s%s | prompt %d tokens (cached %d), completion %d | TTFT %.1f ms, TPOT %.2f ms "
      "(client) | gateway: queue %.1f ms, prefill %.1f ms, transfer %.1f ms, TTFT %.1f ms, "
      "total %.1f ms | prefill %s, decode %s, replay on %s (%s, R=%d)%s | request %s\n",
      finish.c_str(),
      final_message.finish_detail().empty()
          ? ""
          : absl::StrCat(" (", absl::CEscape(final_message.finish_detail()), ")").c_str(),
      usage.prompt_tokens(), usage.cached_prompt_tokens(), usage.completion_tokens(),
      ms(first - start), tokens > 1 ? ms(last - first) / (tokens - 1) : 0.0, t.queue_ms(),
      t.prefill_ms(), t.transfer_ms(), t.ttft_ms(), t.total_ms(),
      p.local_prefill() ? "local" : p.prefill_worker_id().c_str(), p.decode_worker_id().c_str(),
      ced::v1::ReplayOn_Name(p.replay_on()).c_str(),
      ced::v1::ReplayMode_Name(p.replay_mode()).c_str(), p.replay_window(),
      p.migrations() == 0
          ? ""
          : absl::StrCat(" | moved ", p.migrations(), p.migrations() == 1 ? " time" : " times",
                         " off decode ", absl::StrJoin(p.migrated_from_decode_worker_ids(), ", "))
                .c_str(),
      final_message.request_id().c_str());
  return 0;
}

constexpr char kTokenizeWords[] = "client tokenize";

int Tokenize(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"gateway", "127.0.0.1:50050", "gateway address"},
      {"text", "", "text to tokenize (or give it as the argument)"},
      {"add-bos", "", "prepend BOS", true},
      {"timeout-ms", "10000", "deadline (0 = none)"},
  };
  ClientFlags parsed =
      ParseClientFlags(kTokenizeWords, specs, args, "ced client tokenize [flags] [TEXT]",
                       "Prints the token ids the gateway makes of a text.");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  ced::v1::TokenizeRequest request;
  request.set_text(flags->positional().empty() ? flags->Get("text") : flags->positional()[0]);
  request.set_add_bos(flags->GetBool("add-bos"));
  auto stub = GatewayStub(*flags);
  if (!stub.ok()) return Fail(kTokenizeWords, std::string(stub.status().message()), 2);
  grpc::ClientContext ctx;
  SetTimeout(&ctx, parsed.timeout_ms);
  ced::v1::TokenizeResponse response;
  const grpc::Status status = (*stub)->Tokenize(&ctx, request, &response);
  if (!status.ok()) return RpcFail(kTokenizeWords, status, flags->Get("gateway"), "a gateway");
  std::string out;
  for (int i = 0; i < response.token_ids_size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",", response.token_ids(i));
  }
  std::printf("%s\n", out.c_str());
  return 0;
}

constexpr char kModelInfoWords[] = "client model-info";

int ModelInfo(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"gateway", "127.0.0.1:50050", "gateway address"},
      {"timeout-ms", "10000", "deadline (0 = none)"},
  };
  ClientFlags parsed =
      ParseClientFlags(kModelInfoWords, specs, args, "ced client model-info [flags]",
                       "Prints the served model's shape, accounting and workers as "
                       "JSON.");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  auto stub = GatewayStub(*flags);
  if (!stub.ok()) return Fail(kModelInfoWords, std::string(stub.status().message()), 2);
  grpc::ClientContext ctx;
  SetTimeout(&ctx, parsed.timeout_ms);
  ced::v1::ModelInfoResponse response;
  const grpc::Status status = (*stub)->ModelInfo(&ctx, {}, &response);
  if (!status.ok()) return RpcFail(kModelInfoWords, status, flags->Get("gateway"), "a gateway");
  std::printf("%s\n", ToJson(response, /*all_fields=*/true).c_str());
  return 0;
}

constexpr char kDrainWords[] = "client drain";

int Drain(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"worker", "", "gRPC address of the prefill or decode worker to drain (required)"},
      {"reason", "", "logged by the worker"},
      {"timeout-ms", "10000", "deadline of the call (0 = none); the drain itself follows"},
  };
  ClientFlags parsed =
      ParseClientFlags(kDrainWords, specs, args, "ced client drain --worker ADDR [flags]",
                       "Asks a worker to drain, as SIGTERM does: it reports NOT_SERVING, "
                       "takes no new work, finishes its in-flight requests within its "
                       "--drain-timeout-ms and exits 0. An internal-tier call: with "
                       "mutual TLS pass the internal identity (--tls-cert, --tls-key, "
                       "--tls-ca).");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  const std::string worker = flags->Get("worker");
  if (worker.empty()) return Fail(kDrainWords, "--worker is required", 2);
  if (absl::Status s = services::CheckPeerAddress("worker", worker); !s.ok()) {
    return Fail(kDrainWords, std::string(s.message()), 2);
  }
  auto channel = services::MakeChannel(worker);
  ced::internal::DrainRequest request;
  request.set_reason(flags->Get("reason"));
  ced::internal::DrainResponse response;
  grpc::Status status;
  {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, parsed.timeout_ms);
    status = ced::internal::DecodeWorker::NewStub(channel)->Drain(&ctx, request, &response);
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {  // not a decode worker
    grpc::ClientContext ctx;
    SetTimeout(&ctx, parsed.timeout_ms);
    status = ced::internal::PrefillWorker::NewStub(channel)->Drain(&ctx, request, &response);
  }
  if (!status.ok()) return RpcFail(kDrainWords, status, worker, "a prefill or decode worker");
  std::printf("%s: draining\n", worker.c_str());
  return 0;
}

constexpr char kFlushCacheWords[] = "client flush-cache";

int FlushCache(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"worker", "", "gRPC address of the prefill or decode worker (required)"},
      {"reason", "", "logged by the worker"},
      {"wait-for-tiers", "false",
       "answer once the worker's KV tiers have written the flushed blocks (they can then be "
       "read back from the tiers)",
       true},
      {"timeout-ms", "60000", "deadline of the call (0 = none)"},
  };
  ClientFlags parsed = ParseClientFlags(
      kFlushCacheWords, specs, args, "ced client flush-cache --worker ADDR [flags]",
      "Empties a worker's prefix cache (its hot K/V cache): every "
      "cached block no running request holds is evicted as under "
      "memory pressure, down to the worker's KV tiers (host, disk) "
      "when it has them, and the router learns of it. Prints how many "
      "blocks went and how many running requests still hold. An "
      "internal-tier call: with mutual TLS pass the internal identity "
      "(--tls-cert, --tls-key, --tls-ca).");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  const std::string worker = flags->Get("worker");
  if (worker.empty()) return Fail(kFlushCacheWords, "--worker is required", 2);
  if (absl::Status s = services::CheckPeerAddress("worker", worker); !s.ok()) {
    return Fail(kFlushCacheWords, std::string(s.message()), 2);
  }
  auto channel = services::MakeChannel(worker);
  ced::internal::FlushCacheRequest request;
  request.set_reason(flags->Get("reason"));
  request.set_wait_for_tiers(flags->GetBool("wait-for-tiers"));
  ced::internal::FlushCacheResponse response;
  grpc::Status status;
  {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, parsed.timeout_ms);
    status = ced::internal::DecodeWorker::NewStub(channel)->FlushCache(&ctx, request, &response);
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {  // not a decode worker
    grpc::ClientContext ctx;
    SetTimeout(&ctx, parsed.timeout_ms);
    status = ced::internal::PrefillWorker::NewStub(channel)->FlushCache(&ctx, request, &response);
  }
  if (!status.ok()) return RpcFail(kFlushCacheWords, status, worker, "a prefill or decode worker");
  std::printf("%s: %lld cached blocks evicted, %lld held by running requests\n", worker.c_str(),
              static_cast<long long>(response.evicted_blocks()),
              static_cast<long long>(response.referenced_blocks()));
  return 0;
}

constexpr char kWorkersWords[] = "client workers";

int Workers(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"router", "127.0.0.1:50051",
       "router address (with --embed-router: the gateway's --router-listen)"},
      {"json", "",
       "print the router's ListWorkers answer as JSON (prefix-cache hash lists left out)", true},
      {"timeout-ms", "10000", "deadline (0 = none)"},
  };
  ClientFlags parsed =
      ParseClientFlags(kWorkersWords, specs, args, "ced client workers [flags]",
                       "Lists the workers a router knows: role, address, whether it "
                       "still reports (live), the age of its last report, and its load "
                       "as of that report (decode: sequences running and waiting, free "
                       "K/V blocks; prefill: prompt tokens queued and computing). An "
                       "internal-tier call: with mutual TLS pass the internal identity "
                       "(--tls-cert, --tls-key, --tls-ca).");
  if (parsed.exit.has_value()) return *parsed.exit;
  const std::optional<Flags>& flags = parsed.flags;
  const std::string router = flags->Get("router");
  if (absl::Status s = services::CheckPeerAddress("router", router); !s.ok()) {
    return Fail(kWorkersWords, std::string(s.message()), 2);
  }
  auto stub = ced::internal::Router::NewStub(services::MakeChannel(router));
  grpc::ClientContext ctx;
  SetTimeout(&ctx, parsed.timeout_ms);
  ced::internal::ListWorkersResponse response;
  const grpc::Status status = stub->ListWorkers(&ctx, {}, &response);
  if (!status.ok()) return RpcFail(kWorkersWords, status, router, "a router");
  if (flags->GetBool("json")) {
    for (ced::internal::WorkerStatus& w : *response.mutable_workers()) {
      w.mutable_load()->clear_prefix_cache();
      w.mutable_info()->clear_prefix_root_hash();
    }
    std::printf("%s\n", ToJson(response, /*all_fields=*/true).c_str());
    return 0;
  }
  std::printf("%-20s %-8s %-22s %-5s %8s  %s\n", "WORKER", "ROLE", "ADDRESS", "LIVE", "AGE ms",
              "LOAD");
  for (const ced::internal::WorkerStatus& w : response.workers()) {
    const ced::internal::LoadReport& l = w.load();
    const bool decode = w.info().role() == ced::internal::ROLE_DECODE;
    const std::string load =
        decode
            ? absl::StrCat("running ", l.running_sequences(), ", waiting ", l.waiting_sequences(),
                           ", K/V blocks free ", l.free_kv_blocks(), " of ", l.total_kv_blocks())
            : absl::StrCat("prompt tokens queued ", l.queued_prefill_tokens(), ", computing ",
                           l.inflight_prefill_tokens());
    std::printf("%-20s %-8s %-22s %-5s %8lld  %s\n", w.info().worker_id().c_str(),
                decode ? "decode" : "prefill", w.info().grpc_address().c_str(),
                w.live() ? "yes" : "no", static_cast<long long>(w.heartbeat_age_ms()),
                load.c_str());
  }
  if (response.workers_size() == 0)
    std::printf("(no worker has registered with %s)\n", router.c_str());
  return 0;
}

}  // namespace

void AddClientCommand(std::vector<Command>* commands) {
  commands->push_back({kGenerateWords, "stream a completion from a running gateway", Generate});
  commands->push_back({kTokenizeWords, "tokenize text with a running gateway", Tokenize});
  commands->push_back({kModelInfoWords, "show the model a running gateway serves", ModelInfo});
  commands->push_back({kDrainWords, "drain a prefill or decode worker (admin)", Drain});
  commands->push_back(
      {kFlushCacheWords, "empty a worker's prefix cache into its KV tiers (admin)", FlushCache});
  commands->push_back(
      {kWorkersWords, "list the workers a router knows, with their load (admin)", Workers});
}

}  // namespace ced::cli
