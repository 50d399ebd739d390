// A minimal `--name=value` / `--name value` / `--flag` parser for
// ced-loadgen, with a generated --help. Not thread-safe; use from main().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::loadgen {

class FlagSet {
 public:
  // Binds a flag to `*value`; its current value is the default shown in help.
  // The pointers must outlive Parse().
  void Int(const std::string& name, int64_t* value, const std::string& help);
  void Double(const std::string& name, double* value, const std::string& help);
  void String(const std::string& name, std::string* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[1..]. Unknown flags, bad values and positional arguments are
  // errors naming the flag. `--help` / `-h` sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string Help(const std::string& usage, const std::string& summary) const;

 private:
  enum class Kind { kInt, kDouble, kString, kBool };
  struct Flag {
    std::string name, help, default_text;
    Kind kind;
    void* value;
  };
  absl::Status Set(const Flag& flag, const std::string& text) const;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// "1,2.5,4" -> {1, 2.5, 4}; an error naming `flag` on a bad or empty item.
absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag,
                                                    const std::string& text);

struct Target {
  std::string label, address;
};
// "ced=127.0.0.1:5000,dec=127.0.0.1:6000" or "127.0.0.1:5000" (label
// "gateway"); an error naming --target on an empty item or duplicate label.
absl::StatusOr<std::vector<Target>> ParseTargets(const std::string& text);

// Writes `text` to `path`; an error naming the path.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace ced::loadgen
