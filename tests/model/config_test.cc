#include "engine/model/config.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"

namespace ced {
namespace {

using ::testing::HasSubstr;

// A valid tiny-shaped config; `extra` is spliced in as additional keys
// (a later duplicate key wins in the parser).
std::string Json(const std::string& extra = "") {
  std::string s = R"({"vocab_size": 260, "hidden_size": 64, "num_layers": 4, "num_heads": 4,
      "num_kv_heads": 2, "head_dim": 16, "intermediate_size": 128)";
  if (!extra.empty()) s += ", " + extra;
  return s + "}";
}

TEST(ConfigTest, DefaultsFilledIn) {
  auto c = ParseConfigJson(Json(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_encoder_layers, 2);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->replay_window, 1);
  EXPECT_EQ(c->global_kv_source, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->max_position, 8192);
  EXPECT_EQ(c->kv_cache_dtype, KvFormat::kF32);
  EXPECT_FALSE(c->IsDecoderOnly());
  EXPECT_EQ(c->QDim(), 64);
  EXPECT_EQ(c->KvDim(), 32);
}

TEST(ConfigTest, ReplayDefaultFollowsWindow) {
  auto c = ParseConfigJson(Json(R"("sliding_window": 8)"), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->replay_window, 8);
}

TEST(ConfigTest, ExplicitValuesAndRoundTrip) {
  auto c = ParseConfigJson(Json(R"("num_encoder_layers": 4, "sliding_window": 4,
      "replay_window": 9, "global_kv_source": [0, 0, 2, 2], "rope_theta": 10000,
      "rms_norm_eps": 1e-6, "max_position": 512, "kv_cache_dtype": "fp4_e2m1",
      "some_unknown_key": true)"),
                           "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->IsDecoderOnly());
  EXPECT_EQ(c->kv_cache_dtype, KvFormat::kFP4E2M1);
  const std::string text = ConfigToJson(*c);
  for (const char* key :
       {"vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
        "intermediate_size", "num_encoder_layers", "sliding_window", "replay_window",
        "global_kv_source", "rope_theta", "rms_norm_eps", "max_position", "kv_cache_dtype"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\"") + key + "\"")) << key;
  }
  auto back = ParseConfigJson(text, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_encoder_layers, 4);
  EXPECT_EQ(back->replay_window, 9);
  EXPECT_EQ(back->global_kv_source, (std::vector<int>{0, 0, 2, 2}));
  EXPECT_EQ(back->rope_theta, 10000.0);
  EXPECT_EQ(back->rms_norm_eps, 1e-6);
  EXPECT_EQ(back->max_position, 512);
  EXPECT_EQ(back->kv_cache_dtype, KvFormat::kFP4E2M1);
  EXPECT_EQ(ConfigToJson(*back), text);
}

