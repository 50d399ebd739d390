// `ced generate`: prefill + decode of one prompt in this process.
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"

namespace ced::cli {
namespace {

constexpr char kWords[] = "generate";

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int Generate(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"gateway", "", "send the request to a running gateway (HOST:PORT) instead of running "
                      "the model here"},
      {"model", "", "model directory (config.json + model.safetensors)"},
      {"prompt", "The quick brown fox", "prompt text (byte tokenizer)"},
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
  };
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
    std::vector<std::string> client = {"--gateway", flags->Get("gateway"), "--prompt",
                                       prompt_text};
    for (const char* name : {"max-tokens", "temperature", "top-k", "top-p", "seed"}) {
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
  auto top_k = flags->GetInt("top-k");
  auto seed = flags->GetInt("seed");
  auto temperature = flags->GetDouble("temperature");
  auto top_p = flags->GetDouble("top-p");
  auto chunk = flags->GetInt("chunk");
  for (const absl::Status& s : {max_tokens.status(), top_k.status(), seed.status(),
                                temperature.status(), top_p.status(), chunk.status()}) {
    if (!s.ok()) return Fail(kWords, std::string(s.message()), 2);
  }
  if (*max_tokens < 1) return Fail(kWords, "--max-tokens must be at least 1", 2);
  SamplingParams sp;
  sp.temperature = static_cast<float>(*temperature);
  sp.top_k = static_cast<int>(*top_k);
  sp.top_p = static_cast<float>(*top_p);
  sp.seed = static_cast<uint64_t>(*seed);
  if (absl::Status s = ValidateSamplingParams(sp); !s.ok()) {
    return Fail(kWords, std::string(s.message()), 2);
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
  const auto t_load = std::chrono::steady_clock::now();
  auto engine = Engine::Create(eo);
  if (!engine.ok()) return Fail(kWords, std::string(engine.status().message()));
  const ModelConfig& config = (*engine)->config();
  auto tokenizer = CreateTokenizer(eo.model_dir, config.vocab_size);
  if (!tokenizer.ok()) return Fail(kWords, std::string(tokenizer.status().message()));
  std::vector<int> ids = (*tokenizer)->Encode(prompt_text, /*add_bos=*/true);
  std::vector<int32_t> prompt(ids.begin(), ids.end());
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
  FinishReason finish = FinishReason::kNone;
  while (true) {
    const int token = SampleToken(logits.data(), config.vocab_size, sp, generated);
    ++generated;
    std::fputs(text.Feed(token).c_str(), stdout);
    std::fflush(stdout);
    finish = CheckStop(stop, token, generated);
    if (finish != FinishReason::kNone) break;
    DecodeInput in{*seq, token};
    auto next = (*engine)->Decode(absl::MakeConstSpan(&in, 1));
    if (!next.ok()) return Fail(kWords, std::string(next.status().message()));
    logits = *std::move(next);
  }
  std::fputs(text.Flush().c_str(), stdout);
  std::fputs("\n", stdout);
  const auto t_end = std::chrono::steady_clock::now();
  (void)(*engine)->ReleaseSequence(*seq);
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
