#include <cstdlib>
#include <string>

#include "cli/commands.h"

namespace pier::cli {

std::vector<CommandRegistrar>& RegisteredCommands() {
  static std::vector<CommandRegistrar> commands;
  return commands;
}

std::string DefaultModelPath() {
  const char* dir = std::getenv("PIER_MODELS");
  std::string folder = (dir != nullptr && *dir != '\0') ? dir : PIER_DEFAULT_MODELS_DIR;
  return folder + "/" + PIER_DEFAULT_MODEL_FILE;
}

}  // namespace pier::cli
