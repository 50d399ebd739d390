#include "engine/model/presets.h"

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"

namespace ced {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

int64_t ParamCount(const ModelConfig& c, WeightSet set) {
  int64_t n = 0;
  for (const TensorSpec& s : ExpectedTensors(c)) {
    if (!WeightSetNeeds(c, set, s.name)) continue;
    int64_t k = 1;
    for (int64_t d : s.shape) k *= d;
    n += k;
  }
  return n;
}

absl::Status Make(const std::string& preset, uint64_t seed, const std::string& dir,
                  const std::string& dtype = "f32") {
  MakeModelOptions o;
  o.preset = preset;
  o.seed = seed;
  o.out_dir = dir;
  o.dtype = dtype;
  return MakeModel(o);
}

TEST(PresetsTest, NamesAndShapes) {
  EXPECT_THAT(PresetNames(),
              ElementsAre("tiny", "tiny-dec", "tiny-shared", "small", "small-dec", "tiny-moe",
                          "tiny-moe-dec", "small-moe", "small-moe-dec", "llama3-70b-ced",
                          "llama3-70b", "deepseek-v4.1-flash", "deepseek-v4.1-flash-dec"));
  for (const std::string& name : PresetNames()) {
    auto c = PresetConfig(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(ValidateConfig(*c).ok()) << name << ": " << ValidateConfig(*c);
    EXPECT_EQ(c->IsDecoderOnly(), name.find("-dec") != std::string::npos || name == "llama3-70b")
        << name;
  }
  EXPECT_TRUE(PresetIsShapeOnly("llama3-70b-ced"));
  EXPECT_TRUE(PresetIsShapeOnly("llama3-70b"));
  EXPECT_FALSE(PresetIsShapeOnly("small"));
  EXPECT_FALSE(PresetIsShapeOnly("nope"));
  auto bad = PresetConfig("medium");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'medium'"));

  ModelConfig tiny = *PresetConfig("tiny");
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(tiny.num_encoder_layers, 4);
  EXPECT_EQ(tiny.sliding_window, 16);
  EXPECT_EQ(tiny.replay_window, 16);
  EXPECT_EQ(tiny.max_position, 4096);
  EXPECT_EQ(PresetConfig("tiny-shared")->global_kv_source,
            (std::vector<int>{0, 0, 2, 2, 4, 4, 6, 6}));

  ModelConfig small = *PresetConfig("small");
  const int64_t params = ParamCount(small, WeightSet::kFull);
  EXPECT_GT(params, 30'000'000);
  EXPECT_LT(params, 60'000'000);
  const double half = static_cast<double>(ParamCount(small, WeightSet::kEncoderOnly)) / params;
  EXPECT_GT(half, 0.45);
  EXPECT_LT(half, 0.6);

  ModelConfig big = *PresetConfig("llama3-70b-ced");
  EXPECT_EQ(big.num_layers, 80);
  EXPECT_EQ(big.num_encoder_layers, 40);
  EXPECT_EQ(big.sliding_window, 0);
  EXPECT_EQ(big.replay_window, 1);
  EXPECT_EQ(big.kv_cache_dtype, KvFormat::kBF16);
  EXPECT_EQ(big.vocab_size, 128256);
  EXPECT_EQ(big.max_position, 131072);
  // ~70.6B parameters in the Llama-3-70B shape (no local branch).
  const int64_t big_params = ParamCount(big, WeightSet::kFull);
  EXPECT_GT(big_params, 70'000'000'000);
  EXPECT_LT(big_params, 71'000'000'000);
  EXPECT_EQ(PresetConfig("llama3-70b")->num_encoder_layers, 80);
}

TEST(PresetsTest, ShapeOnlyWritesOnlyConfig) {
  testing::ScratchDir dir;
  const std::string out = dir.Sub("big/nested");
  ASSERT_TRUE(Make("llama3-70b-ced", 1, out).ok());
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  auto c = LoadConfigFile(out + "/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 8192);
  EXPECT_EQ(c->num_encoder_layers, 40);

  MakeModelOptions o;
  o.preset = "tiny";
  o.out_dir = dir.Sub("tiny");
  o.shape_only = true;
  ASSERT_TRUE(MakeModel(o).ok());
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/model.safetensors"));
}

TEST(PresetsTest, SameSeedSameBytesOtherSeedOtherBytes) {
  testing::ScratchDir a, b, c;
  ASSERT_TRUE(Make("tiny", 42, a.path()).ok());
  ASSERT_TRUE(Make("tiny", 42, b.path()).ok());
  ASSERT_TRUE(Make("tiny", 43, c.path()).ok());
  const std::string wa = testing::ReadFile(a.Sub("model.safetensors"));
  ASSERT_GT(wa.size(), 1'000'000u);
  EXPECT_TRUE(wa == testing::ReadFile(b.Sub("model.safetensors")));
  EXPECT_EQ(testing::ReadFile(a.Sub("config.json")), testing::ReadFile(b.Sub("config.json")));
  const std::string wc = testing::ReadFile(c.Sub("model.safetensors"));
  ASSERT_EQ(wc.size(), wa.size());
  EXPECT_FALSE(wa == wc);
  // Every tensor differs, not just one.
  auto fa = SafetensorsFile::Open(a.Sub("model.safetensors"));
  auto fc = SafetensorsFile::Open(c.Sub("model.safetensors"));
  ASSERT_TRUE(fa.ok() && fc.ok());
  for (const SafetensorsEntry& e : (*fa)->tensors()) {
    auto x = (*fa)->RawBytes(e.name);
    auto y = (*fc)->RawBytes(e.name);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_FALSE(*x == *y) << e.name;
  }
}

TEST(PresetsTest, DecoderOnlyTwinSharesTensorBytes) {
  testing::ScratchDir ced, dec;
  for (const char* dtype : {"f32", "bf16"}) {
    ASSERT_TRUE(Make("tiny", 5, ced.path(), dtype).ok());
    ASSERT_TRUE(Make("tiny-dec", 5, dec.path(), dtype).ok());
    auto fc = SafetensorsFile::Open(ced.Sub("model.safetensors"));
    auto fd = SafetensorsFile::Open(dec.Sub("model.safetensors"));
    ASSERT_TRUE(fc.ok() && fd.ok());
    EXPECT_EQ((*fc)->tensors().size(), (*fd)->tensors().size() + 1);
    EXPECT_NE((*fc)->Find("encoder_norm"), nullptr);
    EXPECT_EQ((*fd)->Find("encoder_norm"), nullptr);
    for (const SafetensorsEntry& e : (*fd)->tensors()) {
      auto x = (*fd)->RawBytes(e.name);
      auto y = (*fc)->RawBytes(e.name);
      ASSERT_TRUE(x.ok() && y.ok()) << e.name;
      EXPECT_TRUE(*x == *y) << dtype << " " << e.name;
    }
  }
}

TEST(PresetsTest, CustomConfigAndBadOptions) {
  testing::ScratchDir dir;
  ModelConfig c = *PresetConfig("tiny");
  c.num_layers = 2;
  c.num_encoder_layers = 1;
  c.global_kv_source = {0, 1};
  c.sliding_window = 4;
  c.replay_window = 4;
  MakeModelOptions o;
  o.config = c;
  o.out_dir = dir.path();
  o.dtype = "f16";
  ASSERT_TRUE(MakeModel(o).ok());
  auto w = LoadModelWeights(dir.path(), WeightSet::kFull);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->layers.size(), 2u);

  o.dtype = "int8";
  EXPECT_THAT(std::string(MakeModel(o).message()), HasSubstr("'int8'"));
  o.dtype = "f32";
  o.config->replay_window = 2;
  EXPECT_THAT(std::string(MakeModel(o).message()), HasSubstr("replay_window"));
  MakeModelOptions p;
  p.preset = "huge";
  p.out_dir = dir.path();
  EXPECT_THAT(std::string(MakeModel(p).message()), HasSubstr("'huge'"));
  p.preset = "tiny";
  p.out_dir = "";
  EXPECT_FALSE(MakeModel(p).ok());
}

// Writes and loads the ~41M-parameter preset once: it must stay quick and
// hold only the encoder half in an encoder-only instance.
TEST(PresetsTest, SmallModelLoads) {
  testing::ScratchDir dir;
  ASSERT_TRUE(Make("small", 3, dir.path(), "bf16").ok());
  auto enc = LoadModelWeights(dir.path(), WeightSet::kEncoderOnly);
  ASSERT_TRUE(enc.ok()) << enc.status();
  const ModelConfig& c = (*enc)->config();
  EXPECT_EQ((*enc)->resident_bytes(), ParamCount(c, WeightSet::kEncoderOnly) * 4);
  EXPECT_FALSE((*enc)->layers[c.num_layers - 1].w_up.loaded());
  EXPECT_TRUE((*enc)->layers[c.num_layers - 1].global_k.loaded());
}

}  // namespace
}  // namespace ced
