#include "bench/common/run_info.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace ced::bench {

std::string CommandLine(int argc, char** argv, std::initializer_list<const char*> env) {
  std::vector<std::string> parts;
  for (const char* name : env) {
    if (const char* v = std::getenv(name); v != nullptr)
      parts.push_back(absl::StrCat(name, "=", v));
  }
  std::string prog = argv[0];
  if (!prog.empty() && prog[0] == '/') prog = std::filesystem::path(prog).filename().string();
  parts.push_back(prog);
  for (int i = 1; i < argc; ++i) parts.push_back(argv[i]);
  return absl::StrJoin(parts, " ");
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    if (const size_t colon = line.find(':'); colon != std::string::npos) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown";
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return absl::StrCat(a, " ", b, " ", c);
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace ced::bench
