// `pier prompt [-m MODEL] [--system TEXT] [--no-generation-prompt] [--json] MESSAGE`:
// shows the prompt a chat turn becomes for a model.
//
// Renders the model's chat template (tokenizer.chat_template) for an optional
// system message and one user message, then tokenizes the result the way the
// engine will: special tokens written by the template are parsed, and no BOS
// is added when the template already starts with it. Prints the rendered
// prompt and its token count, or with --json {"model", "prompt", "tokens"}.
// A model without a chat template, a template error or a bad model file prints
// the reason and exits 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::cli {
namespace {

struct PromptOptions {
  std::string model;
  std::string system;
  std::string message;
  bool no_generation_prompt = false;
  bool json = false;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "pier prompt: %s\n", status.ToString().c_str());
  return 1;
}

int RunPrompt(const PromptOptions& options) {
  const std::string path = options.model.empty() ? DefaultModelPath() : options.model;
  auto file = model::GgufFile::Open(path);
  if (!file.ok()) return Fail(file.status());
  auto tokenizer = model::LoadTokenizer(**file);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  auto chat_template = model::LoadChatTemplate(**file);
  if (!chat_template.ok()) return Fail(chat_template.status());

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!options.system.empty()) {
    messages.push_back({{"role", "system"}, {"content", options.system}});
  }
  messages.push_back({{"role", "user"}, {"content", options.message}});

  const tokenizer::Tokenizer& tok = **tokenizer;
  auto rendered =
      tokenizer::RenderChatPrompt(*chat_template, tok, messages, !options.no_generation_prompt);
  if (!rendered.ok()) return Fail(rendered.status().WithContext(path));
  const std::string* prompt = &rendered->text;
  const std::vector<tokenizer::TokenId>* ids = &rendered->tokens;

  if (options.json) {
    nlohmann::ordered_json out;
    out["model"] = path;
    out["prompt"] = *prompt;
    out["tokens"] = *ids;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s", prompt->c_str());
    if (prompt->empty() || prompt->back() != '\n') std::printf("\n");
    std::printf("--- %zu tokens\n", ids->size());
  }
  return 0;
}

void RegisterPrompt(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<PromptOptions>();
  CLI::App* command = app.add_subcommand(
      "prompt", "Render a chat turn with the model's chat template and tokenize it");
  command->add_option("-m,--model", options->model, "GGUF model file (default: the default model)");
  command->add_option("--system", options->system, "System message");
  command->add_flag("--no-generation-prompt", options->no_generation_prompt,
                    "Do not append the assistant header");
  command->add_flag("--json", options->json, "Print JSON");
  command->add_option("message", options->message, "The user's message")->required();
  command->callback([options, &exit_code] { exit_code = RunPrompt(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(prompt, RegisterPrompt);

}  // namespace pier::cli
