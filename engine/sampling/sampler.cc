#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cephes_exp.h"

namespace ced {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Candidate {
  float weight;  // unnormalized probability
  int id;
};

// Total order: more probable first, ties to the lower id.
bool MoreProbable(const Candidate& a, const Candidate& b) {
  return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
}

// The passes over the whole vocabulary run 16 floats at a time in four
// 16-byte GCC vectors: native on every x86-64 (SSE2) and AArch64 (NEON), and
// the same results whatever the CPU (the sampler has no kernel variants: a
// token must be chosen alike on every worker).
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The largest logit that is not NaN; -inf when there is none.
float MaxLogit(const float* x, int n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  F4 m[4] = {{ninf, ninf, ninf, ninf},
             {ninf, ninf, ninf, ninf},
             {ninf, ninf, ninf, ninf},
             {ninf, ninf, ninf, ninf}};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 4; ++k) {
      const F4 v = Load4(x + i + 4 * k);
      m[k] = v > m[k] ? v : m[k];  // NaN compares false: skipped
    }
  }
  float best = ninf;
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 4; ++j) best = m[k][j] > best ? m[k][j] : best;
  }
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

// Lowest id among the largest logits; -1 when every logit is NaN.
int Argmax(const float* logits, int n) {
  const float best = MaxLogit(logits, n);
  for (int i = 0; i < n; ++i) {
    if (logits[i] == best) return i;  // -inf too, when nothing is larger
  }
  return -1;
}

// exp(x) for x <= 0 (the kernels' Cephes expf, about 1 ulp of std::exp); 0
// for x < -87 (where expf reaches the denormals) and for NaN.
F4 ExpNonPositive4(F4 x) {
  const F4 lo = {-87.0f, -87.0f, -87.0f, -87.0f};
  const auto in_range = x >= lo;  // false for NaN
  return in_range ? kernels::CephesExp<F4, I4>(x) : F4{};
}

// out[i] = exp((x[i] - shift) * scale) (0 for NaN), for x[i] <= shift;
// returns their sum, accumulated in double per 16 values.
double ExpShifted(const float* x, int n, float shift, float scale, float* out) {
  double total = 0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    F4 sum = {};
    for (int k = 0; k < 4; ++k) {
      const F4 e = ExpNonPositive4((Load4(x + i + 4 * k) - shift) * scale);
      if (out != nullptr) std::memcpy(out + i + 4 * k, &e, sizeof(e));
      sum += e;
    }
    total += static_cast<double>(sum[0]) + sum[1] + sum[2] + sum[3];
  }
  if (i < n) {
    float tail[16] = {}, exps[16];
    const int left = n - i;
    for (int j = 0; j < 16; ++j) tail[j] = j < left ? x[i + j] : shift - 1000.0f;
    for (int k = 0; k < 4; ++k) {
      const F4 e = ExpNonPositive4((Load4(tail + 4 * k) - shift) * scale);
      std::memcpy(exps + 4 * k, &e, sizeof(e));
    }
    for (int j = 0; j < left; ++j) {
      if (out != nullptr) out[i + j] = exps[j];
      total += exps[j];
    }
  }
  return total;
}

double Mass(const Candidate* begin, const Candidate* end) {
  double total = 0;
  for (const Candidate* x = begin; x != end; ++x) total += x->weight;
  return total;
}

uint32_t WeightBits(float w) {
  uint32_t u;
  std::memcpy(&u, &w, sizeof(u));
  return u;  // monotonic in w for w >= 0
}

