#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ced {
namespace {

std::vector<float> RandomLogits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> logits(n);
  for (float& l : logits) l = dist(rng);
  return logits;
}

SamplingParams Params(float temperature, int top_k, float top_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Pearson chi-square of counts from `draws` samples against probabilities p.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "id " << i << " has probability 0";
      continue;
    }
    double e = p[i] * draws;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

std::vector<int> Histogram(const std::vector<float>& logits, const SamplingParams& p, int draws) {
  std::vector<int> counts(logits.size());
  for (int s = 0; s < draws; ++s) {
    ++counts[SampleToken(logits.data(), static_cast<int>(logits.size()), p, s)];
  }
  return counts;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::vector<float> logits = RandomLogits(1000, seed);
    EXPECT_EQ(SampleToken(logits.data(), 1000, SamplingParams{}, seed), Argmax(logits));
  }
  std::vector<float> ties = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  EXPECT_EQ(SampleToken(ties.data(), 5, SamplingParams{}, 0), 1);
  std::vector<float> with_nan = {1.0f, std::nanf(""), 0.5f};
  EXPECT_EQ(SampleToken(with_nan.data(), 3, SamplingParams{}, 0), 0);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  std::vector<float> ties = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::vector<float> logits = RandomLogits(500, seed);
    SamplingParams k1 = Params(1.0f, 1, 1.0f, seed);
    SamplingParams p0 = Params(1.5f, 0, 1e-6f, seed);
    EXPECT_EQ(SampleToken(logits.data(), 500, k1, seed), Argmax(logits));
    EXPECT_EQ(SampleToken(logits.data(), 500, p0, seed), Argmax(logits));
    EXPECT_EQ(SampleToken(ties.data(), 5, k1, seed), 1);
    EXPECT_EQ(SampleToken(ties.data(), 5, p0, seed), 1);
  }
}

TEST(SamplerTest, SameSeedAndStepSameToken) {
  std::vector<float> logits(64, 0.0f);  // uniform: every draw matters
  SamplingParams p = Params(1.0f, 0, 1.0f, 1234);
  std::vector<int> a, b, c;
  for (int step = 0; step < 100; ++step) {
    a.push_back(SampleToken(logits.data(), 64, p, step));
    b.push_back(SampleToken(logits.data(), 64, p, step));
  }
  EXPECT_EQ(a, b);
  // Steps out of order (another worker resuming mid-stream) give the same tokens.
  for (int step = 99; step >= 0; --step)
    EXPECT_EQ(SampleToken(logits.data(), 64, p, step), a[step]);
  p.seed = 1235;
  for (int step = 0; step < 100; ++step) c.push_back(SampleToken(logits.data(), 64, p, step));
  EXPECT_NE(a, c);
  // Different steps of one seed are not all equal either.
  EXPECT_GT(std::count(a.begin(), a.end(), a[0]), 0);
  EXPECT_LT(std::count(a.begin(), a.end(), a[0]), 20);
}

// A request migrated after k tokens continues with step_offset = k: its step
// j samples as step k + j of the original.
TEST(SamplerTest, StepOffsetContinuesTheStepCount) {
  std::vector<float> logits(64, 0.0f);
  SamplingParams p = Params(1.0f, 0, 1.0f, 99);
  SamplingParams continued = p;
  continued.step_offset = 37;
  int differ = 0;
  for (int j = 0; j < 50; ++j) {
    EXPECT_EQ(SampleToken(logits.data(), 64, continued, j),
              SampleToken(logits.data(), 64, p, 37 + j));
    differ += SampleToken(logits.data(), 64, continued, j) != SampleToken(logits.data(), 64, p, j);
  }
  EXPECT_GT(differ, 0) << "the offset changed nothing";
}

TEST(SamplerTest, UniformDrawIsInUnitIntervalAndWellSpread) {
  double mean = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double u = SamplingUniform(42, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u / n;
  }
  EXPECT_NEAR(mean, 0.5, 0.01);  // sd of the mean is about 0.002
  EXPECT_NE(SamplingUniform(1, 0), SamplingUniform(0, 1));
}

