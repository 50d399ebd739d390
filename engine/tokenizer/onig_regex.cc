#include "engine/tokenizer/onig_regex.h"

#include <oniguruma.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8_scan.h"

namespace ced::tokenizer_internal {
namespace {

void InitializeOniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

// One match region per thread, reused across calls.
struct RegionDeleter {
  void operator()(OnigRegion* region) const { onig_region_free(region, /*free_self=*/1); }
};

OnigRegion* ThreadRegion() {
  thread_local std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  return region.get();
}

}  // namespace

absl::StatusOr<std::unique_ptr<OnigRegex>> OnigRegex::Create(std::string_view pattern,
                                                             std::string_view what) {
  InitializeOniguruma();
  regex_t* regex = nullptr;
  OnigErrorInfo info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&regex, begin, begin + pattern.size(), ONIG_OPTION_IGNORECASE_IS_ASCII,
                          ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": regex /", std::string(pattern),
                     "/ does not compile: ", reinterpret_cast<const char*>(message)));
  }
  return std::unique_ptr<OnigRegex>(new OnigRegex(regex));
}

OnigRegex::~OnigRegex() { onig_free(static_cast<regex_t*>(regex_)); }

void OnigRegex::Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* regex = static_cast<regex_t*>(regex_);
  OnigRegion* region = ThreadRegion();
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = str + text.size();
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = onig_search(regex, str, end, str + start, end, region, ONIG_OPTION_NONE);
    if (rc < 0) break;  // ONIG_MISMATCH (or an error: no further matches)
    const auto b = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    if (e > b) {
      out->emplace_back(b, e);
      start = e;
    } else {
      if (e >= text.size()) break;
      start = e + Utf8CharLength(static_cast<unsigned char>(text[e]));
    }
  }
}

bool OnigRegex::MatchesWhole(std::string_view text) const {
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = str + text.size();
  const int rc = onig_match(static_cast<regex_t*>(regex_), str, end, str, ThreadRegion(),
                            ONIG_OPTION_NONE);
  return rc >= 0 && static_cast<size_t>(rc) == text.size();
}

}  // namespace ced::tokenizer_internal
