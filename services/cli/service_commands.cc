// `ced serve --role=...`, `ced cluster` and the client commands.
#include <cstdio>

#include "services/cli/commands.h"
#include "services/cli/service_commands.h"
#include "services/gateway/gateway_command.h"
#include "services/router/router_command.h"

namespace ced::cli {
namespace {

int Serve(const std::vector<std::string>& args) {
  std::string role;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--role=", 0) == 0) {
      role = args[i].substr(7);
    } else if (args[i] == "--role" && i + 1 < args.size()) {
      role = args[++i];
    } else {
      rest.push_back(args[i]);
    }
  }
  if (role.empty()) {
    const bool help = !args.empty() && (args[0] == "--help" || args[0] == "-h");
    std::fprintf(help ? stdout : stderr,
                 "Usage: ced serve --role=ROLE [flags]   (ced serve --role=ROLE --help)\n\n"
                 "Roles:\n"
                 "  gateway   public gRPC endpoint (ced.v1.Gateway)\n"
                 "  router    assigns prefill/decode instances and the replay placement\n"
                 "  prefill   encoder-only (or encoder + replay) prefill worker\n"
                 "  decode    full-model decode worker\n");
    return help ? 0 : 2;
  }
  if (role == "router") return ced::router::RunRouterCommand(rest);
  if (role == "gateway") return ced::gateway::RunGatewayCommand(rest);
  if (role == "prefill" || role == "decode") return RunWorkerRole(role, rest);
  return Fail("serve", "unknown --role=" + role + " (gateway, router, prefill, decode)", 2);
}

}  // namespace

void AddServiceCommands(std::vector<Command>* commands) {
  commands->push_back({"serve", "run one service role (--role=gateway|router|prefill|decode)", Serve});
  commands->push_back({"cluster", "run gateway, router, prefill and decode pools locally", RunCluster});
  commands->push_back({"up", "like cluster, making the default model when missing", RunUp});
  AddClientCommand(commands);
}

}  // namespace ced::cli