// With 20k draws and chi-square degrees of freedom k-1, a bound several
// standard deviations (sqrt(2(k-1))) above the mean k-1 fails only on a bug.
TEST(SamplerTest, TemperatureOneMatchesSoftmax) {
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
  SamplingParams p = Params(1.0f, 0, 1.0f, 7);
  const int draws = 20000;
  std::vector<int> counts = Histogram(logits, p, draws);
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 1.0), draws), 40.0);  // 7 dof
}

TEST(SamplerTest, TemperatureScalesLogits) {
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p = Params(2.5f, 0, 1.0f, 99);
  const int draws = 20000;
  std::vector<int> counts = Histogram(logits, p, draws);
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 2.5), draws), 35.0);  // 4 dof
}

TEST(SamplerTest, TopKRenormalizesOverTheKBest) {
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
  SamplingParams p = Params(1.0f, 3, 1.0f, 3);
  const int draws = 20000;
  std::vector<int> counts = Histogram(logits, p, draws);
  // The three best are ids 2, 5, 0.
  std::vector<double> expected = Softmax(logits, 1.0);
  double kept = expected[2] + expected[5] + expected[0];
  for (int i = 0; i < 8; ++i) expected[i] = (i == 2 || i == 5 || i == 0) ? expected[i] / kept : 0;
  EXPECT_LT(ChiSquare(counts, expected, draws), 30.0);  // 2 dof
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625.
  std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.0625f),
                               std::log(0.0625f)};
  SamplingParams p = Params(1.0f, 0, 0.7f, 11);
  const int draws = 20000;
  std::vector<int> counts = Histogram(logits, p, draws);
  // 0.5 < 0.7 <= 0.75: ids 0 and 1, renormalized to 2/3 and 1/3.
  EXPECT_LT(ChiSquare(counts, {2.0 / 3, 1.0 / 3, 0, 0, 0}, draws), 25.0);
}

TEST(SamplerTest, TopPOverALargeVocabulary) {
  // Needs more than the first partial sort of the nucleus search.
  std::vector<float> logits(5000, 0.0f);
  logits[4321] = 5.0f;
  SamplingParams p = Params(1.0f, 0, 0.9f, 5);
  // p(4321) = e^5 / (e^5 + 4999) ~ 0.029; the nucleus adds ~4490 of the tied
  // ids, lowest first, so the highest ids are never drawn.
  std::vector<int> counts = Histogram(logits, p, 1000);
  int distinct = 0;
  for (int c : counts) distinct += c > 0;
  EXPECT_GT(distinct, 600);  // about 900 expected
  for (int id = 4600; id < 5000; ++id) EXPECT_EQ(counts[id], 0) << id;
  // Top-p plus top-k: only the k best survive.
  p.top_k = 2;
  for (int s = 0; s < 200; ++s) {
    int t = SampleToken(logits.data(), 5000, p, s);
    EXPECT_TRUE(t == 4321 || t == 0) << t;
  }
}

// Straightforward reference: full sort, top-k prefix, nucleus prefix, then
// the same uniform draw walked in id order.
int ReferenceSample(const std::vector<float>& logits, const SamplingParams& p, uint64_t step) {
  const int n = static_cast<int>(logits.size());
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<float> w(n);
  for (int i = 0; i < n; ++i) w[i] = std::exp((logits[i] - mx) * (1.0f / p.temperature));
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  int keep = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  double mass = 0;
  for (int i = 0; i < keep; ++i) mass += w[order[i]];
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < keep; ++i) {
      cum += w[order[i]];
      if (cum >= p.top_p * mass) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<bool> kept(n, false);
  for (int i = 0; i < keep; ++i) kept[order[i]] = true;
  double total = 0;
  for (int i = 0; i < n; ++i) total += kept[i] ? w[i] : 0;
  const double target = SamplingUniform(p.seed, step) * total;
  double cum = 0;
  for (int i = 0; i < n; ++i) {
    if (!kept[i]) continue;
    cum += w[i];
    if (cum > target) return i;
  }
  return -1;
}

