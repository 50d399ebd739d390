// `ced generate`: prefill + decode of one prompt in this process.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"
#include "services/cli/terminal_text.h"

namespace ced::cli {
namespace {

constexpr char kWords[] = "generate";

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// "1,2,3" -> ids; InvalidArgument naming the first piece that is not an integer.
absl::Status ParsePromptIds(const std::string& text, std::vector<int32_t>* ids) {
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: '", piece, "' is not an integer"));
    }
    ids->push_back(id);
  }
  if (ids->empty()) return absl::InvalidArgumentError("--prompt-ids: no ids");
  return absl::OkStatus();
}

// Writes {"prompt_ids": [...], "tokens": [...], "logits": [[...], ...]}:
// logits[i] (vocab_size floats, %.9g round-trips f32; null where not finite)
// is the distribution tokens[i] was sampled from, i.e. the logits of position
// prompt + i - 1.
absl::Status WriteLogitsDump(const std::string& path, const std::vector<int32_t>& prompt,
                             const std::vector<int>& tokens,
                             const std::vector<std::vector<float>>& logits) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path));
  const auto ids = [f](const auto& v) {
    for (size_t i = 0; i < v.size(); ++i) std::fprintf(f, i ? ",%d" : "%d", static_cast<int>(v[i]));
  };
  std::fputs("{\"prompt_ids\": [", f);
  ids(prompt);
  std::fputs("],\n \"tokens\": [", f);
  ids(tokens);
  std::fputs("],\n \"logits\": [", f);
  for (size_t r = 0; r < logits.size(); ++r) {
    std::fputs(r ? ",\n  [" : "\n  [", f);
    for (size_t i = 0; i < logits[r].size(); ++i) {
      if (i) std::fputc(',', f);
      if (std::isfinite(logits[r][i])) {
        std::fprintf(f, "%.9g", logits[r][i]);
      } else {
        std::fputs("null", f);
      }
    }
    std::fputs("]", f);
  }
  std::fputs("]}\n", f);
  if (std::fclose(f) != 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

int Generate(const std::vector<std::string>& args) {
  std::vector<FlagSpec> specs = {
      {"gateway", "",
       "send the request to a running gateway (HOST:PORT) instead of running "
       "the model here"},
      {"model", "", "model directory (config.json + model.safetensors)"},
      {"prompt", "The quick brown fox",
       "prompt text, encoded with the model's tokenizer.json (bytes when it has none)"},
      {"prompt-ids", "", "prompt as token ids, e.g. 256,72,105 (instead of text; no BOS)"},
      {"max-tokens", "32", "tokens to generate at most"},
      {"temperature", "0", "0 = greedy"},
      {"top-k", "0", "0 = off"},
      {"top-p", "1", "nucleus mass in (0, 1]"},
      {"seed", "0", "sampling seed: same seed, same tokens"},
      {"replay", "bounded", "replay length: bounded (R from config) or exact"},
      {"replay-on", "prefill", "where the replay runs: prefill or decode (deferred)"},
      {"kv-format", "", "override the cache format: f32, bf16, fp8_e4m3, fp4_e2m1"},
      {"device", "cpu", "compute backend"},
      {"chunk", "256", "prefill chunk size in tokens"},
      {"ignore-eos", "", "keep generating after EOS", true},
      {"quiet", "", "print only the generated text", true},
      {"dump-logits", "",
       "write JSON {prompt_ids, tokens, logits} to FILE: the logits each generated token was "
       "sampled from (one row per token)"},
  };
  for (FlagSpec& spec : SamplingFlagSpecs("1")) specs.push_back(std::move(spec));
  auto flags = Flags::Parse(specs, args);
  if (!flags.ok()) return Fail(kWords, std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", FormatHelp("ced generate (--model DIR | --gateway HOST:PORT) [TEXT]",
                                 "Runs CED prefill (encoder, decoder K/V projections, replay) and "
                                 "decode for one prompt in this process and streams the text; "
                                 "with --gateway, asks a running cluster instead and prints "
                                 "TTFT/TPOT.",
                                 specs)
                          .c_str());
    return 0;
  }
  const std::string prompt_text =
      flags->positional().empty() ? flags->Get("prompt") : flags->positional()[0];
  if (!flags->Get("gateway").empty()) {
    if (!flags->Get("dump-logits").empty()) {
      return Fail(kWords, "--dump-logits needs --model (logits do not leave the cluster)", 2);
    }
    std::vector<std::string> client = {"--gateway", flags->Get("gateway")};
    if (flags->Get("prompt-ids").empty()) {
      client.insert(client.end(), {"--prompt", prompt_text});
    } else {
      client.insert(client.end(), {"--prompt-ids", flags->Get("prompt-ids")});
    }
    for (const char* name :
         {"max-tokens", "temperature", "top-k", "top-p", "seed", "presence-penalty",
          "frequency-penalty", "repetition-penalty", "logit-bias"}) {
      client.push_back(std::string("--") + name);
      client.push_back(flags->Get(name));
    }
    if (flags->Has("replay-on")) client.insert(client.end(), {"--replay-on", flags->Get("replay-on")});
    if (flags->Has("replay")) client.insert(client.end(), {"--replay-mode", flags->Get("replay")});
    if (flags->GetBool("ignore-eos")) client.push_back("--ignore-eos");
    return RunCommand("client generate", client);
  }
  if (flags->Get("model").empty()) return Fail(kWords, "--model is required", 2);
  auto max_tokens = flags->GetInt("max-tokens");
  auto chunk = flags->GetInt("chunk");
  auto sampling = ParseSamplingFlags(*flags);
  for (const absl::Status& s : {max_tokens.status(), chunk.status(), sampling.status()}) {
    if (!s.ok()) return Fail(kWords, std::string(s.message()), 2);
  }
  if (*max_tokens < 1) return Fail(kWords, "--max-tokens must be at least 1", 2);
  if (*chunk < 1) return Fail(kWords, absl::StrCat("--chunk must be at least 1, got ", *chunk), 2);
  SamplingParams sp;
  sp.temperature = static_cast<float>(sampling->temperature);
  sp.top_k = static_cast<int>(sampling->top_k);
  sp.top_p = static_cast<float>(sampling->top_p);
  sp.seed = static_cast<uint64_t>(sampling->seed);
  sp.presence_penalty = static_cast<float>(sampling->presence_penalty);
  sp.frequency_penalty = static_cast<float>(sampling->frequency_penalty);
  sp.repetition_penalty = static_cast<float>(sampling->repetition_penalty);
  sp.logit_bias = std::move(sampling->logit_bias);
  if (absl::Status s = ValidateSamplingParams(sp); !s.ok()) {
    // Named by the flag that set the field ("top_p must be ..." -> "--top-p must be ...").
    std::string message(s.message());
    for (const auto& [field, flag] : {std::pair<std::string, std::string>{"top_p", "--top-p"},
                                      {"top_k", "--top-k"},
                                      {"temperature", "--temperature"},
                                      {"presence_penalty", "--presence-penalty"},
                                      {"frequency_penalty", "--frequency-penalty"},
                                      {"repetition_penalty", "--repetition-penalty"},
                                      {"logit_bias", "--logit-bias"}}) {
      if (absl::StartsWith(message, field)) message = flag + message.substr(field.size());
    }
    return Fail(kWords, message, 2);
  }
  PrefillOptions po;
  if (!ParseReplayMode(flags->Get("replay"), &po.replay)) {
    return Fail(kWords, "--replay must be bounded or exact", 2);
  }
  const std::string replay_on = flags->Get("replay-on");
  if (replay_on != "prefill" && replay_on != "decode") {
    return Fail(kWords, "--replay-on must be prefill or decode", 2);
  }
  po.defer_replay = replay_on == "decode";
  po.chunk_tokens = static_cast<int>(*chunk);

  EngineOptions eo;
  eo.model_dir = flags->Get("model");
  eo.device = flags->Get("device");
  if (!flags->Get("kv-format").empty()) {
    KvFormat f;
    if (!kernels::ParseKvFormat(flags->Get("kv-format"), &f)) {
      return Fail(kWords, "--kv-format must be f32, bf16, fp8_e4m3 or fp4_e2m1", 2);
    }
    eo.kv_format = f;
  }
  // Checked before the model loads and runs, not when the logits are written.
  if (absl::Status s = CheckWritable("dump-logits", flags->Get("dump-logits")); !s.ok()) {
    return Fail(kWords, std::string(s.message()), 2);
  }
  const auto t_load = std::chrono::steady_clock::now();
  auto engine = Engine::Create(eo);
  if (!engine.ok()) return Fail(kWords, std::string(engine.status().message()));
  const ModelConfig& config = (*engine)->config();
  auto tokenizer = CreateTokenizer(eo.model_dir, config.vocab_size);
  if (!tokenizer.ok()) return Fail(kWords, std::string(tokenizer.status().message()));
  std::vector<int32_t> prompt;
  if (!flags->Get("prompt-ids").empty()) {
    if (absl::Status s = ParsePromptIds(flags->Get("prompt-ids"), &prompt); !s.ok()) {
      return Fail(kWords, std::string(s.message()), 2);
    }
    if (absl::Status s = (*tokenizer)->ValidateIds(std::vector<int>(prompt.begin(), prompt.end()));
        !s.ok()) {
      return Fail(kWords, std::string(s.message()), 2);
    }
  } else {
    std::vector<int> ids = (*tokenizer)->Encode(prompt_text, /*add_bos=*/true);
    prompt.assign(ids.begin(), ids.end());
  }
  const std::string dump_path = flags->Get("dump-logits");
  std::vector<int> dump_tokens;
  std::vector<std::vector<float>> dump_logits;
  const int capacity = static_cast<int>(prompt.size() + *max_tokens);
  if (capacity > config.max_position) {
    return Fail(kWords, absl::StrCat("prompt + max-tokens = ", capacity,
                                     " exceeds max_position ", config.max_position), 2);
  }
  auto seq = (*engine)->CreateSequence(capacity);
  if (!seq.ok()) return Fail(kWords, std::string(seq.status().message()));

  const auto t0 = std::chrono::steady_clock::now();
  auto pre = (*engine)->Prefill(*seq, prompt, po);
  if (!pre.ok()) return Fail(kWords, std::string(pre.status().message()));
  std::vector<float> logits = pre->logits;
  if (!pre->replay_done) {
    auto r = (*engine)->Replay(*seq);
    if (!r.ok()) return Fail(kWords, std::string(r.status().message()));
    logits = *std::move(r);
  }
  const auto t_first = std::chrono::steady_clock::now();
  StopConditions stop;
  stop.max_tokens = static_cast<int>(*max_tokens);
  if (!flags->GetBool("ignore-eos")) stop.eos_token_id = (*tokenizer)->eos_id();
  IncrementalDecoder text(tokenizer->get());
  int generated = 0;
  SamplingHistory history(prompt, sp);  // for the penalties
  FinishReason finish = FinishReason::kNone;
  while (true) {
    const int token = SampleStep(logits.data(), config.vocab_size, sp, history, generated, nullptr);
    history.Add(token);
    if (!dump_path.empty()) {
      dump_tokens.push_back(token);
      dump_logits.emplace_back(logits.begin(), logits.begin() + config.vocab_size);
    }
    ++generated;
    cli::PrintText(text.Feed(token));
    std::fflush(stdout);
    finish = CheckStop(stop, token, generated);
    if (finish != FinishReason::kNone) break;
    DecodeInput in{*seq, token};
    auto next = (*engine)->Decode(absl::MakeConstSpan(&in, 1));
    if (!next.ok()) return Fail(kWords, std::string(next.status().message()));
    logits = *std::move(next);
  }
  cli::PrintText(text.Flush());
  std::fputs("\n", stdout);
  std::fflush(stdout);  // the text ends before the summary on stderr, also through a pipe
  const auto t_end = std::chrono::steady_clock::now();
  (void)(*engine)->ReleaseSequence(*seq);
  if (!dump_path.empty()) {
    if (absl::Status s = WriteLogitsDump(dump_path, prompt, dump_tokens, dump_logits); !s.ok()) {
      return Fail(kWords, std::string(s.message()));
    }
  }
  if (!flags->GetBool("quiet")) {
    std::fprintf(stderr,
                 "[ced] model load %.0f ms | prompt %zu tokens (replay %s on %s, s=%d) | "
                 "TTFT %.1f ms | %d tokens, %.1f tokens/s decode | finish: %s\n",
                 Ms(t_load, t0), prompt.size(), ReplayModeName(po.replay), replay_on.c_str(),
                 pre->replay_start, Ms(t0, t_first), generated,
                 generated > 1 ? (generated - 1) * 1000.0 / Ms(t_first, t_end) : 0.0,
                 FinishReasonName(finish));
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(std::vector<Command>* commands) {
  commands->push_back({kWords, "generate text from a prompt in this process", Generate});
}

}  // namespace ced::cli