// The least probable member of the nucleus of `c` (any order): the smallest
// most-probable prefix with mass >= threshold. Large lists are first
// bucketed by the top 16 bits of the weight (about 1% wide) so that only the
// bucket holding the cutoff is sorted: linear time.
Candidate NucleusCutoff(std::vector<Candidate>* c, double threshold) {
  double acc = 0;  // mass more probable than the candidates left in *c
  if (c->size() > 4096) {
    std::vector<double> mass(1 << 16, 0.0);
    for (const Candidate& x : *c) mass[WeightBits(x.weight) >> 16] += x.weight;
    uint32_t bucket = 0;
    bool found = false;
    for (uint32_t b = mass.size(); b-- > 0;) {
      if (mass[b] == 0) continue;
      if (acc + mass[b] >= threshold) {
        bucket = b;
        found = true;
        break;
      }
      acc += mass[b];
    }
    // Rounding kept the mass just short: keep everything.
    if (!found) return *std::max_element(c->begin(), c->end(), MoreProbable);
    // Keep the cutoff bucket, in its current order (often already sorted:
    // ties in id order).
    c->erase(std::remove_if(
                 c->begin(), c->end(),
                 [bucket](const Candidate& x) { return (WeightBits(x.weight) >> 16) != bucket; }),
             c->end());
  }
  if (!std::is_sorted(c->begin(), c->end(), MoreProbable)) {
    std::sort(c->begin(), c->end(), MoreProbable);
  }
  for (const Candidate& x : *c) {
    acc += x.weight;
    if (acc >= threshold) return x;
  }
  return c->back();  // rounding kept the mass just short: keep everything
}

// Applies top-k, then top-p, to the weights `w`. Returns false when nothing is
// filtered out; otherwise sets `cutoff`: the kept tokens are those at least as
// probable as it in the MoreProbable order (a set independent of how it was
// found).
bool FindCutoff(const std::vector<float>& w, const SamplingParams& p, Candidate* cutoff) {
  const int vocab_size = static_cast<int>(w.size());
  const bool top_k = p.top_k > 0 && p.top_k < vocab_size;
  const bool top_p = p.top_p < 1.0f;
  if (!top_k && !top_p) return false;
  double total = 0;
  float floor = 0.0f;
  if (!top_k) {
    // The nucleus lies within {w >= floor}: the rest holds less than
    // (1 - top_p) of the mass, so what is above the floor reaches top_p.
    for (float x : w) total += x;
    floor = static_cast<float>((1.0 - p.top_p) * total / vocab_size * (1.0 - 1e-6));
  }
  std::vector<Candidate> c;
  for (int i = 0; i < vocab_size; ++i) {
    if (w[i] > 0 && w[i] >= floor) c.push_back({w[i], i});
  }
  bool filtered = false;
  if (top_k) {
    if (static_cast<size_t>(p.top_k) < c.size()) {
      std::nth_element(c.begin(), c.begin() + (p.top_k - 1), c.end(), MoreProbable);
      c.resize(p.top_k);
      *cutoff = c.back();
      filtered = true;
    }
    total = Mass(c.data(), c.data() + c.size());
  }
  if (top_p) {
    *cutoff = NucleusCutoff(&c, static_cast<double>(p.top_p) * total);
    filtered = true;
  }
  return filtered;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
        {"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -kMaxPenalty && value <= kMaxPenalty)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-", kMaxPenalty, ", ",
                                                     kMaxPenalty, "] (0 = off), got ", value));
    }
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty must be finite and > 0 (1 = off), got ", p.repetition_penalty));
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", p.top_logprobs));
  }
  if (p.top_logprobs > 0 && !p.logprobs) {
    return absl::InvalidArgumentError("top_logprobs: needs logprobs");
  }
  if (p.logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: at most ", kMaxLogitBias, " entries, got ", p.logit_bias.size()));
  }
  absl::flat_hash_set<int32_t> biased;
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || !biased.insert(token).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias[", token, "]: ", token < 0 ? "not a token id" : "given twice"));
    }
    if (!(bias >= -kMaxBias && bias <= kMaxBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias[", token, "] must be in [-",
                                                     kMaxBias, ", ", kMaxBias, "], got ", bias));
    }
  }
  return absl::OkStatus();
}

