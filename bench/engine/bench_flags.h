// A minimal `--name=value` / `--name value` / `--flag` parser for the bench
// binary, with a generated `--help` text. Not thread-safe; use from main().
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ced::bench {

class FlagSet {
 public:
  // Registers a flag bound to `*value`; its current value is the default.
  // The pointers must outlive Parse().
  void Int(const std::string& name, int* value, const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  void String(const std::string& name, std::string* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[1..]. `--help` sets help_requested(). Unknown flags, missing
  // or malformed values and positional arguments are errors naming the flag.
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  // "Usage: ...\n\n<summary>\n\nFlags:\n  --name=default  help".
  std::string Help(const std::string& usage, const std::string& summary) const;

 private:
  enum class Kind { kInt, kDouble, kString, kBool };
  struct Flag {
    std::string name, help, default_text;
    Kind kind;
    void* value;
  };
  absl::Status Set(Flag& flag, const std::string& text);
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace ced::bench
