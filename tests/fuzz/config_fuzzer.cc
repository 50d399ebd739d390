// libFuzzer harness for the model config reader (ParseConfigJson): any text
// as config.json. An accepted config must pass ValidateConfig and survive a
// round trip through ConfigToJson unchanged.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/model/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool SameConfig(const ced::ModelConfig& a, const ced::ModelConfig& b) {
  // Bitwise for the doubles: a round trip must not perturb them.
  return a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.intermediate_size == b.intermediate_size &&
         a.num_encoder_layers == b.num_encoder_layers && a.sliding_window == b.sliding_window &&
         a.replay_window == b.replay_window && a.global_kv_source == b.global_kv_source &&
         std::memcmp(&a.rope_theta, &b.rope_theta, sizeof(double)) == 0 &&
         std::memcmp(&a.rms_norm_eps, &b.rms_norm_eps, sizeof(double)) == 0 &&
         a.max_position == b.max_position && a.kv_cache_dtype == b.kv_cache_dtype;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = ced::ParseConfigJson(text, "config.json");
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(config.status().message().rfind("config.json", 0) == 0);
    return 0;
  }
  FUZZ_CHECK(ced::ValidateConfig(*config).ok());
  const std::string json = ced::ConfigToJson(*config);
  auto again = ced::ParseConfigJson(json, "config.json");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameConfig(*config, *again));
  return 0;
}
