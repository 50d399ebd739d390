#include "bench/sim/flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ced::sim {

void FlagSet::Add(const std::string& name, Kind kind, void* value, const std::string& help,
                  std::string default_text) {
  flags_.push_back(Flag{name, help, std::move(default_text), kind, value});
}
void FlagSet::Int(const std::string& name, int* value, const std::string& help) {
  Add(name, Kind::kInt, value, help, absl::StrCat(*value));
}
void FlagSet::Double(const std::string& name, double* value, const std::string& help) {
  Add(name, Kind::kDouble, value, help, absl::StrCat(*value));
}
void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  Add(name, Kind::kString, value, help, *value);
}
void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  Add(name, Kind::kBool, value, help, *value ? "true" : "false");
}

absl::Status FlagSet::Set(const Flag& flag, const std::string& text) {
  bool ok = true;
  switch (flag.kind) {
    case Kind::kInt: ok = absl::SimpleAtoi(text, static_cast<int*>(flag.value)); break;
    case Kind::kDouble: ok = absl::SimpleAtod(text, static_cast<double*>(flag.value)); break;
    case Kind::kString: *static_cast<std::string*>(flag.value) = text; break;
    case Kind::kBool: ok = absl::SimpleAtob(text, static_cast<bool*>(flag.value)); break;
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": bad value '", text, "'"));
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

std::string FlagSet::Help(const std::string& usage) const {
  std::string out = absl::StrCat(usage, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%s (default: %s)\n      %s\n", f.name, f.default_text, f.help);
  }
  return out;
}

}  // namespace ced::sim