TEST(SamplerTest, MatchesReferenceImplementation) {
  std::mt19937 rng(17);
  for (int vocab : {10, 300, 6000}) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<float> logits = RandomLogits(vocab, rng());
      // Quantized logits make exact ties common.
      if (trial % 3 == 0) {
        for (float& l : logits) l = std::round(l);
      }
      const int ks[] = {0, 0, 2, 5, 50, vocab - 1, vocab + 3};
      const float ps[] = {1.0f, 0.95f, 0.5f, 0.1f};
      const float ts[] = {0.3f, 1.0f, 2.0f};
      SamplingParams p = Params(ts[rng() % 3], ks[rng() % 7], ps[rng() % 4], rng());
      for (uint64_t step = 0; step < 10; ++step) {
        ASSERT_EQ(SampleToken(logits.data(), vocab, p, step), ReferenceSample(logits, p, step))
            << "vocab " << vocab << " trial " << trial << " T " << p.temperature << " k " << p.top_k
            << " p " << p.top_p;
      }
    }
  }
}

TEST(SamplerTest, NonFiniteLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams p = Params(1.0f, 0, 1.0f, 1);
  std::vector<float> nan_and_neg_inf = {std::nanf(""), -inf, 0.0f, std::nanf("")};
  std::vector<float> pos_inf = {0.0f, inf, 3.0f, inf};
  std::vector<float> none = {-inf, std::nanf("")};
  for (int s = 0; s < 100; ++s) {
    EXPECT_EQ(SampleToken(nan_and_neg_inf.data(), 4, p, s), 2);
    int t = SampleToken(pos_inf.data(), 4, p, s);
    EXPECT_TRUE(t == 1 || t == 3) << t;
    EXPECT_EQ(SampleToken(none.data(), 2, p, s), 0);
  }
}

TEST(SamplerTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  EXPECT_TRUE(ValidateSamplingParams(Params(0.7f, 40, 0.95f, 0)).ok());
  auto expect_error = [](SamplingParams p, const std::string& field) {
    absl::Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  expect_error(Params(-0.1f, 0, 1.0f, 0), "temperature");
  expect_error(Params(std::numeric_limits<float>::infinity(), 0, 1.0f, 0), "temperature");
  expect_error(Params(std::nanf(""), 0, 1.0f, 0), "temperature");
  expect_error(Params(0.0f, -1, 1.0f, 0), "top_k");
  expect_error(Params(0.0f, 0, 0.0f, 0), "top_p");
  expect_error(Params(0.0f, 0, 1.01f, 0), "top_p");
  expect_error(Params(0.0f, 0, std::nanf(""), 0), "top_p");
  SamplingParams p;
  p.presence_penalty = 2.0f;
  p.frequency_penalty = -2.0f;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());  // the ends of the range
  p.presence_penalty = 2.5f;
  expect_error(p, "presence_penalty");
  p.presence_penalty = 0.0f;
  p.frequency_penalty = std::nanf("");
  expect_error(p, "frequency_penalty");
  p.frequency_penalty = -std::numeric_limits<float>::infinity();
  expect_error(p, "frequency_penalty");
}

