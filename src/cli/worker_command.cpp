// `pier worker --model ID --instance N --ipc-fd FD`: one model instance in its own process,
// started by `pier serve` (its supervisor), never by hand. The model and instance on the
// command line are there so that operators can tell the processes apart in `ps` and `top`;
// what to load comes over the socket (serving/worker_main.h).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "serving/worker_main.h"

namespace pier::cli {
namespace {

struct WorkerArgs {
  std::string model;
  int instance = 1;
  int fd = -1;
};

void RegisterWorker(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<WorkerArgs>();
  CLI::App* command =
      app.add_subcommand("worker", "One model instance's process (started by pier serve)");
  command->group("");  // internal: not listed in `pier --help`
  command->add_option("--model", args->model, "The model this instance serves")->required();
  command->add_option("--instance", args->instance, "Which instance of it (from 1)");
  command->add_option("--ipc-fd", args->fd, "The socket to the supervisor")->required();
  command->callback([args, &exit_code] { exit_code = serving::RunWorker(args->fd); });
}

}  // namespace

PIER_REGISTER_COMMAND(worker, RegisterWorker);

}  // namespace pier::cli
