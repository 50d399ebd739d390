// ced: one binary for models, generation and every service role.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/isa.h"
#include "services/cli/commands.h"
#include "services/cli/crash_report.h"

namespace ced::cli {

int Fail(const std::string& words, const std::string& message, int code) {
  std::fprintf(stderr, "ced %s: %s\n", words.c_str(), message.c_str());
  return code;
}

namespace {

std::vector<Command>& AllCommands() {
  static auto* commands = new std::vector<Command>;
  return *commands;
}

}  // namespace

int RunCommand(const std::string& words, const std::vector<std::string>& args) {
  for (const Command& c : AllCommands()) {
    if (c.words == words) return c.run(args);
  }
  return Fail(words, "this command is not built into this binary", 2);
}

namespace {

void PrintUsage(const std::vector<Command>& commands, FILE* out) {
  std::fprintf(out,
               "ced — serving Causal Encoder-Decoder language models.\n\n"
               "Usage: ced <command> [flags]   (ced <command> --help for its flags)\n\n"
               "Commands:\n");
  for (const Command& c : commands) {
    std::fprintf(out, "  %-22s %s\n", c.words.c_str(), c.summary.c_str());
  }
}

}  // namespace
}  // namespace ced::cli

int main(int argc, char** argv) {
  using namespace ced::cli;
  // The system's Abseil is built with its lock-order checker on: every Mutex
  // lock (ours, and gRPC's, which uses absl::Mutex) then updates a process-wide
  // graph under a global lock, ~3x the cost of the lock itself. The unit tests,
  // which run the same services in-process, keep the checker on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A crash leaves its signal and stack in the log (crash_report.h).
  InstallCrashReport();
  // A CPU kernel variant this CPU cannot run is refused before anything
  // starts (never an illegal instruction later).
  if (const std::string error = ced::kernels::ValidateCpuIsaEnv(); !error.empty()) {
    std::fprintf(stderr, "ced: %s\n", error.c_str());
    return 2;
  }
  std::vector<Command>& commands = ced::cli::AllCommands();
  AddModelCommands(&commands);
  AddGenerateCommand(&commands);
  AddTokenizeCommand(&commands);
  AddServiceCommands(&commands);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage(commands, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  // Longest match of command words.
  const Command* best = nullptr;
  size_t best_len = 0;
  for (const Command& c : commands) {
    std::vector<std::string> words = absl::StrSplit(c.words, ' ');
    if (words.size() > args.size() || words.size() <= best_len) continue;
    if (std::equal(words.begin(), words.end(), args.begin())) {
      best = &c;
      best_len = words.size();
    }
  }
  if (best == nullptr) {
    // The first word of several commands ("ced client", "ced model foo"):
    // name the ones it starts.
    std::vector<std::string> under;
    for (const Command& c : commands) {
      std::vector<std::string> words = absl::StrSplit(c.words, ' ');
      if (words.size() > 1 && words[0] == args[0]) under.push_back(words[1]);
    }
    if (!under.empty()) {
      std::fprintf(
          stderr, "ced %s: %s; one of: %s (ced %s <subcommand> --help)\n", args[0].c_str(),
          args.size() > 1 ? ("unknown subcommand '" + args[1] + "'").c_str() : "give a subcommand",
          absl::StrJoin(under, ", ").c_str(), args[0].c_str());
      return 2;
    }
    std::fprintf(stderr, "ced: unknown command '%s'\n\n", args[0].c_str());
    PrintUsage(commands, stderr);
    return 2;
  }
  return best->run(std::vector<std::string>(args.begin() + best_len, args.end()));
}
