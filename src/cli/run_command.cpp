// `pier run [-m MODEL] [-p PROMPT | --chat] [-n N] [--temperature T] [--seed S] [--threads N]
//           [--ctx N] [--kv-dtype f16|f32|q8_0] [--weights-dtype q8_0|q4_0]
//           [--memory-budget B] [--device-memory B] [--device cpu|cuda:N]
//           [--memory-stats]`:
// generates text with a model on the CPU, or on GPU N with --device cuda:N, and streams it to
// stdout. A GPU that cannot be used (no plugin, driver or device) is an error with the
// reason, never a silent fall back to the CPU.
//
// Memory: the model runs under a memory governor whose budget is --memory-budget (bytes with
// a unit, "512MiB", or a percentage of the device's capacity, "80%"; default 100%) on a CPU
// device whose capacity is --device-memory (default: available memory, capped by the
// cgroup limit). Before the model loads, what it needs (packed and mapped weights, KV for --ctx
// tokens stored as --kv-dtype: f16 by default, or f32 at twice the bytes, workspace) is reserved;
// when it does not fit, the breakdown and the budget are printed and the exit status is 1.
// --memory-stats prints the governor's figures at the end as one line "memory: {json}" on stderr.
//
// Generation goes through the Engine as in `pier serve` (one generation path): with -p the
// prompt is tokenized as is (with the BOS the model asks for), prefilled in chunks, and up to
// N tokens are sampled and printed as the engine releases them (UTF-8 safe), stopping early
// at an end-of-generation token or when the context is full. With --chat every line of
// standard input is a user turn: the conversation so far is rendered with the model's chat
// template (tokenizer/chat_prompt.h), the prefix cache serves the turns already computed,
// and the reply is printed followed by a newline. At the end, prompt and decode speeds go to
// stderr. Bad values (negative temperature, top_p outside (0, 1], a prompt longer than the context,
// ...) print the reason and exit 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "engine/core/engine.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "engine/sampling/sampler.h"
#include "model/gguf_tokenizer.h"
#include "serving/device_set.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  bool chat = false;
  int64_t n_predict = 256;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  int threads = 0;  // 0: all hardware threads
  int64_t ctx = 4096;
  std::string kv_dtype = "f16";
  std::string weights_dtype;  // empty: as the file stores them
  bool verbose_prompt = false;
  std::optional<std::string> memory_budget;  // unset: 100% of the device
  std::optional<std::string> device_memory;  // unset: probed
  bool memory_stats = false;
  std::string device = "cpu";  // or "cuda:N"
};

struct Speed {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
};

constexpr int64_t kPrefillChunk = 512;  // tokens per engine step (bounds the workspace)

// Generation through the Engine, exactly as `pier serve` runs a request: one sequence at a
// time, chunked prefill, the prefix cache (a chat turn prefills only what is new), the
// engine's end-of-generation and context handling. Text is printed as the engine releases it.
class Generator {
 public:
  Generator(engine::Engine& engine, int64_t ctx) : engine_(engine), ctx_(ctx) {}

  // Submits `prompt` for up to n tokens and prints the reply as it comes (also kept in
  // last_reply()).
  Status Generate(const std::vector<int32_t>& prompt, int64_t n,
                  const sampling::SamplingParams& params, Speed& speed) {
    if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
    if (static_cast<int64_t>(prompt.size()) >= ctx_) {
      return InvalidArgumentError("the prompt has " + std::to_string(prompt.size()) +
                                  " tokens; the context holds " + std::to_string(ctx_) +
                                  " (raise --ctx, up to the model's context length)");
    }
    last_reply_.clear();
    if (n == 0) return Status::Ok();
    // What the context leaves; reaching it ends the reply with a note.
    const int64_t room = ctx_ - static_cast<int64_t>(prompt.size());
    engine::Request request;
    request.id = "run-" + std::to_string(++requests_);
    request.prompt_tokens = prompt;
    request.sampling = params;
    request.max_tokens = static_cast<int32_t>(std::min(n, room));
    PIER_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestHandle> handle,
                          engine_.Submit(std::move(request)));
    while (std::optional<engine::Event> event = handle->Next()) {
      last_reply_ += event->text;
      std::fwrite(event->text.data(), 1, event->text.size(), stdout);
      std::fflush(stdout);
      if (!event->finish.has_value()) continue;
      if (*event->finish == engine::FinishReason::kError) return InternalError(event->error);
      const engine::Usage& u = event->usage;
      const engine::Timestamps& t = event->times;
      speed.prompt_tokens += u.prompt_tokens - u.cached_prompt_tokens;
      if (t.first_token_us > 0 && t.scheduled_us > 0) {
        speed.prompt_seconds += static_cast<double>(t.first_token_us - t.scheduled_us) / 1e6;
        // Every sampled token but the last took a forward pass.
        speed.decode_tokens += std::max<int64_t>(u.completion_tokens - 1, 0);
        speed.decode_seconds += static_cast<double>(t.finished_us - t.first_token_us) / 1e6;
      }
      if (*event->finish == engine::FinishReason::kLength && room < n &&
          u.completion_tokens >= room) {
        std::fprintf(stderr, "\n[context of %lld tokens is full]\n", static_cast<long long>(ctx_));
      }
    }
    return Status::Ok();
  }

  const std::string& last_reply() const { return last_reply_; }

 private:
  engine::Engine& engine_;
  const int64_t ctx_;
  int64_t requests_ = 0;
  std::string last_reply_;
};

