// `ced router`: runs the router service until SIGINT / SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace ced::router {

// `args` are the flags after the command words. Prints
// "router listening on HOST:PORT (metrics HOST:PORT)" on stdout once serving.
// Returns 0 after a clean shutdown, 1 on a runtime error, 2 on a usage error.
int RunRouterCommand(const std::vector<std::string>& args);

}  // namespace ced::router
