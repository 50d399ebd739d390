// The `moe` block and window-only layers of config.json (DESIGN.md §1.7,
// §1.1 global_kv_source = -1): parsing, defaults, validation errors naming
// the key, the round trip, the safetensors names, and the MoE presets.
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/presets.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

using ::testing::HasSubstr;

// A valid config with a sliding window; `extra` is spliced in as further keys
// (a later duplicate wins).
std::string Json(const std::string& extra = "") {
  std::string s = R"({"vocab_size": 260, "hidden_size": 64, "num_layers": 4, "num_heads": 4,
      "num_kv_heads": 2, "head_dim": 16, "intermediate_size": 128, "sliding_window": 8)";
  if (!extra.empty()) s += ", " + extra;
  return s + "}";
}

std::string MoeJson(const std::string& inner) { return Json(R"("moe": {)" + inner + "}"); }

constexpr char kMinimal[] =
    R"("num_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32)";

TEST(MoeConfigTest, DefaultsOfTheOptionalKeys) {
  auto c = ParseConfigJson(MoeJson(kMinimal), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->moe.has_value());
  EXPECT_EQ(c->moe->num_routed_experts, 8);
  EXPECT_EQ(c->moe->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe->moe_intermediate_size, 32);
  EXPECT_EQ(c->moe->num_shared_experts, 0);
  EXPECT_EQ(c->moe->first_dense_layers, 0);
  EXPECT_EQ(c->moe->scoring, MoeScoring::kSoftmax);
  EXPECT_FALSE(c->moe->norm_topk_prob);
  EXPECT_EQ(c->moe->routed_scaling_factor, 1.0);
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(c->IsMoeLayer(l)) << l;
  auto dense = ParseConfigJson(Json(R"("moe": null)"), "config.json");
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(dense->moe.has_value());
  EXPECT_FALSE(dense->IsMoeLayer(3));
}

TEST(MoeConfigTest, EveryKeyAndTheRoundTrip) {
  auto c = ParseConfigJson(
      MoeJson(R"("num_routed_experts": 16, "num_shared_experts": 2, "num_experts_per_tok": 4,
                 "moe_intermediate_size": 24, "first_dense_layers": 1, "scoring": "sigmoid",
                 "norm_topk_prob": true, "routed_scaling_factor": 2.5)"),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe->SharedWidth(), 48);
  EXPECT_EQ(c->moe->scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(c->moe->norm_topk_prob);
  EXPECT_EQ(c->moe->routed_scaling_factor, 2.5);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  const std::string text = ConfigToJson(*c);
  for (const char* key :
       {"num_routed_experts", "num_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
        "first_dense_layers", "scoring", "norm_topk_prob", "routed_scaling_factor"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\"") + key + "\"")) << key;
  }
  auto again = ParseConfigJson(text, "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ConfigToJson(*again), text);
  EXPECT_EQ(again->moe->num_shared_experts, 2);
  EXPECT_EQ(again->moe->first_dense_layers, 1);
}

struct BadCase {
  std::string json;
  std::string culprit;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.culprit; }

class BadMoeConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadMoeConfigTest, ErrorNamesTheKey) {
  auto c = ParseConfigJson(GetParam().json, "dir/config.json");
  ASSERT_FALSE(c.ok()) << GetParam().json;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("dir/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().culprit));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, BadMoeConfigTest,
    ::testing::Values(
        BadCase{Json(R"("moe": 3)"), "'moe'"}, BadCase{Json(R"("moe": [1, 2])"), "'moe'"},
        BadCase{MoeJson(R"("num_experts_per_tok": 2, "moe_intermediate_size": 32)"),
                "'moe.num_routed_experts': missing"},
        BadCase{MoeJson(R"("num_routed_experts": 8, "moe_intermediate_size": 32)"),
                "'moe.num_experts_per_tok': missing"},
        BadCase{MoeJson(R"("num_routed_experts": 8, "num_experts_per_tok": 2)"),
                "'moe.moe_intermediate_size': missing"},
        BadCase{MoeJson(R"("num_routed_experts": 0, "num_experts_per_tok": 1,
                           "moe_intermediate_size": 32)"),
                "'moe.num_routed_experts'"},
        BadCase{MoeJson(R"("num_routed_experts": 8, "num_experts_per_tok": 9,
                           "moe_intermediate_size": 32)"),
                "'moe.num_experts_per_tok'"},
        BadCase{MoeJson(R"("num_routed_experts": 8, "num_experts_per_tok": 0,
                           "moe_intermediate_size": 32)"),
                "'moe.num_experts_per_tok'"},
        BadCase{MoeJson(R"("num_routed_experts": 8, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 0)"),
                "'moe.moe_intermediate_size'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "num_shared_experts": -1)"),
                "'moe.num_shared_experts'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "first_dense_layers": 5)"),
                "'moe.first_dense_layers'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "scoring": "relu")"), "'moe.scoring'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "scoring": 1)"), "'moe.scoring'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "norm_topk_prob": 1)"),
                "'moe.norm_topk_prob'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "routed_scaling_factor": 0)"),
                "'moe.routed_scaling_factor'"},
        BadCase{MoeJson(std::string(kMinimal) + R"(, "routed_scaling_factor": "x")"),
                "'moe.routed_scaling_factor'"},
        BadCase{MoeJson(R"("num_routed_experts": 8.5, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 32)"),
                "'moe.num_routed_experts'"},
        // Window-only layers need a window, and some layer must store global K/V.
        BadCase{Json(R"("sliding_window": 0, "global_kv_source": [-1, 1, 2, 3])"),
                "'global_kv_source': layer 0 has no global branch"},
        BadCase{Json(R"("global_kv_source": [-1, -1, -1, -1])"),
                "'global_kv_source': no layer is its own source"},
        BadCase{Json(R"("global_kv_source": [-2, 1, 2, 3])"), "'global_kv_source'"},
        BadCase{Json(R"("global_kv_source": [-1, 0, 2, 3])"), "'global_kv_source'"}));