void PrintPrompt(const tokenizer::Tokenizer& tok, const std::string& text,
                 const std::vector<int32_t>& ids) {
  std::fprintf(stderr, "prompt (%zu tokens):\n%s\n", ids.size(), text.c_str());
  for (int32_t id : ids) std::fprintf(stderr, "%d ", id);
  std::fprintf(stderr, "\n");
  (void)tok;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "pier run: %s\n", status.ToString().c_str());
  return 1;
}

// The governor's figures for --memory-stats: budget, peaks and per-owner charges.
nlohmann::json MemoryStatsJson(const engine::LocalModel& model, MemoryGovernor& governor) {
  const GovernorStats stats = governor.Stats();
  const engine::MemoryEstimate& e = model.estimate();
  nlohmann::json owners = nlohmann::json::array();
  for (const OwnerStats& o : stats.owners) {
    owners.push_back({{"name", o.name},
                      {"allocated_bytes", o.allocated_bytes},
                      {"peak_allocated_bytes", o.peak_allocated_bytes},
                      {"reserved_bytes", o.reserved_bytes}});
  }
  return {{"capacity_bytes", stats.capacity_bytes},
          {"budget_bytes", stats.budget_bytes},
          {"estimate_bytes", e.total_bytes()},
          {"reserved_bytes", stats.reserved_bytes},
          {"peak_reserved_bytes", stats.peak_reserved_bytes},
          {"allocated_bytes", stats.allocated_bytes},
          {"peak_allocated_bytes", stats.peak_allocated_bytes},
          {"failure_count", stats.failure_count},
          {"owners", owners}};
}

// --kv-dtype into the model's options, --memory-budget and --device-memory into the device
// set's; bad values are errors.
Status ParseMemoryFlags(const RunOptions& options, engine::LocalModelOptions* model_options,
                        serving::DeviceSetOptions* devices) {
  Result<engine::KvDtype> kv_dtype = engine::ParseKvDtype(options.kv_dtype);
  if (!kv_dtype.ok()) return kv_dtype.status().WithContext("--kv-dtype");
  model_options->kv_dtype = *kv_dtype;
  if (!options.weights_dtype.empty() && options.weights_dtype != "none") {
    Result<DType> weights = engine::ParseWeightsDtype(options.weights_dtype);
    if (!weights.ok()) return weights.status().WithContext("--weights-dtype");
    model_options->weights_dtype = *weights;
  }
  if (options.memory_budget.has_value()) {
    PIER_ASSIGN_OR_RETURN(devices->cpu_budget,
                          ParseBudget(*options.memory_budget, "--memory-budget"));
  }
  if (options.device_memory.has_value()) {
    PIER_ASSIGN_OR_RETURN(devices->cpu_capacity,
                          ParseByteSize(*options.device_memory, "--device-memory"));
  }
  return Status::Ok();
}

