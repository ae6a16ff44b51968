// The subcommands of the `pier` binary.
//
// Each command lives in its own `*_command.cpp` and registers itself at static
// initialization with PIER_REGISTER_COMMAND; main() adds every registered
// command to the CLI11 app. When a command runs, it stores the process exit
// code in `exit_code` (0 on success; non-zero with a message on stderr).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pier::cli {

using CommandRegistrar = std::function<void(CLI::App& app, int& exit_code)>;

// All registered commands, in registration order.
std::vector<CommandRegistrar>& RegisteredCommands();

struct CommandRegistration {
  explicit CommandRegistration(CommandRegistrar registrar) {
    RegisteredCommands().push_back(std::move(registrar));
  }
};

// The model file used when none is given: $PIER_MODELS (else the models/ folder
// of the source tree the binary was built from) joined with the default model's
// file name.
std::string DefaultModelPath();

// `pier inspect` of an .onnx file (inspect_onnx.cpp): its exit code.
int RunInspectOnnx(const std::string& path, bool memory, int threads, int64_t max_batch_size,
                   bool json);

}  // namespace pier::cli

#define PIER_REGISTER_COMMAND(name, function) \
  static ::pier::cli::CommandRegistration pier_command_registration_##name(function)
