#include "engine/model/weights.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/presets.h"
#include "engine/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_files.h"

namespace ced {
namespace {

using ::testing::HasSubstr;

void Make(const std::string& dir, const std::string& preset, const std::string& dtype = "f32") {
  MakeModelOptions o;
  o.preset = preset;
  o.seed = 11;
  o.out_dir = dir;
  o.dtype = dtype;
  absl::Status s = MakeModel(o);
  ASSERT_TRUE(s.ok()) << s;
}

// Rewrites the JSON header of a safetensors file, keeping the data section.
void RewriteHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::string raw = testing::ReadFile(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  nlohmann::json header = nlohmann::json::parse(raw.substr(8, n));
  edit(header);
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{text.size()} >> (8 * i));
  testing::WriteFile(path, out + text + raw.substr(8 + n));
}

std::string LoadError(const std::string& dir) {
  auto w = LoadModelWeights(dir, WeightSet::kFull);
  if (w.ok()) return "OK";
  return std::string(w.status().message());
}

std::vector<const Tensor*> AllTensors(const ModelWeights& w) {
  std::vector<const Tensor*> out = {&w.embed, &w.encoder_norm, &w.final_norm, &w.lm_head};
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.local_k, &l.local_v, &l.global_k, &l.global_v,
                            &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      out.push_back(t);
    }
  }
  return out;
}

