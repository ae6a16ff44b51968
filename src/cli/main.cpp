// `pier`: the single binary. Subcommands register themselves (commands.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "kernels/cpu/cpu_isa.h"

int main(int argc, char** argv) {
  // A PIER_CPU_ISA this CPU cannot honour is an error before any command runs, not a silent
  // fallback that would make a benchmark of one path measure another.
  if (const pier::Status isa = pier::kernels::ValidateCpuIsaOverride(); !isa.ok()) {
    std::fprintf(stderr, "pier: %s\n", isa.message().c_str());
    return 2;
  }
  // cuda:N is the N-th GPU in PCI bus order, as `pier devices`, NVML and nvidia-smi number
  // them (CUDA's own default puts the fastest first). Set before anything loads CUDA; a
  // user's own choice stays.
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/0);
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
