// HfTokenizer::Create: reads tokenizer.json and tokenizer_config.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf_tokenizer_impl.h"
#include "nlohmann/json.hpp"

namespace ced {
namespace {

using json = nlohmann::json;
using tokenizer_internal::AddedToken;

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  json parsed = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return parsed;
}

const json& Field(const json& object, const char* key) {
  static const json* const kNull = new json(nullptr);
  const auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

bool Flag(const json& object, const char* key, bool fallback) {
  const json& v = Field(object, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

// The id of the token spelled `content`: an added token's, else the vocabulary's.
int IdOf(const HfTokenizer::Impl& impl, const std::string& content) {
  if (const auto it = impl.added_by_content.find(content); it != impl.added_by_content.end()) {
    return impl.added[it->second].id;
  }
  return impl.model->IdOfToken(content);
}

// bos_token / eos_token of tokenizer_config.json: a string, an AddedToken
// object ({"content": ...}) or null. -1 when absent; an error when unknown.
absl::StatusOr<int> ConfigTokenId(const HfTokenizer::Impl& impl, const json& config,
                                  const char* key, const std::string& where) {
  const json& v = Field(config, key);
  std::string content;
  if (v.is_string()) {
    content = v.get<std::string>();
  } else if (v.is_object() && Field(v, "content").is_string()) {
    content = Field(v, "content").get<std::string>();
  } else if (v.is_null()) {
    return -1;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, ": expected a string, an object with \"content\" or null"));
  }
  const int id = IdOf(impl, content);
  if (id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, ": \"", content, "\" is not a token of the tokenizer"));
  }
  return id;
}

absl::Status ReadPostProcessor(const HfTokenizer::Impl& impl, const json& config,
                               const std::string& where, std::vector<int>* prefix,
                               std::vector<int>* suffix) {
  if (config.is_null()) return absl::OkStatus();
  const std::string type =
      Field(config, "type").is_string() ? config["type"].get<std::string>() : "";
  if (type == "ByteLevel") return absl::OkStatus();  // changes no ids
  if (type == "Sequence") {
    const json& list = Field(config, "processors");
    for (size_t i = 0; list.is_array() && i < list.size(); ++i) {
      if (absl::Status s = ReadPostProcessor(
              impl, list[i], absl::StrCat(where, ".processors[", i, "]"), prefix, suffix);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    const json& single = Field(config, "single");
    if (!single.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".single: expected an array"));
    }
    bool after_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const json& special = Field(item, "SpecialToken");
      if (!Field(special, "id").is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".single[", i, "]: expected SpecialToken or Sequence"));
      }
      const std::string name = special["id"].get<std::string>();
      std::vector<int> ids;
      const json& listed = Field(Field(Field(config, "special_tokens"), name.c_str()), "ids");
      if (listed.is_array()) {
        for (const json& id : listed) {
          if (id.is_number_integer()) ids.push_back(id.get<int>());
        }
      } else if (int id = IdOf(impl, name); id >= 0) {
        ids.push_back(id);
      }
      if (ids.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".single[", i, "]: special token \"", name, "\" is unknown"));
      }
      (after_sequence ? suffix : prefix)
          ->insert((after_sequence ? suffix : prefix)->end(), ids.begin(), ids.end());
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ": post-processor type \"", type,
                   "\" is not supported (supported: ByteLevel, TemplateProcessing, Sequence)"));
}