SamplingHistory::SamplingHistory(absl::Span<const int32_t> prompt, const SamplingParams& params)
    : count_(params.has_penalties()), seen_(params.repetition_penalty != 1.0f) {
  if (seen_) tokens_.insert(prompt.begin(), prompt.end());
  if (count_) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(params.step_offset, prompt.size()));
    for (int32_t token : prompt.subspan(prompt.size() - n)) ++counts_[token];
  }
}

void SamplingHistory::Add(int32_t token) {
  if (count_) ++counts_[token];
  if (seen_) tokens_.insert(token);
}

int SamplingHistory::count(int32_t token) const {
  const auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second;
}

void SamplingHistory::Apply(float* logits, int vocab_size, const SamplingParams& params) const {
  auto in_vocab = [vocab_size](int32_t t) { return t >= 0 && t < vocab_size; };
  for (const auto& [token, bias] : params.logit_bias) {
    if (in_vocab(token)) logits[token] += bias;
  }
  if (params.repetition_penalty != 1.0f) {
    const float p = params.repetition_penalty;
    for (int32_t token : tokens_) {
      if (!in_vocab(token)) continue;
      float& l = logits[token];
      l = l > 0 ? l / p : l * p;
    }
  }
  if (params.has_penalties()) {
    for (const auto& [token, count] : counts_) {
      if (!in_vocab(token)) continue;
      logits[token] -=
          static_cast<float>(count) * params.frequency_penalty + params.presence_penalty;
    }
  }
}

