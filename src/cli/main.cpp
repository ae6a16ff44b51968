// `pier`: the single binary. Subcommands register themselves (commands.h).
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Pier: an inference server that hosts many models on shared GPUs and CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pier 0.1.0");
  int exit_code = 0;
  for (const auto& registrar : pier::cli::RegisteredCommands()) registrar(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