int RunRun(const RunOptions& options) {
  if (options.chat && !options.prompt.empty()) {
    return Fail(InvalidArgumentError("give either -p PROMPT or --chat, not both"));
  }
  if (!options.chat && options.prompt.empty()) {
    return Fail(
        InvalidArgumentError("give a prompt with -p (\"-p -\" reads standard input) or "
                             "use --chat"));
  }
  if (options.n_predict < 0) return Fail(InvalidArgumentError("-n must be >= 0"));
  if (options.threads < 0) return Fail(InvalidArgumentError("--threads must be >= 1"));
  if (options.ctx < 2) return Fail(InvalidArgumentError("--ctx must be at least 2"));
  sampling::SamplingParams params;
  params.temperature = options.temperature;
  params.top_k = options.top_k;
  params.top_p = options.top_p;
  params.min_p = options.min_p;
  params.repetition_penalty = options.repeat_penalty;
  params.seed = options.seed;
  if (Status s = params.Validate(); !s.ok()) return Fail(s);
  engine::LocalModelOptions model_options;
  serving::DeviceSetOptions device_options;
  if (Status s = ParseMemoryFlags(options, &model_options, &device_options); !s.ok()) {
    return Fail(s);
  }

  std::string prompt = options.prompt;
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), {});

  auto file = model::GgufFile::Open(options.model.empty() ? DefaultModelPath() : options.model);
  if (!file.ok()) return Fail(file.status());
  auto tok = model::LoadTokenizer(**file);
  if (!tok.ok()) return Fail(tok.status());
  std::optional<tokenizer::ChatTemplate> chat_template;
  if (options.chat) {
    auto loaded = model::LoadChatTemplate(**file);
    if (!loaded.ok()) return Fail(loaded.status());
    chat_template = std::move(loaded).value();
  }

  model_options.threads = options.threads > 0
                              ? options.threads
                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t ctx = engine::ClampContext(**file, options.ctx);
  model_options.kv_tokens = ctx;
  model_options.max_step_tokens = kPrefillChunk;
  model_options.max_logit_rows = 1;
  auto devices = serving::DeviceSet::Create(device_options);
  if (!devices.ok()) return Fail(devices.status());
  Result<MemoryGovernor*> governor = (*devices)->GovernorFor(options.device);
  if (!governor.ok()) return Fail(governor.status().WithContext("--device"));
  auto model = engine::LocalModel::Create(std::move(file).value(), model_options, *governor);
  if (!model.ok()) return Fail(model.status());
  const tokenizer::Tokenizer& tokenizer = **tok;
  engine::EngineOptions engine_options;
  engine_options.scheduler.max_batched_tokens = kPrefillChunk;
  engine_options.scheduler.max_seqs = 1;
  auto engine =
      engine::Engine::Create(engine_options, &(*model)->runner(), &(*model)->kv(), &tokenizer);
  if (!engine.ok()) return Fail(engine.status());
  Generator generator(**engine, ctx);
  Speed speed;

  if (!options.chat) {
    auto ids = tokenizer.Encode(prompt);
    if (!ids.ok()) return Fail(ids.status());
    if (options.verbose_prompt) PrintPrompt(tokenizer, prompt, *ids);
    if (Status s = generator.Generate(*ids, options.n_predict, params, speed); !s.ok()) {
      return Fail(s);
    }
    std::printf("\n");
    std::fflush(stdout);
  } else {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      auto rendered = tokenizer::RenderChatPrompt(*chat_template, tokenizer, messages);
      if (!rendered.ok()) return Fail(rendered.status());
      const std::string* text = &rendered->text;
      const std::vector<tokenizer::TokenId>* ids = &rendered->tokens;
      if (options.verbose_prompt) PrintPrompt(tokenizer, *text, *ids);
      if (Status s = generator.Generate(*ids, options.n_predict, params, speed); !s.ok()) {
        return Fail(s);
      }
      std::printf("\n");
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", generator.last_reply()}});
    }
  }

  std::fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s; decode: %lld tokens, %.1f tokens/s\n",
               static_cast<long long>(speed.prompt_tokens),
               speed.prompt_seconds > 0 ? speed.prompt_tokens / speed.prompt_seconds : 0.0,
               static_cast<long long>(speed.decode_tokens),
               speed.decode_seconds > 0 ? speed.decode_tokens / speed.decode_seconds : 0.0);
  if (options.memory_stats) {
    std::fprintf(stderr, "memory: %s\n",
                 MemoryStatsJson(**model, (*model)->governor()).dump().c_str());
  }
  engine->reset();  // the engine thread ends before the model it runs on
  return 0;
}

void RegisterRun(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand("run", "Generate text with a model on the CPU");
  command->add_option("-m,--model", options->model, "GGUF model file (default: the default model)");
  command->add_option("-p,--prompt", options->prompt, "Prompt text (\"-\" reads standard input)");
  command->add_flag("--chat", options->chat,
                    "Chat: each line of standard input is a user turn, rendered with the model's "
                    "chat template");
  command->add_option("-n,--n-predict", options->n_predict, "Most tokens to generate per reply")
      ->capture_default_str();
  command->add_option("--temperature", options->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  command->add_option("--top-k", options->top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  command->add_option("--top-p", options->top_p, "Nucleus sampling mass, in (0, 1]")
      ->capture_default_str();
  command->add_option("--min-p", options->min_p, "Drop tokens below min_p times the best")
      ->capture_default_str();
  command->add_option("--repeat-penalty", options->repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Random seed (same seed, same text)")
      ->capture_default_str();
  command->add_option("--threads", options->threads, "Compute threads (default: all)");
  command->add_option("--ctx", options->ctx, "Context (KV cache) size in tokens")
      ->capture_default_str();
  command
      ->add_option("--kv-dtype", options->kv_dtype,
                   "KV cache element type: f16 (half f32's memory), q8_0 (about half of "
                   "f16's), or f32")
      ->capture_default_str();
  command->add_option("--weights-dtype", options->weights_dtype,
                      "Quantize f32/f16/bf16 weight matrices at load: q8_0 or q4_0 (default: "
                      "the file's weights as they are)");
  command->add_option("--memory-budget", options->memory_budget,
                      "Memory budget: bytes with a unit (512MiB, 2GB) or a percentage of the "
                      "device's capacity (80%); default 100%");
  command->add_option("--device-memory", options->device_memory,
                      "CPU device capacity, e.g. 1GiB (default: available memory, capped by "
                      "the cgroup limit)");
  command->add_option("--device", options->device,
                      "Where the model runs: cpu (default) or cuda:N (GPU N, through the CUDA "
                      "plugin; `pier devices` lists them and says why none is usable)");
  command->add_flag("--memory-stats", options->memory_stats,
                    "Print the memory governor's figures to stderr at the end");
  command->add_flag("--verbose-prompt", options->verbose_prompt,
                    "Print the prompt text and its token ids to stderr");
  command->callback([options, &exit_code] { exit_code = RunRun(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(run, RegisterRun);

}  // namespace pier::cli
