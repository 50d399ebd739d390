// Shared helpers for engine tests: models made on the fly, greedy runs and
// comparisons against the full forward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/presets.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace ced::testing {

// Loads (making it once per process) a preset model, optionally with a
// config edit applied before the weights are generated.
inline std::shared_ptr<const ModelWeights> LoadTestModel(
    const std::string& preset, WeightSet set = WeightSet::kFull,
    const std::function<void(ModelConfig*)>& edit = nullptr, const std::string& tag = "") {
  static std::map<std::string, std::shared_ptr<const ModelWeights>> cache;
  const std::string key = preset + "/" + tag + "/" + WeightSetName(set);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::string dir = ::testing::TempDir() + "/ced_model_" + preset + (tag.empty() ? "" : "_" + tag);
  MakeModelOptions mo;
  mo.seed = 7;
  mo.out_dir = dir;
  auto config = PresetConfig(preset);
  EXPECT_TRUE(config.ok()) << config.status();
  if (edit) {
    ModelConfig c = *config;
    edit(&c);
    mo.config = c;
  } else {
    mo.preset = preset;
  }
  absl::Status made = MakeModel(mo);
  EXPECT_TRUE(made.ok()) << made;
  auto weights = LoadModelWeights(dir, set);
  EXPECT_TRUE(weights.ok()) << weights.status();
  std::shared_ptr<const ModelWeights> shared(std::move(*weights));
  cache[key] = shared;
  return shared;
}

inline std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const ModelWeights> w,
                                          std::optional<KvFormat> format = std::nullopt,
                                          int64_t kv_bytes = 64ll << 20) {
  EngineOptions o;
  o.kv_format = format;
  o.kv_cache_bytes = kv_bytes;
  auto e = Engine::CreateWithWeights(o, std::move(w));
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

inline std::vector<int32_t> RandomPrompt(int n, uint64_t seed) {
  std::vector<int32_t> out(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out[i] = static_cast<int32_t>(s % 256);
  }
  return out;
}

inline int Argmax(const float* v, int n) {
  return static_cast<int>(std::max_element(v, v + n) - v);
}

// max |a - ref| / max |ref|.
inline double RelDiff(const float* a, const float* ref, int n) {
  double m = 0.0, d = 0.0;
  for (int i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(static_cast<double>(ref[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - ref[i]));
  }
  return m > 0 ? d / m : d;
}

struct GreedyRun {
  std::vector<int32_t> tokens;              // generated
  std::vector<std::vector<float>> logits;   // logits that produced each token
};

// `steps` greedy tokens on a prefilled sequence, the first from `logits`
// (the prefill's); the sequence is left to the caller.
inline GreedyRun DecodeGreedy(Engine& e, SeqId seq, std::vector<float> logits, int steps) {
  GreedyRun run;
  const int V = e.config().vocab_size;
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = Argmax(logits.data(), V);
    run.tokens.push_back(tok);
    run.logits.push_back(logits);
    if (i + 1 == steps) break;
    DecodeInput in{seq, tok};
    auto next = e.Decode(absl::MakeConstSpan(&in, 1));
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok()) return run;
    logits = std::move(*next);
  }
  return run;
}

// Prefill + `steps` greedy tokens on one sequence (released afterwards).
inline GreedyRun RunGreedy(Engine& e, const std::vector<int32_t>& prompt, int steps,
                           PrefillOptions po = {}) {
  auto seq = e.CreateSequence(static_cast<int>(prompt.size()) + steps);
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return {};
  auto pre = e.Prefill(*seq, prompt, po);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  GreedyRun run = DecodeGreedy(e, *seq, std::move(pre->logits), steps);
  EXPECT_TRUE(e.ReleaseSequence(*seq).ok());
  return run;
}

// Checks a greedy run against the full forward of prompt + generated tokens:
// logits within `rel` at every step and identical greedy tokens.
inline void ExpectMatchesFullForward(Engine& e, const std::vector<int32_t>& prompt,
                                     const GreedyRun& run, double rel) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), run.tokens.begin(), run.tokens.end() - 1);
  auto full = e.FullForward(all);
  ASSERT_TRUE(full.ok()) << full.status();
  const int V = e.config().vocab_size;
  for (size_t k = 0; k < run.tokens.size(); ++k) {
    const float* ref = full->data() + (prompt.size() - 1 + k) * V;
    ASSERT_LE(RelDiff(run.logits[k].data(), ref, V), rel) << "step " << k;
    ASSERT_EQ(run.tokens[k], Argmax(ref, V)) << "step " << k;
  }
}

// The sequences of `lengths`-token prompts decoded together, `steps` greedy
// steps in one batch, give each sequence's tokens and logits (within 1e-4)
// of a run alone. Releases what it made.
inline void ExpectBatchedDecodeEqualsAlone(Engine& e, const std::vector<int>& lengths,
                                           int steps) {
  std::vector<GreedyRun> alone;
  for (size_t i = 0; i < lengths.size(); ++i) {
    alone.push_back(RunGreedy(e, RandomPrompt(lengths[i], i), steps));
  }
  std::vector<SeqId> seqs;
  std::vector<int32_t> next;
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto seq = e.CreateSequence(lengths[i] + steps);
    ASSERT_TRUE(seq.ok());
    auto pre = e.Prefill(*seq, RandomPrompt(lengths[i], i), PrefillOptions{});
    ASSERT_TRUE(pre.ok());
    seqs.push_back(*seq);
    next.push_back(Argmax(pre->logits.data(), pre->logits.size()));
    ASSERT_EQ(next.back(), alone[i].tokens[0]);
  }
  const int V = e.config().vocab_size;
  for (int step = 1; step < steps; ++step) {
    std::vector<DecodeInput> inputs;
    for (size_t i = 0; i < seqs.size(); ++i) inputs.push_back({seqs[i], next[i]});
    auto logits = e.Decode(inputs);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t i = 0; i < seqs.size(); ++i) {
      const float* row = logits->data() + i * V;
      EXPECT_LE(RelDiff(row, alone[i].logits[step].data(), V), 1e-4) << "seq " << i;
      next[i] = Argmax(row, V);
      ASSERT_EQ(next[i], alone[i].tokens[step]) << "seq " << i << " step " << step;
    }
  }
  for (SeqId s : seqs) ASSERT_TRUE(e.ReleaseSequence(s).ok());
}

}  // namespace ced::testing
