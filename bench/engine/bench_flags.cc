#include "bench/engine/bench_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ced::bench {

void FlagSet::Int(const std::string& name, int* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kInt, value});
}
void FlagSet::Double(const std::string& name, double* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), Kind::kDouble, value});
}
void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat("\"", *value, "\""), Kind::kString, value});
}
void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, *value ? "true" : "false", Kind::kBool, value});
}

absl::Status FlagSet::Set(Flag& flag, const std::string& text) {
  switch (flag.kind) {
    case Kind::kInt:
      if (!absl::SimpleAtoi(text, static_cast<int*>(flag.value))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, ": '", text, "' is not an integer"));
      }
      return absl::OkStatus();
    case Kind::kDouble:
      if (!absl::SimpleAtod(text, static_cast<double*>(flag.value))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, ": '", text, "' is not a number"));
      }
      return absl::OkStatus();
    case Kind::kString:
      *static_cast<std::string*>(flag.value) = text;
      return absl::OkStatus();
    case Kind::kBool:
      if (text == "true" || text == "1") {
        *static_cast<bool*>(flag.value) = true;
      } else if (text == "false" || text == "0") {
        *static_cast<bool*>(flag.value) = false;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, ": '", text, "' is not true or false"));
      }
      return absl::OkStatus();
  }
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
    std::string name = arg.substr(2), text;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      text = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (flag->kind == Kind::kBool) {
        text = "true";
      } else if (i + 1 < argc) {
        text = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    if (absl::Status s = Set(*flag, text); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help(const std::string& usage, const std::string& summary) const {
  std::string out = absl::StrCat("Usage: ", usage, "\n\n", summary, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%-28s %s\n", absl::StrCat(f.name, "=", f.default_text),
                          f.help);
  }
  absl::StrAppend(&out, "  --help                         this text\n");
  return out;
}

}  // namespace ced::bench
