// Entry points of the service roles, for `ced serve` and `ced cluster`.
#pragma once

#include <string>
#include <vector>

#include "services/cli/commands.h"

namespace ced::cli {

// Runs `ced serve --role=prefill|decode` with the flags after the role.
int RunWorkerRole(const std::string& role, const std::vector<std::string>& args);
// `ced cluster`: the whole topology as local processes on loopback.
int RunCluster(const std::vector<std::string>& args);
// `ced up`: RunCluster on a model it makes when missing.
int RunUp(const std::vector<std::string>& args);
// Registered by client_command.cc.
void AddClientCommand(std::vector<Command>* commands);

}  // namespace ced::cli