TEST(ExpectedTensorsTest, NamesAndShapes) {
  ModelConfig tiny = *PresetConfig("tiny");
  auto t = ExpectedTensors(tiny);
  EXPECT_EQ(t.size(), 1 + 8 * 11 + 3u);
  EXPECT_EQ(t.front().name, "embed");
  EXPECT_EQ(t.front().shape, (std::vector<int64_t>{260, 128}));
  EXPECT_EQ(t[1].name, "layers.0.attn_norm");
  EXPECT_EQ(t[1].shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(t[2].name, "layers.0.wq");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(t[3].name, "layers.0.local_k");
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(t[7].name, "layers.0.wo");
  EXPECT_EQ(t[11].name, "layers.0.w_down");
  EXPECT_EQ(t[11].shape, (std::vector<int64_t>{128, 384}));
  EXPECT_EQ(t[t.size() - 3].name, "encoder_norm");
  EXPECT_EQ(t.back().name, "lm_head");

  EXPECT_EQ(ExpectedTensors(*PresetConfig("tiny-dec")).size(), t.size() - 1);
  EXPECT_EQ(ExpectedTensors(*PresetConfig("tiny-shared")).size(), t.size() - 8);
  ModelConfig no_local = tiny;
  no_local.sliding_window = 0;
  EXPECT_EQ(ExpectedTensors(no_local).size(), t.size() - 16);
}

TEST(WeightSetTest, Needs) {
  ModelConfig c = *PresetConfig("tiny");
  auto needs = [&](WeightSet s, const std::string& n) { return WeightSetNeeds(c, s, n); };
  for (WeightSet s : {WeightSet::kFull, WeightSet::kEncoderReplay}) {
    EXPECT_TRUE(needs(s, "lm_head"));
    EXPECT_TRUE(needs(s, "layers.7.w_up"));
  }
  const WeightSet e = WeightSet::kEncoderOnly;
  EXPECT_TRUE(needs(e, "embed"));
  EXPECT_TRUE(needs(e, "encoder_norm"));
  EXPECT_TRUE(needs(e, "layers.3.w_down"));
  EXPECT_TRUE(needs(e, "layers.3.local_k"));
  EXPECT_TRUE(needs(e, "layers.4.global_k"));
  EXPECT_TRUE(needs(e, "layers.7.global_v"));
  EXPECT_FALSE(needs(e, "layers.4.wq"));
  EXPECT_FALSE(needs(e, "layers.4.local_k"));
  EXPECT_FALSE(needs(e, "layers.7.attn_norm"));
  EXPECT_FALSE(needs(e, "final_norm"));
  EXPECT_FALSE(needs(e, "lm_head"));
  ModelConfig dec = *PresetConfig("tiny-dec");
  EXPECT_TRUE(WeightSetNeeds(dec, e, "lm_head"));
  EXPECT_TRUE(WeightSetNeeds(dec, e, "layers.7.wq"));
  EXPECT_STREQ(WeightSetName(WeightSet::kFull), "full");
  EXPECT_STREQ(WeightSetName(WeightSet::kEncoderOnly), "encoder-only");
  EXPECT_STREQ(WeightSetName(WeightSet::kEncoderReplay), "encoder+replay");
}

TEST(LoadModelWeightsTest, FullSetLoadsEverythingFinite) {
  testing::ScratchDir dir;
  Make(dir.path(), "tiny");
  auto w = LoadModelWeights(dir.path(), WeightSet::kFull);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelWeights& m = **w;
  EXPECT_EQ(m.set(), WeightSet::kFull);
  EXPECT_EQ(m.config().num_layers, 8);
  ASSERT_EQ(m.layers.size(), 8u);
  EXPECT_EQ(m.embed.rows, 260);
  EXPECT_EQ(m.embed.cols, 128);
  EXPECT_EQ(m.final_norm.rows, 1);
  EXPECT_EQ(m.final_norm.cols, 128);
  EXPECT_EQ(m.layers[2].w_down.rows, 128);
  EXPECT_EQ(m.layers[2].w_down.cols, 384);
  EXPECT_EQ(m.layers[5].global_k.rows, 64);
  int64_t floats = 0;
  for (const TensorSpec& s : ExpectedTensors(m.config())) {
    floats += s.shape.size() == 2 ? s.shape[0] * s.shape[1] : s.shape[0];
  }
  EXPECT_EQ(m.resident_bytes(), floats * 4);
  int64_t seen = 0;
  for (const Tensor* t : AllTensors(m)) {
    ASSERT_TRUE(t->loaded());
    for (int64_t i = 0; i < t->rows * t->cols; ++i) {
      ASSERT_TRUE(std::isfinite(t->data[i]));
      ASSERT_LT(std::fabs(t->data[i]), 10.0f);
    }
    seen += t->rows * t->cols;
  }
  EXPECT_EQ(seen, floats);
  // Norms are near one; linear weights are scaled by fan-in.
  EXPECT_NEAR(m.final_norm.data[0], 1.0f, 0.3f);
  double sq = 0;
  for (int64_t i = 0; i < m.layers[0].wq.rows * m.layers[0].wq.cols; ++i) {
    sq += m.layers[0].wq.data[i] * m.layers[0].wq.data[i];
  }
  EXPECT_NEAR(sq / (128.0 * 128.0), 1.0 / 128.0, 0.2 / 128.0);
}

TEST(LoadModelWeightsTest, EncoderOnlyHoldsAboutHalf) {
  testing::ScratchDir dir;
  Make(dir.path(), "tiny");
  auto full = LoadModelWeights(dir.path(), WeightSet::kFull);
  auto enc = LoadModelWeights(dir.path(), WeightSet::kEncoderOnly);
  auto replay = LoadModelWeights(dir.path(), WeightSet::kEncoderReplay);
  ASSERT_TRUE(full.ok() && enc.ok() && replay.ok());
  const ModelWeights& e = **enc;
  EXPECT_EQ(e.set(), WeightSet::kEncoderOnly);
  EXPECT_TRUE(e.embed.loaded());
  EXPECT_TRUE(e.encoder_norm.loaded());
  EXPECT_FALSE(e.final_norm.loaded());
  EXPECT_FALSE(e.lm_head.loaded());
  EXPECT_TRUE(e.layers[3].wq.loaded());
  EXPECT_TRUE(e.layers[3].local_v.loaded());
  EXPECT_TRUE(e.layers[4].global_k.loaded());
  EXPECT_TRUE(e.layers[7].global_v.loaded());
  EXPECT_FALSE(e.layers[4].wq.loaded());
  EXPECT_FALSE(e.layers[4].local_k.loaded());
  EXPECT_FALSE(e.layers[7].w_down.loaded());
  // Loaded tensors are the same values whichever set loaded them.
  EXPECT_EQ(e.layers[6].global_k.data[17], (*full)->layers[6].global_k.data[17]);
  const double ratio =
      static_cast<double>(e.resident_bytes()) / static_cast<double>((*full)->resident_bytes());
  EXPECT_GT(ratio, 0.45);
  EXPECT_LT(ratio, 0.62);
  EXPECT_EQ((*replay)->resident_bytes(), (*full)->resident_bytes());
  EXPECT_EQ((*replay)->set(), WeightSet::kEncoderReplay);
}

TEST(LoadModelWeightsTest, DecoderOnlyEncoderSetIsFull) {
  testing::ScratchDir dir;
  Make(dir.path(), "tiny-dec");
  auto full = LoadModelWeights(dir.path(), WeightSet::kFull);
  auto enc = LoadModelWeights(dir.path(), WeightSet::kEncoderOnly);
  ASSERT_TRUE(full.ok() && enc.ok());
  EXPECT_EQ((*enc)->resident_bytes(), (*full)->resident_bytes());
  EXPECT_TRUE((*enc)->lm_head.loaded());
  EXPECT_TRUE((*enc)->final_norm.loaded());
  EXPECT_FALSE((*enc)->encoder_norm.loaded());
}

TEST(LoadModelWeightsTest, SharedSourcesHaveNoGlobalProjections) {
  testing::ScratchDir dir;
  Make(dir.path(), "tiny-shared");
  auto w = LoadModelWeights(dir.path(), WeightSet::kFull);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ((*w)->layers[l].global_k.loaded(), l % 2 == 0) << l;
    EXPECT_EQ((*w)->layers[l].global_v.loaded(), l % 2 == 0) << l;
  }
}

