#include "engine/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8_scan.h"
#include "nlohmann/json.hpp"

namespace ced::tokenizer_internal {
namespace {

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Code points below kQuickLimit that no canonical composition or reordering
// can touch: combining class 0, unchanged by NFC alone, and never a non-first
// part of a canonical decomposition (so never composed with what precedes).
// Text made only of these is its own NFC (and NFD when also undecomposable).
constexpr char32_t kQuickLimit = 0x30000;

const std::vector<bool>& NfcInert() {
  static const std::vector<bool>* const table = [] {
    auto* inert = new std::vector<bool>(kQuickLimit, false);
    std::vector<bool> second(kQuickLimit, false);
    utf8proc_int32_t parts[8];
    for (char32_t cp = 0; cp < kQuickLimit; ++cp) {
      int boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), parts,
                                                         8, UTF8PROC_DECOMPOSE, &boundclass);
      for (utf8proc_ssize_t i = 1; i < n && i < 8; ++i) {
        if (static_cast<char32_t>(parts[i]) < kQuickLimit) second[parts[i]] = true;
      }
    }
    for (char32_t cp = 0; cp < kQuickLimit; ++cp) {
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      if (p->combining_class != 0 || second[cp] || (cp >= 0xD800 && cp < 0xE000)) continue;
      utf8proc_int32_t one = static_cast<utf8proc_int32_t>(cp);
      utf8proc_int32_t buffer[8];
      int boundclass = 0;
      const utf8proc_ssize_t n =
          utf8proc_decompose_char(one, buffer, 8, UTF8PROC_DECOMPOSE, &boundclass);
      // Undecomposable characters, and composites that recompose to themselves.
      bool stable = n == 1 && buffer[0] == one;
      if (!stable && n > 1) {
        utf8proc_uint8_t bytes[4];
        const utf8proc_ssize_t len = utf8proc_encode_char(one, bytes);
        utf8proc_uint8_t* mapped = nullptr;
        const utf8proc_ssize_t m =
            utf8proc_map(bytes, len, &mapped,
                         static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        stable = m == len && std::equal(bytes, bytes + len, mapped);
        std::free(mapped);
      }
      (*inert)[cp] = stable;
    }
    return inert;
  }();
  return *table;
}

// True when NFC leaves `text` (well-formed UTF-8) as it is, by the table above.
bool NfcQuickYes(std::string_view text) {
  const std::vector<bool>& inert = NfcInert();
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const char32_t cp = NextCodePoint(text, &pos);
    if (cp >= kQuickLimit || !inert[cp]) return false;
  }
  return true;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(utf8proc_option_t options, bool nfc) : options_(options), nfc_(nfc) {
    if (nfc_) NfcInert();  // built once per process, here rather than on first use
  }
  std::string_view Apply(std::string_view text, std::string* scratch) const override {
    if (IsAscii(text)) return text;  // every form leaves ASCII as it is
    if (nfc_ && NfcQuickYes(text)) return text;
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &mapped, options_);
    if (n < 0) return text;  // not reached: the input is well-formed UTF-8
    scratch->assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
    return *scratch;
  }

 private:
  utf8proc_option_t options_;
  bool nfc_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string_view Apply(std::string_view text, std::string* scratch) const override {
    std::string step_scratch;
    for (const auto& step : steps_) {
      std::string_view next = step->Apply(text, &step_scratch);
      if (next.data() == step_scratch.data()) {
        scratch->swap(step_scratch);
        text = *scratch;
      } else {
        text = next;
      }
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config,
                                                             const std::string& where) {
  if (config.is_null()) return nullptr;
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with a \"type\""));
  }
  const std::string type = config["type"].get<std::string>();
  const auto stable = static_cast<utf8proc_option_t>(UTF8PROC_STABLE);
  if (type == "NFC") {
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE), /*nfc=*/true);
  }
  if (type == "NFD") {
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE), false);
  }
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT), false);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT), false);
  }
  if (type == "Sequence") {
    const nlohmann::json& list =
        config.contains("normalizers") ? config["normalizers"] : nlohmann::json::array();
    if (!list.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".normalizers: expected an array"));
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = CreateNormalizer(list[i], absl::StrCat(where, ".normalizers[", i, "]"));
      if (!step.ok()) return step.status();
      if (*step != nullptr) steps.push_back(std::move(step).value());
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ": normalizer type \"", type,
                   "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)"));
}

}  // namespace ced::tokenizer_internal
