// `ced model make` and `ced model info`.
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/accounting/accounting.h"
#include "engine/model/presets.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "kernels/cpu/isa.h"
#include "services/cli/commands.h"
#include "services/cli/flags.h"

namespace ced::cli {
namespace {

int ModelMake(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"preset", "tiny", "one of: " + absl::StrJoin(PresetNames(), ", ")},
      {"seed", "0", "weights seed: the same seed writes the same bytes"},
      {"out", "", "output directory (created when missing)"},
      {"dtype", "f32", "stored weight type: f32, bf16 or f16"},
      {"shape-only", "", "write only config.json (implied by the llama3-70b presets)", true},
      {"tokenizer", "",
       "tokenizer.json (or a directory holding it) to attach: copied into --out with the "
       "tokenizer_config.json beside it; vocab_size becomes the tokenizer's size"},
  };
  auto flags = Flags::Parse(specs, args);
  if (!flags.ok()) return Fail("model make", std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", FormatHelp("ced model make --preset NAME --seed S --out DIR",
                                 "Writes config.json and model.safetensors with deterministic "
                                 "synthetic weights; with --tokenizer, a real tokenizer too.",
                                 specs)
                          .c_str());
    return 0;
  }
  if (flags->Get("out").empty()) return Fail("model make", "--out is required", 2);
  auto seed = flags->GetInt("seed");
  if (!seed.ok()) return Fail("model make", std::string(seed.status().message()), 2);
  if (*seed < 0) {
    return Fail("model make", absl::StrCat("--seed must be >= 0, got ", *seed), 2);
  }
  MakeModelOptions o;
  o.preset = flags->Get("preset");
  o.seed = static_cast<uint64_t>(*seed);
  o.out_dir = flags->Get("out");
  o.dtype = flags->Get("dtype");
  o.shape_only = flags->GetBool("shape-only");
  namespace fs = std::filesystem;
  fs::path tokenizer_json;
  if (!flags->Get("tokenizer").empty()) {
    tokenizer_json = flags->Get("tokenizer");
    std::error_code ec;
    if (fs::is_directory(tokenizer_json, ec)) tokenizer_json /= "tokenizer.json";
    auto tokenizer = HfTokenizer::Create({tokenizer_json.string(), "", 0});
    if (!tokenizer.ok()) return Fail("model make", std::string(tokenizer.status().message()));
    auto config = PresetConfig(o.preset);
    if (!config.ok()) return Fail("model make", std::string(config.status().message()), 2);
    config->vocab_size = (*tokenizer)->token_id_end();
    o.config = *config;
    o.shape_only |= PresetIsShapeOnly(o.preset);
  }
  if (absl::Status s = MakeModel(o); !s.ok()) {
    return Fail("model make", std::string(s.message()));
  }
  if (!tokenizer_json.empty()) {
    const fs::path config_json = tokenizer_json.parent_path() / "tokenizer_config.json";
    std::error_code ec;
    for (const fs::path& from : {tokenizer_json, config_json}) {
      if (from == config_json && !fs::exists(from, ec)) continue;
      const fs::path to = fs::path(o.out_dir) / from.filename();
      if (!fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec)) {
        return Fail("model make", absl::StrCat("cannot copy ", from.string(), " to ", to.string(),
                                               ": ", ec.message()));
      }
    }
    std::printf("attached tokenizer %s (vocab_size %d)\n", tokenizer_json.string().c_str(),
                o.config->vocab_size);
  }
  std::printf("wrote %s model '%s' (seed %llu) to %s\n",
              (o.shape_only || PresetIsShapeOnly(o.preset)) ? "shape-only" : o.dtype.c_str(),
              o.preset.c_str(), static_cast<unsigned long long>(o.seed), o.out_dir.c_str());
  return 0;
}

int ModelInfo(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"model", "", "model directory (or give it as the first argument)"},
      {"preset", "", "describe a preset instead of a directory"},
  };
  auto flags = Flags::Parse(specs, args);
  if (!flags.ok()) return Fail("model info", std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", FormatHelp("ced model info (DIR | --preset NAME)",
                                 "Prints the model's shape, matmul parameters per prompt and "
                                 "generated token, K/V bytes per token per cache format and "
                                 "what a prefill or decode instance must hold.",
                                 specs)
                          .c_str());
    return 0;
  }
  absl::StatusOr<ModelConfig> config;
  std::string label;
  if (!flags->Get("preset").empty()) {
    label = "preset " + flags->Get("preset");
    config = PresetConfig(flags->Get("preset"));
  } else {
    std::string dir = flags->Get("model");
    if (dir.empty() && !flags->positional().empty()) dir = flags->positional()[0];
    if (dir.empty()) return Fail("model info", "give a model directory (or --preset)", 2);
    label = dir;
    config = LoadConfigFile(dir + "/config.json");
  }
  if (!config.ok()) return Fail("model info", std::string(config.status().message()));
  std::printf("model: %s\n%s", label.c_str(),
              FormatAccounting(*config, ComputeAccounting(*config)).c_str());
  // The CPU kernels this process would run the model with (CED_CPU_ISA forces one).
  std::printf("cpu kernels: %s\n", kernels::CpuIsaSummary().c_str());
  return 0;
}

}  // namespace

void AddModelCommands(std::vector<Command>* commands) {
  commands->push_back(
      {"model make", "write a synthetic model (config.json + safetensors)", ModelMake});
  commands->push_back({"model info", "parameter, FLOP and K/V accounting of a model", ModelInfo});
}

}  // namespace ced::cli
