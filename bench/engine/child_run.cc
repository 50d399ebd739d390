#include "bench/engine/child_run.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ced::bench {

absl::StatusOr<nlohmann::ordered_json> RunChild(const std::vector<std::string>& args,
                                                const std::string& env,
                                                const std::string& json_path) {
  const std::string exe = "/proc/self/exe";
  std::vector<std::string> argv_s = {"ced_engine_bench"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string name = env.substr(0, env.find('=') + 1);
  std::vector<std::string> env_s = {env};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind(name, 0) != 0) env_s.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
      err != 0) {
    return absl::InternalError(absl::StrCat("cannot start the child bench: error ", err));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
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