absl::Status ReadAddedTokens(const json& list, const std::string& where, HfTokenizer::Impl* impl) {
  if (list.is_null()) return absl::OkStatus();
  if (!list.is_array())
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an array"));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!Field(t, "content").is_string() || !Field(t, "id").is_number_integer() ||
        t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "[", i, "]: expected \"content\" (string) and \"id\" (>= 0)"));
    }
    AddedToken token;
    token.content = t["content"].get<std::string>();
    token.id = t["id"].get<int>();
    token.special = Flag(t, "special", false);
    token.lstrip = Flag(t, "lstrip", false);
    token.rstrip = Flag(t, "rstrip", false);
    token.single_word = Flag(t, "single_word", false);
    token.normalized = Flag(t, "normalized", !token.special);
    impl->added.push_back(std::move(token));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(const Options& options) {
  const std::string& path = options.tokenizer_json;
  auto root = ReadJson(path);
  if (!root.ok()) return root.status();
  auto impl = std::make_unique<Impl>();
  try {
    auto normalizer =
        tokenizer_internal::CreateNormalizer(Field(*root, "normalizer"), path + ": normalizer");
    if (!normalizer.ok()) return normalizer.status();
    impl->normalizer = std::move(normalizer).value();
    auto pre = tokenizer_internal::CreatePreTokenizer(Field(*root, "pre_tokenizer"),
                                                      path + ": pre_tokenizer");
    if (!pre.ok()) return pre.status();
    impl->pre_tokenizer = std::move(pre).value();
    const json& decoder = Field(*root, "decoder");
    if (!impl->pre_tokenizer.byte_level || Field(decoder, "type") != "ByteLevel") {
      return absl::UnimplementedError(absl::StrCat(
          path,
          ": only byte-level tokenizers are supported (pre_tokenizer ending with ByteLevel, "
          "decoder ByteLevel); decoder is ",
          decoder.is_null() ? "null" : Field(decoder, "type").dump()));
    }
    auto model = tokenizer_internal::BpeModel::Create(Field(*root, "model"), path + ": model");
    if (!model.ok()) return model.status();
    impl->model = std::move(model).value();
    if (absl::Status s =
            ReadAddedTokens(Field(*root, "added_tokens"), path + ": added_tokens", impl.get());
        !s.ok()) {
      return s;
    }

    // Added tokens: matched before normalization, or after it when normalized
    // (and a normalizer exists), as the reference does.
    std::vector<std::string> unnormalized, normalized;
    std::string scratch;
    int id_end = impl->model->id_end();
    for (size_t i = 0; i < impl->added.size(); ++i) {
      const AddedToken& t = impl->added[i];
      id_end = std::max(id_end, t.id + 1);
      impl->added_by_content.insert_or_assign(t.content, static_cast<int>(i));
      impl->added_by_id.insert_or_assign(t.id, static_cast<int>(i));
      if (t.normalized && impl->normalizer != nullptr) {
        const std::string content(impl->normalizer->Apply(t.content, &scratch));
        impl->added_by_content.insert_or_assign(content, static_cast<int>(i));
        normalized.push_back(content);
      } else {
        unnormalized.push_back(t.content);
      }
    }
    for (const auto& [content, index] : impl->added_by_content) {
      impl->max_added_bytes = std::max(impl->max_added_bytes, content.size());
    }
    impl->split_unnormalized = std::make_unique<tokenizer_internal::WordSplitter>(unnormalized);
    impl->split_normalized = std::make_unique<tokenizer_internal::WordSplitter>(normalized);
    impl->kind.assign(id_end, Impl::Kind::kNone);
    for (int id = 0; id < impl->model->id_end(); ++id) {
      if (impl->model->TokenBytes(id) != nullptr) impl->kind[id] = Impl::Kind::kModel;
    }
    for (const AddedToken& t : impl->added) {
      impl->kind[t.id] = t.special ? Impl::Kind::kSpecial : Impl::Kind::kAdded;
    }

    if (absl::Status s =
            ReadPostProcessor(*impl, Field(*root, "post_processor"), path + ": post_processor",
                              &impl->prefix_ids, &impl->suffix_ids);
        !s.ok()) {
      return s;
    }
    if (!impl->prefix_ids.empty()) impl->bos_id = impl->prefix_ids.front();
    if (!impl->suffix_ids.empty()) impl->eos_id = impl->suffix_ids.back();

    std::string config_path = options.tokenizer_config;
    if (config_path.empty()) {
      const auto beside = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
      std::error_code ec;
      if (std::filesystem::exists(beside, ec)) config_path = beside.string();
    }
    if (!config_path.empty()) {
      auto config = ReadJson(config_path);
      if (!config.ok()) return config.status();
      auto bos = ConfigTokenId(*impl, *config, "bos_token", config_path);
      if (!bos.ok()) return bos.status();
      auto eos = ConfigTokenId(*impl, *config, "eos_token", config_path);
      if (!eos.ok()) return eos.status();
      if (*bos >= 0) impl->bos_id = *bos;
      if (*eos >= 0) impl->eos_id = *eos;
      // add_bos_token / add_eos_token decide, when present (as transformers'
      // Llama tokenizers rebuild their template from them).
      if (Field(*config, "add_bos_token").is_boolean()) {
        impl->prefix_ids.clear();
        if (Flag(*config, "add_bos_token", false) && impl->bos_id >= 0) {
          impl->prefix_ids.push_back(impl->bos_id);
        }
      }
      if (Field(*config, "add_eos_token").is_boolean()) {
        impl->suffix_ids.clear();
        if (Flag(*config, "add_eos_token", false) && impl->eos_id >= 0) {
          impl->suffix_ids.push_back(impl->eos_id);
        }
      }
      const json& extra = Field(*config, "additional_special_tokens");
      for (size_t i = 0; extra.is_array() && i < extra.size(); ++i) {
        const json& v = extra[i];
        const json& content = v.is_object() ? Field(v, "content") : v;
        if (!content.is_string()) continue;
        const int id = IdOf(*impl, content.get<std::string>());
        if (id >= 0 && id < id_end) impl->kind[id] = Impl::Kind::kSpecial;
      }
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected JSON: ", e.what()));
  }
  const int id_end = static_cast<int>(impl->kind.size());
  impl->vocab_size = options.vocab_size > 0 ? options.vocab_size : id_end;
  if (impl->vocab_size < id_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer has ids up to ", id_end - 1, " but the model's vocab_size is ",
        impl->vocab_size, " (it needs >= ", id_end, ")"));
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

}  // namespace ced
