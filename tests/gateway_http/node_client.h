// Running the official `openai` npm client (tests/node/node_modules, set up by
// scripts/install_deps.sh) from a test: the shell, the source tree, quoting.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "services/common/subprocess.h"

namespace ced::gateway::testing {

inline std::string SourceDir() {
  const char* dir = std::getenv("CED_SOURCE_DIR");
  return dir != nullptr ? dir : CED_SOURCE_DIR_DEFAULT;
}

// The npm packages the tests use.
inline std::string NodeModules() { return SourceDir() + "/tests/node/node_modules"; }

// Runs `command` through the shell; its stdout (exit status in *status).
inline std::string Shell(const std::string& command, int* status) {
  services::SubprocessOptions sh;
  sh.argv = {"sh", "-c", command};
  absl::StatusOr<services::CompletedRun> run = services::RunToCompletion(std::move(sh), 300);
  EXPECT_TRUE(run.ok()) << command << ": " << run.status();
  *status = run.ok() ? run->wait_status : -1;
  return run.ok() ? run->output : std::string();
}

inline bool HaveCommand(const std::string& name) {
  int status = 0;
  Shell("command -v " + name + " >/dev/null 2>&1", &status);
  return status == 0;
}

// `s` as one single-quoted shell word.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace ced::gateway::testing
