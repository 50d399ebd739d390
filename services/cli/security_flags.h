// The TLS / auth flags of `ced serve --role=...`, `ced cluster`, `ced up` and
// `ced client ...`, with their environment-variable defaults:
//
//   --tls-cert FILE        CED_TLS_CERT     this process's certificate (PEM)
//   --tls-key FILE         CED_TLS_KEY      its private key (PEM)
//   --tls-ca FILE          CED_TLS_CA       CA that verifies peers (servers:
//                                           client certs required; clients:
//                                           the server is verified against it)
//   --tls-server-name N    CED_TLS_SERVER_NAME  name expected in server certs
//                                           instead of the address host
//   gateway:  --public-client-ca FILE (CED_PUBLIC_CLIENT_CA): require client
//             certs on the public listener; --auth-tokens-file FILE
//             (CED_AUTH_TOKENS_FILE) and CED_AUTH_TOKENS=a,b: bearer tokens
//   client:   --auth-token T (CED_AUTH_TOKEN)
//   services: --health-listen ADDR (CED_HEALTH_LISTEN): a plaintext listener
//             for grpc.health.v1.Health only (kubelet probes cannot do TLS)
//
// A flag wins over its environment variable.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/cli/flags.h"
#include "services/common/security.h"

namespace ced::cli {

// "gateway", "router", "prefill", "decode", "cluster" or "client".
std::vector<FlagSpec> SecurityFlagSpecs(const std::string& role);

// Takes the role's security flags out of `args` (so the role's own parser
// never sees them) into `values` (flag name -> value; environment defaults
// filled in for flags not given).
absl::Status ExtractSecurityFlags(const std::string& role, std::vector<std::string>* args,
                                  std::map<std::string, std::string>* values);

// Reads the files named by `values` and installs the result as the process's
// security (services::SetProcessSecurity).
absl::Status InstallSecurity(const std::string& role,
                             const std::map<std::string, std::string>& values);

// UCX's TCP transport opens listening sockets of its own on every network
// device it uses. When a worker is told to listen on one interface (the host
// of `listen_address`, loopback by default), confine UCX to that device via
// UCX_NET_DEVICES (unless the environment sets it, or the host is a wildcard
// or a name). Returns the device chosen, empty when none.
std::string ConfineUcxToInterfaceOf(const std::string& listen_address);

// The value of --name in `args` (last one wins), else `default_value`.
std::string FlagValue(const std::vector<std::string>& args, const std::string& name,
                      const std::string& default_value);

// "\nSecurity flags:\n  --tls-cert=..." for a role's --help.
std::string SecurityHelp(const std::string& role);

}  // namespace ced::cli
