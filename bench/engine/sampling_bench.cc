// sampling_bench: what choosing one token costs on the CPU, per request and
// step, at several vocabulary sizes: greedy and sampled SampleToken, and the
// log-probabilities a request may ask for (ComputeLogprobs, SampleStep with
// logprobs). The sampler is scalar C++ (no kernel variant): it runs on the
// worker's scheduler thread for every sequence of a batch step. Markdown on
// stdout, progress on stderr.
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "engine/common/status.h"
#include "engine/sampling/sampler.h"

namespace ced::bench {
namespace {

struct Args {
  std::string vocabs = "260,32000,129280";
  int calls = 200;
  int rounds = 7;
};

absl::Status Main(int argc, char** argv) {
  Args a;
  FlagSet f;
  f.String("vocabs", &a.vocabs,
           "comma list of vocabulary sizes (260: tiny/small, 129280: "
           "DeepSeek-V3's)");
  f.Int("calls", &a.calls, "calls per timed round");
  f.Int("rounds", &a.rounds, "timed rounds per case (after one warm-up round); median reported");
  RETURN_IF_ERROR(f.Parse(argc, argv));
  if (f.help_requested()) {
    std::printf("%s", f.Help("sampling_bench [flags]",
                             "Per-step cost of the token sampler and of log-probabilities at "
                             "each of --vocabs. Markdown on stdout.")
                          .c_str());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int> vocabs, ParsePositiveInts("vocabs", a.vocabs));
  if (a.calls < 1) return absl::InvalidArgumentError("--calls: must be >= 1");
  if (a.rounds < 1) return absl::InvalidArgumentError("--rounds: must be >= 1");

  SamplingParams greedy;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 7;
  SamplingParams nucleus = sampled;
  nucleus.top_p = 0.9f;
  struct Case {
    const char* name;
    std::function<float(const std::vector<float>&, int)> run;  // returns something to keep
  };
  std::vector<float> scratch;
  const std::vector<Case> cases = {
      {"greedy SampleToken",
       [&](const std::vector<float>& l, int step) {
         return static_cast<float>(SampleToken(l.data(), static_cast<int>(l.size()), greedy, step));
       }},
      {"temperature 0.8 SampleToken",
       [&](const std::vector<float>& l, int step) {
         return static_cast<float>(
             SampleToken(l.data(), static_cast<int>(l.size()), sampled, step));
       }},
      {"temperature 0.8, top_p 0.9 SampleToken",
       [&](const std::vector<float>& l, int step) {
         return static_cast<float>(
             SampleToken(l.data(), static_cast<int>(l.size()), nucleus, step));
       }},
      {"ComputeLogprobs, token only",
       [&](const std::vector<float>& l, int step) {
         return ComputeLogprobs(l.data(), static_cast<int>(l.size()), step, 0).token.logprob;
       }},
      {"ComputeLogprobs, top 5",
       [&](const std::vector<float>& l, int step) {
         return ComputeLogprobs(l.data(), static_cast<int>(l.size()), step, 5).token.logprob;
       }},
      {"ComputeLogprobs, top 20",
       [&](const std::vector<float>& l, int step) {
         return ComputeLogprobs(l.data(), static_cast<int>(l.size()), step, 20).token.logprob;
       }},
  };

  std::string out = "# Token sampling and log-probabilities, per step\n\n";
  absl::StrAppend(&out, "- Command: `", CommandLine(argc, argv, {}), "`\n");
  absl::StrAppend(&out, "- CPU: ", CpuModelName(), "; load average at start: ", LoadAverage(),
                  "\n");
  absl::StrAppend(&out,
                  "- One thread, scalar C++ (the sampler has no kernel variants); logits drawn "
                  "from N(0, 2); median of ",
                  a.rounds, " rounds of ", a.calls, " calls, microseconds per call\n\n");
  absl::StrAppend(&out, "| case |");
  for (int v : vocabs) absl::StrAppend(&out, " vocab ", v, " |");
  absl::StrAppend(&out, "\n|---|");
  for (size_t i = 0; i < vocabs.size(); ++i) absl::StrAppend(&out, "---:|");
  absl::StrAppend(&out, "\n");
  std::vector<std::vector<float>> logits;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int v : vocabs) {
    std::vector<float> l(v);
    for (float& x : l) x = dist(rng);
    logits.push_back(std::move(l));
  }
  float keep = 0;
  for (const Case& c : cases) {
    absl::StrAppend(&out, "| ", c.name, " |");
    for (size_t vi = 0; vi < vocabs.size(); ++vi) {
      std::fprintf(stderr, "%s, vocab %d\n", c.name, vocabs[vi]);
      std::vector<double> per_call;
      for (int round = 0; round <= a.rounds; ++round) {
        const double t0 = NowSeconds();
        for (int i = 0; i < a.calls; ++i) keep += c.run(logits[vi], i % vocabs[vi]);
        const double us = (NowSeconds() - t0) * 1e6 / a.calls;
        if (round > 0) per_call.push_back(us);  // round 0 warms up
      }
      absl::StrAppend(&out, absl::StrFormat(" %.1f |", Percentile(per_call, 50)));
    }
    absl::StrAppend(&out, "\n");
  }
  std::fprintf(stderr, "(checksum %g)\n", keep);
  std::printf("%s", out.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  const absl::Status s = ced::bench::Main(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "sampling_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