double SamplingUniform(uint64_t seed, uint64_t step) {
  const uint64_t z = SplitMix64(SplitMix64(seed) ^ SplitMix64(~step));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int SampleToken(const float* logits, int vocab_size, const SamplingParams& p, uint64_t step) {
  if (vocab_size <= 0) return 0;
  const int best = Argmax(logits, vocab_size);
  if (best < 0) return 0;
  const float max_logit = logits[best];
  if (max_logit == -std::numeric_limits<float>::infinity()) return 0;
  if (p.temperature == 0.0f || p.top_k == 1) return best;

  // Unnormalized probabilities; 0 for NaN, -inf and underflow.
  // Unnormalized probabilities in a buffer kept per thread: a fresh one of a
  // large vocabulary's size would be mapped and faulted in on every call.
  thread_local std::vector<float> weights;
  weights.resize(vocab_size);  // every entry is written below
  std::vector<float>& w = weights;
  double mass = 0;              // of w, when computed by ExpShifted
  if (std::isinf(max_logit)) {  // +inf: only the +inf logits can be chosen
    for (int i = 0; i < vocab_size; ++i) w[i] = logits[i] == max_logit ? 1.0f : 0.0f;
  } else {
    mass = ExpShifted(logits, vocab_size, max_logit, 1.0f / p.temperature, w.data());
  }

  Candidate cutoff{0.0f, 0};
  const bool filtered = FindCutoff(w, p, &cutoff);
  if (!filtered && mass > 0) {
    // One uniform draw over all the mass, walked in id order: whole groups of
    // 16 while the draw lies past them, then token by token.
    const double target = SamplingUniform(p.seed, p.step_offset + step) * mass;
    double cum = 0;
    int i = 0;
    for (; i + 16 <= vocab_size; i += 16) {
      const F4 s = Load4(&w[i]) + Load4(&w[i + 4]) + Load4(&w[i + 8]) + Load4(&w[i + 12]);
      const double group = static_cast<double>(s[0]) + s[1] + s[2] + s[3];
      if (cum + group > target) break;
      cum += group;
    }
    for (; i < vocab_size; ++i) {
      if (w[i] <= 0) continue;
      cum += w[i];
      if (cum > target) return i;
    }
    for (int j = vocab_size; j-- > 0;) {  // target rounded up to the total: the last one
      if (w[j] > 0) return j;
    }
    return best;
  }
  auto kept = [&](int i) {
    return w[i] > 0 && (!filtered || i == cutoff.id || MoreProbable({w[i], i}, cutoff));
  };

  // One uniform draw over the kept mass, walked in id order.
  double total = 0;
  for (int i = 0; i < vocab_size; ++i) {
    if (kept(i)) total += w[i];
  }
  const double target = SamplingUniform(p.seed, p.step_offset + step) * total;
  double cum = 0;
  int last = best;
  for (int i = 0; i < vocab_size; ++i) {
    if (!kept(i)) continue;
    cum += w[i];
    last = i;
    if (cum > target) return i;
  }
  return last;  // target rounded up to the total
}

StepLogprobs ComputeLogprobs(const float* logits, int vocab_size, int32_t token, int top_n) {
  StepLogprobs out;
  out.token.token = token;
  out.token.logprob = kMinLogprob;
  if (vocab_size <= 0) return out;
  const double max_logit = MaxLogit(logits, vocab_size);  // -inf when all are NaN
  // log Z: over the +inf logits alone when there are any (each gets 1 / count).
  double log_z = -INFINITY;
  if (std::isinf(max_logit) && max_logit > 0) {
    int count = 0;
    for (int i = 0; i < vocab_size; ++i) count += logits[i] == max_logit;
    log_z = std::log(static_cast<double>(count));
  } else if (std::isfinite(max_logit)) {
    log_z = max_logit +
            std::log(ExpShifted(logits, vocab_size, static_cast<float>(max_logit), 1.0f, nullptr));
  }
  auto logprob = [&](int i) -> float {
    const double l = logits[i];
    if (std::isnan(l) || !std::isfinite(log_z)) return kMinLogprob;
    double lp;
    if (std::isinf(max_logit)) {
      lp = l == max_logit ? -log_z : -INFINITY;
    } else {
      lp = l - log_z;
    }
    return lp < kMinLogprob ? kMinLogprob : static_cast<float>(lp);
  };
  if (token >= 0 && token < vocab_size) out.token.logprob = logprob(token);
  // The top_n largest logits (NaN last), kept sorted: larger first, ties to the lower id.
  const int n = std::min(top_n, vocab_size);
  if (n <= 0) return out;
  auto before = [logits](int a, int b) {
    const float x = logits[a], y = logits[b];
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    return x > y || (!(x < y) && a < b);
  };
  std::vector<int> top;
  top.reserve(n + 1);
  // Once full, a later id enters only with a larger logit than the last
  // one's (a tie goes to the lower id, already in): one compare per logit
  // while the last one is a number.
  float floor_logit = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < vocab_size; ++i) {
    if (!std::isnan(floor_logit) && !(logits[i] > floor_logit)) continue;
    if (static_cast<int>(top.size()) == n && !before(i, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), i, before), i);
    if (static_cast<int>(top.size()) > n) top.pop_back();
    if (static_cast<int>(top.size()) == n) floor_logit = logits[top.back()];
  }
  for (int i : top) out.top.push_back({i, logprob(i)});
  return out;
}

int SampleStep(float* logits, int vocab_size, const SamplingParams& params,
               const SamplingHistory& history, uint64_t step, StepLogprobs* logprobs) {
  const bool report = params.logprobs && logprobs != nullptr;
  const bool keep_raw = report && params.adjusts_logits();
  // The logits as given, in a buffer kept per thread (as SampleToken's
  // weights: a large vocabulary's copy would be faulted in on every call).
  thread_local std::vector<float> raw;
  if (keep_raw) raw.assign(logits, logits + vocab_size);
  history.Apply(logits, vocab_size, params);
  const int token = SampleToken(logits, vocab_size, params, step);
  if (report) {
    *logprobs =
        ComputeLogprobs(keep_raw ? raw.data() : logits, vocab_size, token, params.top_logprobs);
  }
  return token;
}

FinishReason CheckStop(const StopConditions& stop, int token, int num_generated) {
  if (stop.eos_token_id >= 0 && token == stop.eos_token_id) return FinishReason::kStop;
  if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) !=
      stop.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (num_generated >= stop.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
  }
  return "none";
}

}  // namespace ced