// The adjustments as their definitions say, computed here from the prompt
// and the list of generated tokens: logit_bias added; the repetition penalty
// over every prompt or generated token (divide a positive logit, multiply a
// negative one); then logit[t] -= count(t) * frequency_penalty +
// (count(t) > 0) * presence_penalty (OpenAI's definition).
TEST(SamplerTest, AdjustmentsFollowTheirDefinitions) {
  const int vocab = 300;
  const std::vector<float> logits = RandomLogits(vocab, 11);
  const std::vector<int32_t> prompt = {7, 8, 8, 17, 250};
  // Repeats, and ids outside the vocabulary (ignored).
  const std::vector<int32_t> generated = {5, 17, 5, 299, 5, 17, 0, 300, -1, 42};
  struct Case {
    float presence, frequency, repetition;
    std::vector<std::pair<int32_t, float>> bias;
  };
  const std::vector<Case> cases = {
      {0.5f, 0.0f, 1.0f, {}},
      {0.0f, 0.75f, 1.0f, {}},
      {1.25f, -0.5f, 1.0f, {}},
      {-2.0f, 2.0f, 1.0f, {}},
      {0.0f, 0.0f, 1.3f, {}},
      {0.0f, 0.0f, 0.7f, {}},
      {0.0f, 0.0f, 1.0f, {{3, 100.0f}, {5, -100.0f}, {301, 5.0f}}},
      {0.4f, 0.6f, 1.2f, {{5, 2.5f}, {9, -1.0f}, {250, 0.5f}}},
  };
  for (const Case& k : cases) {
    SamplingParams p;
    p.presence_penalty = k.presence;
    p.frequency_penalty = k.frequency;
    p.repetition_penalty = k.repetition;
    p.logit_bias = k.bias;
    SamplingHistory history(prompt, p);
    for (int32_t t : generated) history.Add(t);
    std::vector<float> got = logits;
    history.Apply(got.data(), vocab, p);
    for (int t = 0; t < vocab; ++t) {
      float want = logits[t];
      for (const auto& [id, b] : k.bias) {
        if (id == t) want += b;
      }
      const auto in_prompt = std::count(prompt.begin(), prompt.end(), t);
      const auto c = std::count(generated.begin(), generated.end(), t);
      if (in_prompt + c > 0) want = want > 0 ? want / k.repetition : want * k.repetition;
      if (c > 0) want -= static_cast<float>(c) * k.frequency + k.presence;
      EXPECT_FLOAT_EQ(got[t], want)
          << "token " << t << ", count " << c << ", repetition " << k.repetition;
    }
    if (p.has_penalties()) {
      EXPECT_EQ(history.count(5), 3);
      EXPECT_EQ(history.count(6), 0);
      EXPECT_EQ(history.count(8), 0) << "the prompt is not counted as generated";
    }
  }
  // Nothing asked for: the logits are left alone whatever was generated.
  SamplingHistory history(prompt, SamplingParams{});
  for (int32_t t : generated) history.Add(t);
  std::vector<float> same = logits;
  history.Apply(same.data(), vocab, SamplingParams{});
  EXPECT_EQ(same, logits);
  EXPECT_FALSE(SamplingParams{}.adjusts_logits());
}

// The adjustments act before the choice, greedy included: a repeated token
// loses its lead; a bias of +100 forces a token, -100 bans one.
TEST(SamplerTest, AdjustmentsChangeTheGreedyChoice) {
  std::vector<float> logits = {5.0f, 4.5f, 1.0f};
  SamplingParams p;
  p.presence_penalty = 1.0f;
  SamplingHistory history({}, p);
  EXPECT_EQ(SampleToken(logits.data(), 3, p, 0), 0);
  history.Add(0);
  history.Apply(logits.data(), 3, p);
  EXPECT_EQ(SampleToken(logits.data(), 3, p, 1), 1);
  EXPECT_FLOAT_EQ(logits[0], 4.0f);
  SamplingParams bias;
  bias.logit_bias = {{2, 100.0f}, {0, -100.0f}};
  std::vector<float> again = {5.0f, 4.5f, 1.0f};
  SamplingHistory({}, bias).Apply(again.data(), 3, bias);
  EXPECT_EQ(SampleToken(again.data(), 3, bias, 0), 2);
}

// A continued request (step_offset k) counts the last k prompt tokens as
// generated: they are the tokens it generated before it moved.
TEST(SamplerTest, CountsOfAContinuedRequestComeFromThePromptTail) {
  const std::vector<int32_t> prompt = {1, 2, 3, 9, 9, 4};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  p.step_offset = 3;
  const SamplingHistory three(prompt, p);
  EXPECT_EQ(three.count(9), 2);
  EXPECT_EQ(three.count(4), 1);
  EXPECT_EQ(three.count(3), 0);
  p.step_offset = 0;
  EXPECT_EQ(SamplingHistory(prompt, p).count(9), 0);
  p.step_offset = 100;  // more than the prompt
  const SamplingHistory all(prompt, p);
  EXPECT_EQ(all.count(1), 1);
  EXPECT_EQ(all.count(9), 2);
}