TEST(ConfigTest, DefaultSourcesWrittenAsList) {
  auto c = ParseConfigJson(Json(), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(ConfigToJson(*c), HasSubstr("\"global_kv_source\": ["));
}

TEST(ConfigTest, GlobalSlotsAndSourceCount) {
  auto c = ParseConfigJson(
      Json(R"("num_layers": 8, "num_encoder_layers": 4, "global_kv_source": [0,0,2,2,4,4,6,6])"),
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->NumGlobalSourceLayers(), 4);
  EXPECT_EQ(c->GlobalSlot(0), 0);
  EXPECT_EQ(c->GlobalSlot(1), -1);
  EXPECT_EQ(c->GlobalSlot(2), 1);
  EXPECT_EQ(c->GlobalSlot(4), 2);
  EXPECT_EQ(c->GlobalSlot(6), 3);
  EXPECT_EQ(c->GlobalSlot(7), -1);
  EXPECT_TRUE(c->IsGlobalSource(4));
  EXPECT_FALSE(c->IsGlobalSource(5));
}

TEST(ConfigTest, ExactReplayWindow) {
  auto c = ParseConfigJson(Json(R"("num_layers": 8, "num_encoder_layers": 4,
      "sliding_window": 16)"),
                           "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ExactReplayWindow(), 4 * 15 + 1);
  c->sliding_window = 0;
  EXPECT_EQ(c->ExactReplayWindow(), 1);
  c->sliding_window = 1;
  EXPECT_EQ(c->ExactReplayWindow(), 1);
  c->sliding_window = 16;
  c->num_encoder_layers = 8;
  EXPECT_EQ(c->ExactReplayWindow(), 1);
}

struct BadCase {
  std::string extra;    // keys spliced into a valid config
  std::string culprit;  // must appear in the message
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.extra; }

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, ErrorNamesTheKey) {
  auto c = ParseConfigJson(Json(GetParam().extra), "dir/config.json");
  ASSERT_FALSE(c.ok()) << GetParam().extra;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("dir/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().culprit));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, BadConfigTest,
    ::testing::Values(
        BadCase{R"("hidden_size": "64")", "'hidden_size'"},
        BadCase{R"("num_layers": 4.5)", "'num_layers'"},
        BadCase{R"("vocab_size": 100)", "'vocab_size'"},
        BadCase{R"("hidden_size": 0)", "'hidden_size'"},
        BadCase{R"("intermediate_size": -3)", "'intermediate_size'"},
        BadCase{R"("num_layers": 0)", "'num_layers'"},
        BadCase{R"("num_layers": 2000000000)", "'num_layers'"},
        BadCase{R"("num_heads": 99999999999)", "'num_heads'"},
        BadCase{R"("num_kv_heads": 3)", "'num_kv_heads'"},
        BadCase{R"("head_dim": 15)", "'head_dim'"},
        BadCase{R"("num_encoder_layers": 0)", "'num_encoder_layers'"},
        BadCase{R"("num_encoder_layers": 5)", "'num_encoder_layers'"},
        BadCase{R"("sliding_window": -1)", "'sliding_window'"},
        BadCase{R"("sliding_window": 8, "replay_window": 7)", "'replay_window'"},
        BadCase{R"("replay_window": 0)", "'replay_window'"},
        BadCase{R"("global_kv_source": [0, 1, 2])", "'global_kv_source'"},
        BadCase{R"("global_kv_source": [0, 2, 2, 3])", "'global_kv_source'"},  // future
        BadCase{R"("global_kv_source": [0, 1, 1, 3])", "'global_kv_source'"},  // other half
        BadCase{R"("global_kv_source": [0, 1, 1, 2], "num_encoder_layers": 4)",
                "'global_kv_source'"},
        BadCase{R"("global_kv_source": [0, 0, 1, 3], "num_encoder_layers": 4)",
                "'global_kv_source'"},
        BadCase{R"("global_kv_source": [0, -1, 2, 3])", "'global_kv_source'"},
        BadCase{R"("global_kv_source": "all")", "'global_kv_source'"},
        BadCase{R"("global_kv_source": [0, 1.5, 2, 3])", "'global_kv_source'"},
        BadCase{R"("rope_theta": -1)", "'rope_theta'"},
        BadCase{R"("rope_theta": "big")", "'rope_theta'"},
        BadCase{R"("rms_norm_eps": 0)", "'rms_norm_eps'"},
        BadCase{R"("max_position": 0)", "'max_position'"},
        BadCase{R"("kv_cache_dtype": "int3")", "'kv_cache_dtype'"},
        BadCase{R"("kv_cache_dtype": 4)", "'kv_cache_dtype'"},
        BadCase{R"("num_kv_heads": 1, "head_dim": 8, "num_heads": 1, "kv_cache_dtype": "fp4_e2m1")",
                "'kv_cache_dtype'"}));

TEST(ConfigTest, MissingRequiredKeyIsNamed) {
  auto c = ParseConfigJson(R"({"vocab_size": 260, "hidden_size": 64, "num_layers": 4,
      "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128})",
                           "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("'head_dim'"));
}

TEST(ConfigTest, InvalidJsonNamesFileAndByte) {
  auto c = ParseConfigJson("{\"vocab_size\": 260,, }", "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("m/config.json: invalid JSON at byte"));
  auto arr = ParseConfigJson("[1, 2]", "config.json");
  ASSERT_FALSE(arr.ok());
  EXPECT_THAT(std::string(arr.status().message()), HasSubstr("JSON object"));
  EXPECT_FALSE(ParseConfigJson("", "config.json").ok());
}

TEST(ConfigTest, HostileTextIsAnErrorNotACrash) {
  const std::string deep(100000, '[');
  auto c = ParseConfigJson(deep + std::string(100000, ']'), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("nests too deeply"));
  c = ParseConfigJson(Json(R"("global_kv_source": [0, )" + deep + "]"), "config.json");
  EXPECT_FALSE(c.ok());
  // Mutations of a valid config: each parses or fails cleanly, never crashes.
  const std::string valid = Json(R"("sliding_window": 4, "global_kv_source": [0, 0, 2, 2])");
  const std::string alphabet = "0123456789-.eE,:[]{}\" x";
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string t = valid;
    for (int k = 0; k < 2; ++k) t[next() % t.size()] = alphabet[next() % alphabet.size()];
    rejected += !ParseConfigJson(t, "config.json").ok();
  }
  EXPECT_GT(rejected, 1000);
}

TEST(ConfigTest, ValidateCatchesHandBuiltMistakes) {
  auto c = ParseConfigJson(Json(), "config.json");
  ASSERT_TRUE(c.ok());
  ModelConfig bad = *c;
  bad.global_kv_source.pop_back();
  EXPECT_THAT(std::string(ValidateConfig(bad).message()), HasSubstr("global_kv_source"));
  bad = *c;
  bad.sliding_window = 32;
  bad.replay_window = 8;
  EXPECT_THAT(std::string(ValidateConfig(bad).message()), HasSubstr("replay_window"));
  EXPECT_TRUE(ValidateConfig(*c).ok());
}

TEST(ConfigTest, LoadConfigFile) {
  testing::ScratchDir dir;
  auto missing = LoadConfigFile(dir.Sub("config.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("config.json"));
  testing::WriteFile(dir.Sub("config.json"), Json());
  auto c = LoadConfigFile(dir.Sub("config.json"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 64);
}

}  // namespace
}  // namespace ced
