// `ced gateway`: runs the public gateway until SIGINT / SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace ced::gateway {

// `args` are the flags after the command words. Prints
// "gateway listening on HOST:PORT (metrics HOST:PORT)" on stdout once serving.
// Returns 0 after a clean shutdown, 1 on a runtime error, 2 on a usage error.
int RunGatewayCommand(const std::vector<std::string>& args);

}  // namespace ced::gateway