TEST(SamplerTest, RepetitionPenaltyAndLogitBiasAreValidated) {
  auto error = [](const SamplingParams& p) {
    return std::string(ValidateSamplingParams(p).message());
  };
  SamplingParams p;
  p.repetition_penalty = 0.0f;
  EXPECT_NE(error(p).find("repetition_penalty"), std::string::npos);
  p.repetition_penalty = std::nanf("");
  EXPECT_NE(error(p).find("repetition_penalty"), std::string::npos);
  p.repetition_penalty = 1.5f;
  p.logit_bias = {{4, 100.0f}, {5, -100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.logit_bias = {{4, 100.5f}};
  EXPECT_NE(error(p).find("logit_bias[4]"), std::string::npos) << error(p);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(error(p).find("logit_bias[-1]"), std::string::npos) << error(p);
  p.logit_bias = {{4, 1.0f}, {4, 2.0f}};
  EXPECT_NE(error(p).find("given twice"), std::string::npos) << error(p);
  p.logit_bias.assign(kMaxLogitBias + 1, {0, 0.0f});
  for (int i = 0; i <= kMaxLogitBias; ++i) p.logit_bias[i].first = i;
  EXPECT_NE(error(p).find("at most"), std::string::npos) << error(p);
}

// The reference: log-softmax in long double, the top ones by a full sort
// (larger logit first, ties to the lower id), NaN as probability 0.
struct RefLogprobs {
  std::vector<long double> logprob;  // per id; -inf for probability 0
  std::vector<int> order;            // ids, most probable first
};
RefLogprobs Reference(const std::vector<float>& logits) {
  RefLogprobs r;
  long double mx = -INFINITY;
  for (float l : logits) {
    if (!std::isnan(l)) mx = std::max<long double>(mx, l);
  }
  long double sum = 0;
  for (float l : logits) {
    if (!std::isnan(l)) sum += std::exp(static_cast<long double>(l) - mx);
  }
  for (float l : logits) {
    r.logprob.push_back(std::isnan(l) ? -INFINITY
                                      : static_cast<long double>(l) - mx - std::log(sum));
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) r.order.push_back(static_cast<int>(i));
  }
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int a, int b) { return logits[a] > logits[b]; });
  return r;
}

float Floored(long double lp) { return lp < kMinLogprob ? kMinLogprob : static_cast<float>(lp); }

TEST(LogprobsTest, EqualTheReferenceLogSoftmaxAndItsTopTokens) {
  for (int vocab : {1, 7, 512, 5000}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<float> logits = RandomLogits(vocab, seed);
      if (vocab >= 7) {
        logits[3] = logits[5];              // a tie: the lower id first
        logits[vocab - 1] = -1000.0f;       // underflows to the floor
        logits[vocab - 2] = std::nanf("");  // probability 0
      }
      const RefLogprobs ref = Reference(logits);
      for (int top_n : {0, 1, 5, 20}) {
        for (int token : {0, vocab / 2, vocab - 1}) {
          const StepLogprobs got = ComputeLogprobs(logits.data(), vocab, token, top_n);
          EXPECT_EQ(got.token.token, token);
          EXPECT_NEAR(got.token.logprob, Floored(ref.logprob[token]), 1e-5)
              << "vocab " << vocab << " token " << token;
          ASSERT_EQ(got.top.size(), std::min<size_t>(top_n, ref.order.size() + (vocab >= 7)));
          for (size_t i = 0; i < got.top.size() && i < ref.order.size(); ++i) {
            EXPECT_EQ(got.top[i].token, ref.order[i]) << "rank " << i;
            EXPECT_NEAR(got.top[i].logprob, Floored(ref.logprob[ref.order[i]]), 1e-5);
          }
        }
      }
      // The probabilities sum to 1.
      long double mass = 0;
      for (int t = 0; t < vocab; ++t) {
        mass += std::exp(
            static_cast<long double>(ComputeLogprobs(logits.data(), vocab, t, 0).token.logprob));
      }
      EXPECT_NEAR(static_cast<double>(mass), 1.0, 1e-4) << "vocab " << vocab;
    }
  }
}

