#include "services/cli/flags.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ced::cli {

absl::StatusOr<Flags> Flags::Parse(const std::vector<FlagSpec>& specs,
                                   const std::vector<std::string>& args) {
  Flags f;
  std::map<std::string, const FlagSpec*> by_name;
  for (const FlagSpec& s : specs) {
    by_name[s.name] = &s;
    f.values_[s.name] = s.default_value;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      f.help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      f.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (it->second->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (it->second->is_bool && has_value && value != "true" && value != "false" &&
        value != "1" && value != "0" && value != "yes" && value != "no") {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be true or false (got '", value, "')"));
    }
    f.values_[name] = value;
    f.set_[name] = true;
  }
  return f;
}

std::string Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? "" : it->second;
}

absl::StatusOr<int64_t> Flags::GetInt(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, ": '", Get(name), "' is not an integer"));
  }
  return v;
}

absl::StatusOr<int64_t> Flags::GetIntIn(const std::string& name, int64_t lo, int64_t hi) const {
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be in [", lo, ", ", hi, "], got '", Get(name), "'"));
  }
  return v;
}

absl::StatusOr<double> Flags::GetDouble(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, ": '", Get(name), "' is not a number"));
  }
  return v;
}

bool Flags::GetBool(const std::string& name) const {
  const std::string v = Get(name);
  return v == "true" || v == "1" || v == "yes";
}

std::string FormatHelp(const std::string& usage, const std::string& summary,
                       const std::vector<FlagSpec>& specs) {
  std::string out = absl::StrCat("Usage: ", usage, "\n\n", summary, "\n");
  if (!specs.empty()) absl::StrAppend(&out, "\nFlags:\n");
  for (const FlagSpec& s : specs) {
    std::string head = absl::StrCat("  --", s.name);
    if (!s.is_bool) absl::StrAppend(&head, "=", s.default_value.empty() ? "\"\"" : s.default_value);
    if (head.size() < 28) head.resize(28, ' ');
    else absl::StrAppend(&head, "\n", std::string(28, ' '));
    absl::StrAppend(&out, head, s.help, "\n");
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBias(const std::string& text) {
  std::vector<std::pair<int32_t, float>> out;
  if (text.empty()) return out;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(piece, ':');
    int32_t id = 0;
    float bias = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &id) ||
        !absl::SimpleAtof(parts[1], &bias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--logit-bias: '", piece, "' is not ID:BIAS (e.g. 13:-100,42:5)"));
    }
    out.emplace_back(id, bias);
  }
  return out;
}

std::vector<FlagSpec> SamplingFlagSpecs(const std::string& repetition_off) {
  return {
      {"presence-penalty", "0", "lowers the logit of every token already generated, in [-2, 2]"},
      {"frequency-penalty", "0",
       "lowers a generated token's logit once per time it was generated, in [-2, 2]"},
      {"repetition-penalty", repetition_off,
       absl::StrCat("divides (multiplies when negative) the logit of every prompt or generated "
                    "token; ",
                    repetition_off, " = off")},
      {"logit-bias", "", "ID:BIAS,...: added to these tokens' logits, each in [-100, 100]"},
  };
}

absl::StatusOr<SamplingFlags> ParseSamplingFlags(const Flags& flags) {
  SamplingFlags out;
  for (const auto& [name, value] :
       {std::pair<const char*, double*>{"temperature", &out.temperature},
        {"top-p", &out.top_p},
        {"presence-penalty", &out.presence_penalty},
        {"frequency-penalty", &out.frequency_penalty},
        {"repetition-penalty", &out.repetition_penalty}}) {
    absl::StatusOr<double> v = flags.GetDouble(name);
    if (!v.ok()) return v.status();
    *value = *v;
  }
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t*>{"top-k", &out.top_k}, {"seed", &out.seed}}) {
    absl::StatusOr<int64_t> v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *value = *v;
  }
  absl::StatusOr<std::vector<std::pair<int32_t, float>>> bias =
      ParseLogitBias(flags.Get("logit-bias"));
  if (!bias.ok()) return bias.status();
  out.logit_bias = *std::move(bias);
  return out;
}

absl::Status CheckWritable(const std::string& flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot write '", path, "': ", why));
  };
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec)) return refuse("it is a folder");
  if (!p.parent_path().empty()) {
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) return refuse(ec.message());
  }
  const bool existed = std::filesystem::exists(p, ec);
  std::ofstream probe(path, std::ios::app);
  const bool ok = static_cast<bool>(probe);
  const int err = errno;
  probe.close();
  if (!ok) return refuse(std::strerror(err));
  if (!existed) std::filesystem::remove(p, ec);
  return absl::OkStatus();
}

}  // namespace ced::cli
