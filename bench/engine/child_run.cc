#include "bench/engine/child_run.h"

#include <sys/wait.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "services/common/subprocess.h"

namespace ced::bench {

absl::StatusOr<nlohmann::ordered_json> RunChild(const std::vector<std::string>& args,
                                                const std::string& env,
                                                const std::string& json_path) {
  const size_t eq = env.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("child env \"", env, "\": expected NAME=value"));
  }
  services::SubprocessOptions options;
  options.program = "/proc/self/exe";
  options.argv = {"ced_engine_bench"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env[env.substr(0, eq)] = env.substr(eq + 1);
  auto child = services::Subprocess::Spawn(options);
  if (!child.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot start the child bench: ", child.status().message()));
  }
  absl::StatusOr<int> status = (*child)->Wait(/*timeout_s=*/-1);
  if (!status.ok() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(absl::StrCat("the child bench (", env, ") failed"));
  }
  std::ifstream in(json_path);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("the child bench wrote no valid JSON to ", json_path));
  }
  return j;
}

}  // namespace ced::bench