TEST(LogprobsTest, InfiniteAndNanLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {1.0f, inf, 2.0f, inf, std::nanf("")};
  StepLogprobs got = ComputeLogprobs(logits.data(), 5, 3, 3);
  EXPECT_NEAR(got.token.logprob, std::log(0.5f), 1e-6);  // two +inf share the mass
  ASSERT_EQ(got.top.size(), 3u);
  EXPECT_EQ(got.top[0].token, 1);
  EXPECT_EQ(got.top[1].token, 3);
  EXPECT_EQ(got.top[2].token, 2);
  EXPECT_EQ(got.top[2].logprob, kMinLogprob);
  std::vector<float> none = {-inf, std::nanf(""), -inf};
  got = ComputeLogprobs(none.data(), 3, 1, 3);
  EXPECT_EQ(got.token.logprob, kMinLogprob);
  ASSERT_EQ(got.top.size(), 3u);
  EXPECT_EQ(got.top[0].token, 0);  // -inf before NaN, ties to the lower id
  EXPECT_EQ(got.top[1].token, 2);
  EXPECT_EQ(got.top[2].token, 1);
  for (const TokenLogprob& t : got.top) EXPECT_EQ(t.logprob, kMinLogprob);
}

// SampleStep samples as SampleToken after the adjustments and reports the
// model's own distribution, before them.
TEST(LogprobsTest, SampleStepReportsTheLogitsBeforeTheAdjustments) {
  const std::vector<float> raw = RandomLogits(300, 9);
  const std::vector<int32_t> prompt = {4, 5, 6, 4};
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams p = Params(temperature, 0, 1.0f, 5);
    p.logprobs = true;
    p.top_logprobs = 4;
    p.logit_bias = {{7, 6.0f}};
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    SamplingHistory history(prompt, p);
    history.Add(9);
    std::vector<float> adjusted = raw;
    history.Apply(adjusted.data(), 300, p);
    const int expected = SampleToken(adjusted.data(), 300, p, 3);
    std::vector<float> logits = raw;
    StepLogprobs lp;
    const int token = SampleStep(logits.data(), 300, p, history, 3, &lp);
    EXPECT_EQ(token, expected);
    const RefLogprobs ref = Reference(raw);
    EXPECT_EQ(lp.token.token, token);
    EXPECT_NEAR(lp.token.logprob, static_cast<float>(ref.logprob[token]), 1e-5);
    ASSERT_EQ(lp.top.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(lp.top[i].token, ref.order[i]);
    // Not asked for: left alone.
    p.logprobs = false;
    p.top_logprobs = 0;
    StepLogprobs untouched;
    logits = raw;
    EXPECT_EQ(SampleStep(logits.data(), 300, p, history, 3, &untouched), expected);
    EXPECT_TRUE(untouched.top.empty());
    EXPECT_EQ(untouched.token.logprob, 0.0f);
  }
}

TEST(LogprobsTest, TopLogprobsAreValidated) {
  SamplingParams p;
  p.top_logprobs = 3;
  absl::Status s = ValidateSamplingParams(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_logprobs"), absl::string_view::npos) << s;
  p.logprobs = true;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  for (int bad : {-1, kMaxTopLogprobs + 1}) {
    p.top_logprobs = bad;
    s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message().rfind("top_logprobs", 0), 0u) << s;
  }
}

TEST(StopTest, CheckStop) {
  StopConditions stop;
  stop.max_tokens = 3;
  stop.stop_token_ids = {7, 9};
  stop.eos_token_id = 2;
  EXPECT_EQ(CheckStop(stop, 5, 1), FinishReason::kNone);
  EXPECT_EQ(CheckStop(stop, 2, 1), FinishReason::kStop);
  EXPECT_EQ(CheckStop(stop, 9, 2), FinishReason::kStop);
  EXPECT_EQ(CheckStop(stop, 5, 3), FinishReason::kLength);
  EXPECT_EQ(CheckStop(stop, 7, 3), FinishReason::kStop);  // stop wins over length
  StopConditions no_eos;
  no_eos.max_tokens = 10;
  EXPECT_EQ(CheckStop(no_eos, -1, 1), FinishReason::kNone);
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kNone), "none");
}

}  // namespace
}  // namespace ced
