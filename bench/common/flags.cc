#include "bench/common/flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ced::bench {

void FlagSet::Int(const std::string& name, int* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kInt, value});
}
void FlagSet::Int(const std::string& name, int64_t* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kInt64, value});
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
  const char* expected = "";
  switch (flag.kind) {
    case Kind::kInt:
      if (absl::SimpleAtoi(text, static_cast<int*>(flag.value))) return absl::OkStatus();
      expected = "an integer";
      break;
    case Kind::kInt64:
      if (absl::SimpleAtoi(text, static_cast<int64_t*>(flag.value))) return absl::OkStatus();
      expected = "an integer";
      break;
    case Kind::kDouble:
      if (absl::SimpleAtod(text, static_cast<double*>(flag.value))) return absl::OkStatus();
      expected = "a number";
      break;
    case Kind::kString:
      *static_cast<std::string*>(flag.value) = text;
      return absl::OkStatus();
    case Kind::kBool:
      if (absl::SimpleAtob(text, static_cast<bool*>(flag.value))) return absl::OkStatus();
      expected = "true or false";
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag.name, ": bad value '", text, "' (expected ", expected, ")"));
}

std::vector<cli::FlagSpec> FlagSet::Specs() const {
  std::vector<cli::FlagSpec> specs;
  for (const Flag& f : flags_) {
    specs.push_back({f.name, f.default_text, f.help, f.kind == Kind::kBool});
  }
  return specs;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  // The command line is split the one way every ced program splits it
  // (services/cli's parser); this class only binds and converts the values.
  absl::StatusOr<cli::Flags> parsed =
      cli::Flags::Parse(Specs(), std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  if (!parsed.ok()) return parsed.status();
  if (!parsed->positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", parsed->positional().front(), "'"));
  }
  help_ = help_ || parsed->help();
  for (const Flag& f : flags_) {
    if (!parsed->Has(f.name)) continue;
    if (absl::Status s = Set(f, parsed->Get(f.name)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help(const std::string& usage, const std::string& summary) const {
  std::vector<cli::FlagSpec> specs = Specs();
  specs.push_back({"help", "", "this text", true});
  return cli::FormatHelp(usage, summary, specs);
}

absl::StatusOr<std::vector<int>> ParsePositiveInts(const std::string& flag,
                                                   const std::string& text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", item, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
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

}  // namespace ced::bench
