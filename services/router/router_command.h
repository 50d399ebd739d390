// `ced router`: runs the router service until SIGINT / SIGTERM. Its flags are
// also the gateway's (prefixed "router-") when the gateway embeds the router.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/cli/flags.h"
#include "services/router/router_server.h"

namespace ced::router {

// The router's flags (listen, metrics-listen, heartbeat, replay, placement),
// each name prefixed with `prefix` ("" for `ced router`, "router-" for
// `ced gateway --embed-router`). `--model` is not among them.
std::vector<cli::FlagSpec> RouterFlagSpecs(const std::string& prefix);

// Fills `options` from flags parsed with RouterFlagSpecs(prefix); a bad value
// is INVALID_ARGUMENT naming the flag. `model_dir` non-empty: its config.json
// tells whether the model is decoder-only.
absl::Status ApplyRouterFlags(const cli::Flags& flags, const std::string& prefix,
                              const std::string& model_dir, RouterServerOptions* options);

// `args` are the flags after the command words. Prints
// "router listening on HOST:PORT (metrics HOST:PORT)" on stdout once serving.
// Returns 0 after a clean shutdown, 1 on a runtime error, 2 on a usage error.
int RunRouterCommand(const std::vector<std::string>& args);

}  // namespace ced::router
