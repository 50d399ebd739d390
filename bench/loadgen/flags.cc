#include "bench/loadgen/flags.h"

#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ced::loadgen {

void FlagSet::Int(const std::string& name, int64_t* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kInt, value});
}
void FlagSet::Double(const std::string& name, double* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kDouble, value});
}
void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, *value, Kind::kString, value});
}
void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, *value ? "true" : "false", Kind::kBool, value});
}

absl::Status FlagSet::Set(const Flag& flag, const std::string& text) const {
  bool ok = true;
  switch (flag.kind) {
    case Kind::kInt:
      ok = absl::SimpleAtoi(text, static_cast<int64_t*>(flag.value));
      break;
    case Kind::kDouble:
      ok = absl::SimpleAtod(text, static_cast<double*>(flag.value));
      break;
    case Kind::kString:
      *static_cast<std::string*>(flag.value) = text;
      break;
    case Kind::kBool:
      ok = absl::SimpleAtob(text, static_cast<bool*>(flag.value));
      break;
  }
  if (!ok)
    return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": bad value '", text, "'"));
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags_) {
      if (f.name == arg) flag = &f;
    }
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", arg));
    if (!has_value) {
      if (flag->kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", arg, ": missing value"));
      }
    }
    if (absl::Status s = Set(*flag, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help(const std::string& usage, const std::string& summary) const {
  std::string out = absl::StrCat("Usage: ", usage, "\n\n", summary, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%s (default: %s)\n      %s\n", f.name,
                          f.default_text.empty() ? "\"\"" : f.default_text, f.help);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag,
                                                    const std::string& text) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(item), &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad number '", item, "'"));
    }
    out.push_back(v);
  }
  return out;
}

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
    if (!labels.insert(t.label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target: label '", t.label, "' given twice (name each target)"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace ced::loadgen
