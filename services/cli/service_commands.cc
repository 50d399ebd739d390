// `ced serve --role=...`, `ced cluster` and the client commands.
#include <algorithm>
#include <cstdio>
#include <map>

#include "services/cli/commands.h"
#include "services/cli/security_flags.h"
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
  if (role != "router" && role != "gateway" && role != "prefill" && role != "decode") {
    return Fail("serve", "unknown --role=" + role + " (gateway, router, prefill, decode)", 2);
  }
  // TLS / auth flags are the same for every role: taken out here, installed
  // as the process's security before the role starts its servers.
  std::map<std::string, std::string> security;
  if (absl::Status s = ExtractSecurityFlags(role, &rest, &security); !s.ok()) {
    return Fail("serve --role=" + role, std::string(s.message()), 2);
  }
  const bool help = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
                      return a == "--help" || a == "-h";
                    }) != rest.end();
  if (!help) {
    if (absl::Status s = InstallSecurity(role, security); !s.ok()) {
      return Fail("serve --role=" + role, std::string(s.message()), 2);
    }
  }
  // Every listener on the configured interface, the UCX data plane's own
  // TCP listeners included (decode: the KV address; prefill: its gRPC one).
  if (!help && role == "decode") {
    ConfineUcxToInterfaceOf(FlagValue(rest, "kv-listen", "127.0.0.1:50080"));
  } else if (!help && role == "prefill") {
    ConfineUcxToInterfaceOf(FlagValue(rest, "listen", "127.0.0.1:50060"));
  }
  int rc = 0;
  if (role == "router") rc = ced::router::RunRouterCommand(rest);
  if (role == "gateway") rc = ced::gateway::RunGatewayCommand(rest);
  if (role == "prefill" || role == "decode") rc = RunWorkerRole(role, rest);
  if (help) std::printf("%s", SecurityHelp(role).c_str());
  return rc;
}

// `ced client ...` with the client's TLS / token flags.
Command WithClientSecurity(Command c) {
  c.run = [words = c.words, run = c.run](const std::vector<std::string>& args) {
    std::vector<std::string> rest = args;
    std::map<std::string, std::string> security;
    if (absl::Status s = ExtractSecurityFlags("client", &rest, &security); !s.ok()) {
      return Fail(words, std::string(s.message()), 2);
    }
    const bool help = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
                        return a == "--help" || a == "-h";
                      }) != rest.end();
    if (!help) {
      if (absl::Status s = InstallSecurity("client", security); !s.ok()) {
        return Fail(words, std::string(s.message()), 2);
      }
    }
    const int rc = run(rest);
    if (help) std::printf("%s", SecurityHelp("client").c_str());
    return rc;
  };
  return c;
}

}  // namespace

void AddServiceCommands(std::vector<Command>* commands) {
  commands->push_back({"serve", "run one service role (--role=gateway|router|prefill|decode)", Serve});
  commands->push_back({"cluster", "run gateway, router, prefill and decode pools locally", RunCluster});
  commands->push_back({"up", "like cluster, on the trained default model (or --model, --preset)", RunUp});
  const size_t first_client = commands->size();
  AddClientCommand(commands);
  for (size_t i = first_client; i < commands->size(); ++i) {
    (*commands)[i] = WithClientSecurity((*commands)[i]);
  }
}

}  // namespace ced::cli
