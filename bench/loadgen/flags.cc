#include "bench/loadgen/flags.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/common/host_port.h"

namespace ced::loadgen {

absl::StatusOr<std::vector<Target>> ParseTargets(const std::string& text) {
  std::vector<Target> out;
  std::set<std::string> labels;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    Target t;
    const size_t eq = item.find('=');
    t.label = eq == absl::string_view::npos ? "gateway" : std::string(item.substr(0, eq));
    t.address = std::string(eq == absl::string_view::npos ? item : item.substr(eq + 1));
    if (t.label.empty() || t.address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target: bad item '", item, "' (expected [label=]host:port)"));
    }
    if (absl::Status s = services::CheckPeerAddress("target", t.address); !s.ok()) return s;
    if (!labels.insert(t.label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target: label '", t.label, "' given twice (name each target)"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace ced::loadgen
