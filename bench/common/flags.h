// The benches' command line: flags bound to variables, on the parser every
// ced program uses (services/cli/flags.h: `--name=value`, `--name value`,
// `--flag`, generated --help), and the comma lists the flags carry. Not
// thread-safe; use from main().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/cli/flags.h"

namespace ced::bench {

class FlagSet {
 public:
  // Binds a flag to `*value`; its current value is the default shown in help.
  // The pointers must outlive Parse().
  void Int(const std::string& name, int* value, const std::string& help);
  void Int(const std::string& name, int64_t* value, const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  void String(const std::string& name, std::string* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[1..]. Unknown flags, missing or bad values and positional
  // arguments are errors naming the flag ("--name: bad value 'x' ..."). A bool
  // flag without a value is true. `--help` / `-h` sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  // "Usage: <usage>\n\n<summary>\n\nFlags:\n  --name (default: x)\n      help\n...".
  std::string Help(const std::string& usage, const std::string& summary) const;

 private:
  enum class Kind { kInt, kInt64, kDouble, kString, kBool };
  struct Flag {
    std::string name, help, default_text;
    Kind kind;
    void* value;
  };
  absl::Status Set(const Flag& flag, const std::string& text) const;
  std::vector<cli::FlagSpec> Specs() const;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// "1,4,16" -> {1, 4, 16}; empty items are skipped. An error naming --`flag`
// on an item that is not a positive integer, or when no item is left.
absl::StatusOr<std::vector<int>> ParsePositiveInts(const std::string& flag,
                                                   const std::string& text);
// "1,2.5,4" -> {1, 2.5, 4}; an error naming --`flag` on a bad or empty item.
absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag,
                                                    const std::string& text);

}  // namespace ced::bench