TEST(LoadModelWeightsTest, HalfPrecisionFilesMatchF32WithinRounding) {
  testing::ScratchDir f32, bf16, f16;
  Make(f32.path(), "tiny", "f32");
  Make(bf16.path(), "tiny", "bf16");
  Make(f16.path(), "tiny", "f16");
  auto a = LoadModelWeights(f32.path(), WeightSet::kFull);
  auto b = LoadModelWeights(bf16.path(), WeightSet::kFull);
  auto h = LoadModelWeights(f16.path(), WeightSet::kFull);
  ASSERT_TRUE(a.ok() && b.ok() && h.ok());
  EXPECT_EQ((*b)->resident_bytes(), (*a)->resident_bytes());
  auto ta = AllTensors(**a), tb = AllTensors(**b), th = AllTensors(**h);
  for (size_t i = 0; i < ta.size(); ++i) {
    for (int64_t j = 0; j < ta[i]->rows * ta[i]->cols; ++j) {
      const float x = ta[i]->data[j];
      ASSERT_NEAR(tb[i]->data[j], x, std::fabs(x) * (1.0f / 128) + 1e-30f);
      ASSERT_NEAR(th[i]->data[j], x, std::fabs(x) * (1.0f / 1024) + 1e-7f);
    }
  }
}

class BadModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(dir_.path(), "tiny"); }
  std::string file() const { return dir_.Sub("model.safetensors"); }
  testing::ScratchDir dir_;
};

TEST_F(BadModelDirTest, MissingFiles) {
  testing::ScratchDir empty;
  auto w = LoadModelWeights(empty.path(), WeightSet::kFull);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("config.json"));
  std::remove(file().c_str());
  // config.json alone is a shape-only model: said so, not "cannot open".
  auto shape_only = LoadModelWeights(dir_.path(), WeightSet::kFull);
  ASSERT_FALSE(shape_only.ok());
  EXPECT_EQ(shape_only.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(shape_only.status().message()),
              HasSubstr("config.json but no model.safetensors: a shape-only model"));
  EXPECT_EQ(CheckRunnableModel(dir_.path()), shape_only.status());
  EXPECT_EQ(CheckRunnableModel(empty.path()).code(), absl::StatusCode::kNotFound);
}

TEST_F(BadModelDirTest, BadConfigJson) {
  testing::WriteFile(dir_.Sub("config.json"), "{\"vocab_size\": 260,");
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("config.json: invalid JSON at byte"));
}

TEST_F(BadModelDirTest, ConfigDisagreesWithWeights) {
  ModelConfig c = *PresetConfig("tiny");
  c.intermediate_size = 256;
  testing::WriteFile(dir_.Sub("config.json"), ConfigToJson(c));
  EXPECT_THAT(LoadError(dir_.path()),
              HasSubstr("tensor 'layers.0.w_gate': shape [384, 128], expected [256, 128]"));
}

TEST_F(BadModelDirTest, TruncatedFile) {
  const std::string raw = testing::ReadFile(file());
  testing::WriteFile(file(), raw.substr(0, raw.size() - 100));
  EXPECT_THAT(LoadError(dir_.path()),
              HasSubstr("model.safetensors: tensor 'lm_head': data_offsets"));
  testing::WriteFile(file(), raw.substr(0, 5));
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("model.safetensors: file is 5 bytes"));
  testing::WriteFile(file(), raw.substr(0, 100));
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("model.safetensors: header length"));
}

TEST_F(BadModelDirTest, LyingHeader) {
  RewriteHeader(file(), [](nlohmann::json& h) { h["layers.2.wo"]["shape"] = {128, 127}; });
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("tensor 'layers.2.wo': header lies about sizes"));
}

TEST_F(BadModelDirTest, OffsetsPastEnd) {
  RewriteHeader(file(), [](nlohmann::json& h) {
    auto& off = h["final_norm"]["data_offsets"];
    off = {off[0].get<uint64_t>() + (1 << 30), off[1].get<uint64_t>() + (1 << 30)};
  });
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("tensor 'final_norm': data_offsets"));
}

TEST_F(BadModelDirTest, WrongShape) {
  RewriteHeader(file(), [](nlohmann::json& h) { h["layers.1.wq"]["shape"] = {64, 256}; });
  EXPECT_THAT(LoadError(dir_.path()),
              HasSubstr("tensor 'layers.1.wq': shape [64, 256], expected [128, 128]"));
}

TEST_F(BadModelDirTest, MissingTensor) {
  RewriteHeader(file(), [](nlohmann::json& h) { h.erase("layers.5.global_v"); });
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("tensor 'layers.5.global_v': missing"));
}

TEST_F(BadModelDirTest, UnexpectedTensor) {
  RewriteHeader(file(), [](nlohmann::json& h) { h["layers.8.wq"] = h["layers.7.wq"]; });
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("tensor 'layers.8.wq': unexpected"));
}

TEST_F(BadModelDirTest, UnsupportedDtype) {
  RewriteHeader(file(), [](nlohmann::json& h) { h["embed"]["dtype"] = "I32"; });
  EXPECT_THAT(LoadError(dir_.path()), HasSubstr("tensor 'embed': dtype I32"));
}

TEST_F(BadModelDirTest, SkippedTensorsAreStillValidated) {
  // A prefill instance never reads lm_head, but a broken one still fails.
  RewriteHeader(file(), [](nlohmann::json& h) { h.erase("lm_head"); });
  auto w = LoadModelWeights(dir_.path(), WeightSet::kEncoderOnly);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("'lm_head': missing"));
}

}  // namespace
}  // namespace ced
