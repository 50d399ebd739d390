// A minimal `--name=value` / `--name value` / `--flag` parser for ced-sim,
// with a generated --help. Not thread-safe; use from main().
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ced::sim {

class FlagSet {
 public:
  // Binds a flag to `*value`; its current value is the default shown in help.
  // The pointers must outlive Parse().
  void Int(const std::string& name, int* value, const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  void String(const std::string& name, std::string* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[1..]. Unknown flags, bad values and positional arguments are
  // errors naming the flag. `--help` sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string Help(const std::string& usage) const;

 private:
  enum class Kind { kInt, kDouble, kString, kBool };
  struct Flag {
    std::string name, help, default_text;
    Kind kind;
    void* value;
  };
  void Add(const std::string& name, Kind kind, void* value, const std::string& help,
           std::string default_text);
  absl::Status Set(const Flag& flag, const std::string& text);
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace ced::sim
