// Built when the services are disabled (-DCED_BUILD_SERVICES=OFF).
#include "services/cli/commands.h"

namespace ced::cli {
void AddServiceCommands(std::vector<Command>*) {}
}  // namespace ced::cli
