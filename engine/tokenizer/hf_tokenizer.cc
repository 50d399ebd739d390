// HfTokenizer: encoding and token bytes (loading is in hf_tokenizer_load.cc).
#include <cstring>
#include <deque>

#include "engine/tokenizer/hf_tokenizer_impl.h"
#include "engine/tokenizer/utf8.h"
#include "engine/tokenizer/utf8_scan.h"

namespace ced {
namespace {

using tokenizer_internal::AddedToken;
using tokenizer_internal::JsTrimEnd;
using tokenizer_internal::JsTrimStart;

// True when `text` is well-formed UTF-8 (Unicode Table 3-7).
bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Per-thread buffers reused by Encode.
struct Scratch {
  std::vector<std::string_view> pieces, next;
  std::deque<std::string> arena;
};

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

int HfTokenizer::bos_id() const { return impl_->bos_id; }
int HfTokenizer::eos_id() const { return impl_->eos_id; }
int HfTokenizer::vocab_size() const { return impl_->vocab_size; }
int HfTokenizer::token_id_end() const { return static_cast<int>(impl_->kind.size()); }
bool HfTokenizer::adds_special_tokens() const {
  return !impl_->prefix_ids.empty() || !impl_->suffix_ids.empty();
}

bool HfTokenizer::IsSpecial(int id) const {
  return id >= 0 && id < token_id_end() && impl_->kind[id] == Impl::Kind::kSpecial;
}

std::string HfTokenizer::TokenBytes(int id) const {
  if (id < 0 || id >= token_id_end()) return std::string();
  switch (impl_->kind[id]) {
    case Impl::Kind::kModel:
      return *impl_->model->TokenBytes(id);
    case Impl::Kind::kAdded: {
      const auto it = impl_->added_by_id.find(id);
      return it == impl_->added_by_id.end() ? std::string() : impl_->added[it->second].content;
    }
    default:
      return std::string();
  }
}

namespace {

// The added token `section` is, or null.
const AddedToken* FindAdded(const HfTokenizer::Impl& impl, std::string_view section) {
  if (section.size() > impl.max_added_bytes || impl.added_by_content.empty()) return nullptr;
  const auto it = impl.added_by_content.find(absl::string_view(section.data(), section.size()));
  return it == impl.added_by_content.end() ? nullptr : &impl.added[it->second];
}

// lstrip/rstrip of the added tokens among `sections`, in the reference's order.
void StripBesideAddedTokens(const HfTokenizer::Impl& impl,
                            std::vector<std::string_view>* sections) {
  auto& s = *sections;
  for (size_t i = 0; i < s.size(); ++i) {
    const AddedToken* token = FindAdded(impl, s[i]);
    if (token == nullptr) continue;
    if (token->lstrip && i > 0) s[i - 1] = JsTrimEnd(s[i - 1]);
    if (token->rstrip && i + 1 < s.size()) s[i + 1] = JsTrimStart(s[i + 1]);
  }
}

void EncodeWithModel(const HfTokenizer::Impl& impl, std::string_view text, Scratch* scratch,
                     std::vector<int>* ids) {
  auto& pieces = scratch->pieces;
  auto& next = scratch->next;
  pieces.assign(1, text);
  scratch->arena.clear();
  for (const auto& step : impl.pre_tokenizer.steps) {
    next.clear();
    for (std::string_view piece : pieces) step->Split(piece, &scratch->arena, &next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) impl.model->Encode(piece, ids);
}

}  // namespace

std::vector<int> HfTokenizer::Encode(std::string_view text, bool add_bos) const {
  const Impl& impl = *impl_;
  std::string valid;
  if (!IsValidUtf8(text)) {
    valid = ToValidUtf8(text);
    text = valid;
  }
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_bos) ids.insert(ids.end(), impl.prefix_ids.begin(), impl.prefix_ids.end());
  thread_local Scratch scratch;
  // Sections are views of `text`; subsections of the normalized section.
  std::vector<std::string_view> sections;
  impl.split_unnormalized->Split(text, &sections);
  StripBesideAddedTokens(impl, &sections);
  std::string normalized_section;
  std::vector<std::string_view> subsections;
  for (std::string_view section : sections) {
    if (section.empty()) continue;
    if (const AddedToken* token = FindAdded(impl, section)) {
      ids.push_back(token->id);
      continue;
    }
    std::string_view normalized =
        impl.normalizer ? impl.normalizer->Apply(section, &normalized_section) : section;
    if (normalized.empty()) continue;
    subsections.clear();
    impl.split_normalized->Split(normalized, &subsections);
    StripBesideAddedTokens(impl, &subsections);
    for (std::string_view sub : subsections) {
      if (sub.empty()) continue;
      if (const AddedToken* token = FindAdded(impl, sub)) {
        ids.push_back(token->id);
        continue;
      }
      EncodeWithModel(impl, sub, &scratch, &ids);
    }
  }
  if (add_bos) ids.insert(ids.end(), impl.suffix_ids.begin(), impl.suffix_ids.end());
  return ids;
}

}  // namespace ced
