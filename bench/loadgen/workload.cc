#include "bench/loadgen/workload.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace ced::loadgen {
namespace {

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A stream per (seed, index, purpose), independent of the trace's stream.
uint64_t StreamSeed(uint64_t seed, int64_t index, uint64_t purpose) {
  uint64_t s = seed ^ (purpose * 0xd1b54a32d192ed03ULL);
  SplitMix(&s);
  s ^= static_cast<uint64_t>(index) * 0x8cb92ba72f3d8dd7ULL;
  return SplitMix(&s);
}

constexpr uint64_t kTokens = 1, kPromptChoice = 2, kSamplingSeed = 3;

}  // namespace

std::vector<int32_t> RandomPromptTokens(uint64_t seed, int64_t index, int64_t length) {
  uint64_t state = StreamSeed(seed, index, kTokens);
  std::vector<int32_t> tokens(static_cast<size_t>(std::max<int64_t>(length, 0)));
  for (int32_t& t : tokens) t = static_cast<int32_t>(SplitMix(&state) % kPromptTokenRange);
  return tokens;
}

absl::StatusOr<std::vector<std::string>> ReadPromptFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("prompt file ", path, ": cannot open"));
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("prompt file ", path, ": read error"));
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt file ", path, ": no non-empty line"));
  }
  return prompts;
}

absl::StatusOr<Workload> Workload::Create(const WorkloadOptions& options) {
  Workload w(options);
  RETURN_IF_ERROR(w.Extend(64));
  return w;
}

absl::Status Workload::Extend(int64_t min_size) {
  sim::WorkloadOptions o;
  o.input_mean = options_.input_mean;
  o.input_cv = options_.input_cv;
  o.output_mean = options_.output_mean;
  o.output_cv = options_.output_cv;
  o.rate = options_.rate;
  o.seed = options_.seed;
  o.num_requests =
      static_cast<int>(std::max<int64_t>({min_size, 2 * static_cast<int64_t>(specs_.size()), 64}));
  ASSIGN_OR_RETURN(specs_, sim::MakeWorkload(o));
  return absl::OkStatus();
}

PlannedRequest Workload::Get(int64_t index) {
  CED_CHECK(index >= 0);
  if (index >= static_cast<int64_t>(specs_.size())) {
    // The options were validated by Create(), so extending cannot fail.
    const absl::Status s = Extend(index + 1);
    CED_CHECK(s.ok());
  }
  const sim::RequestSpec& spec = specs_[static_cast<size_t>(index)];
  PlannedRequest r;
  r.index = index;
  r.arrival_s = spec.arrival_s;
  r.output_tokens = spec.output_tokens;
  uint64_t sampling = StreamSeed(options_.seed, index, kSamplingSeed);
  r.seed = SplitMix(&sampling);
  if (options_.prompts.empty()) {
    r.prompt_tokens = spec.prompt_tokens;
    r.prompt_token_ids = RandomPromptTokens(options_.seed, index, spec.prompt_tokens);
  } else {
    uint64_t choice = StreamSeed(options_.seed, index, kPromptChoice);
    r.prompt_text = options_.prompts[SplitMix(&choice) % options_.prompts.size()];
    r.prompt_tokens = static_cast<int64_t>(r.prompt_text.size());
  }
  return r;
}

int64_t CountAboveContext(const WorkloadOptions& options, int64_t n, int64_t context) {
  auto workload = Workload::Create(options);
  if (!workload.ok()) return 0;
  int64_t over = 0;
  for (int64_t i = 0; i < n; ++i) {
    const PlannedRequest r = workload->Get(i);
    if (r.prompt_tokens + r.output_tokens > context) ++over;
  }
  return over;
}

}  // namespace ced::loadgen