TEST(WindowOnlyConfigTest, MinusOneMeansNoGlobalBranch) {
  auto c = ParseConfigJson(Json(R"("global_kv_source": [-1, 1, 2, -1])"), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->HasGlobalBranch(0));
  EXPECT_TRUE(c->HasGlobalBranch(1));
  EXPECT_FALSE(c->IsGlobalSource(0));
  EXPECT_EQ(c->NumGlobalSourceLayers(), 2);
  EXPECT_EQ(c->GlobalSlot(0), -1);
  EXPECT_EQ(c->GlobalSlot(1), 0);
  EXPECT_EQ(c->GlobalSlot(2), 1);
  EXPECT_EQ(c->GlobalSlot(3), -1);
  auto again = ParseConfigJson(ConfigToJson(*c), "again.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->global_kv_source, (std::vector<int>{-1, 1, 2, -1}));
}

TEST(MoeTensorsTest, NamesAndShapesOfDesignSection17) {
  auto c = ParseConfigJson(
      MoeJson(std::string(kMinimal) + R"(, "num_shared_experts": 2, "first_dense_layers": 1)"),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  c->global_kv_source = {-1, 1, 2, 2};
  ASSERT_TRUE(ValidateConfig(*c).ok()) << ValidateConfig(*c);
  std::vector<std::string> layer1, layer0;
  for (const TensorSpec& t : ExpectedTensors(*c)) {
    if (t.name.rfind("layers.1.", 0) == 0) layer1.push_back(t.name);
    if (t.name.rfind("layers.0.", 0) == 0) layer0.push_back(t.name);
    if (t.name == "layers.1.router") { EXPECT_EQ(t.shape, (std::vector<int64_t>{8, 64})); }
    if (t.name == "layers.1.experts.7.w_gate") { EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 64})); }
    if (t.name == "layers.1.experts.7.w_down") { EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 32})); }
    if (t.name == "layers.1.shared.w_up") { EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 64})); }
    if (t.name == "layers.1.shared.w_down") { EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 64})); }
  }
  // Layer 0: dense, window-only (no global_k/v); layer 1: MoE, its own source.
  EXPECT_THAT(layer0,
              ::testing::ElementsAre("layers.0.attn_norm", "layers.0.wq", "layers.0.local_k",
                                     "layers.0.local_v", "layers.0.wo", "layers.0.ffn_norm",
                                     "layers.0.w_gate", "layers.0.w_up", "layers.0.w_down"));
  EXPECT_EQ(layer1.size(), 8u + 1 + 8 * 3 + 3);
  EXPECT_THAT(layer1, ::testing::Contains("layers.1.global_k"));
  EXPECT_THAT(layer1, ::testing::Contains("layers.1.experts.0.w_up"));
  EXPECT_THAT(layer1, ::testing::Not(::testing::Contains("layers.1.w_gate")));
}

TEST(MoePresetsTest, ShapesOfTheMoePresets) {
  ModelConfig tiny = *PresetConfig("tiny-moe");
  EXPECT_EQ(tiny.global_kv_source, (std::vector<int>{-1, 1, 1, 3, 4, 4, 4, 4}));
  EXPECT_EQ(tiny.moe->num_routed_experts, 8);
  EXPECT_EQ(tiny.moe->first_dense_layers, 1);
  ModelConfig twin = *PresetConfig("tiny-moe-dec");
  EXPECT_TRUE(twin.IsDecoderOnly());
  EXPECT_TRUE(ValidateConfig(twin).ok());

  ModelConfig flash = *PresetConfig("deepseek-v4.1-flash");
  EXPECT_TRUE(PresetIsShapeOnly("deepseek-v4.1-flash"));
  EXPECT_TRUE(PresetIsShapeOnly("deepseek-v4.1-flash-dec"));
  EXPECT_FALSE(PresetIsShapeOnly("small-moe"));
  EXPECT_EQ(flash.num_layers, 40);
  EXPECT_EQ(flash.num_encoder_layers, 20);
  EXPECT_EQ(flash.hidden_size, 5120);
  EXPECT_EQ(flash.sliding_window, 128);
  EXPECT_EQ(flash.replay_window, 128);
  EXPECT_EQ(flash.moe->num_routed_experts, 384);
  EXPECT_EQ(flash.moe->num_shared_experts, 1);
  EXPECT_EQ(flash.moe->num_experts_per_tok, 6);
  EXPECT_EQ(flash.moe->moe_intermediate_size, 2304);
  // DESIGN.md §1.1: layers 0-1 none, 2-7 -> 2, 8-13 -> 8, 14-19 -> 14, 20-39 -> 20.
  for (int l = 0; l < 40; ++l) {
    const int want = l < 2 ? -1 : l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : 20;
    EXPECT_EQ(flash.global_kv_source[l], want) << l;
  }
  EXPECT_EQ(flash.NumGlobalSourceLayers(), 4);
}

}  // namespace
}  // namespace ced
