// `pier run [-m MODEL] [-p PROMPT | --chat] [-n N] [--temperature T] [--seed S] [--threads N]
//           [--ctx N] [--kv-dtype f16|f32|q8_0] [--memory-budget B] [--device-memory B]
//           [--memory-stats]`:
// generates text with a model on the CPU and streams it to stdout.
//
// Memory: the model runs under a memory governor whose budget is --memory-budget (bytes with
// a unit, "512MiB", or a percentage of the device's capacity, "80%"; default 100%) on a CPU
// device whose capacity is --device-memory (default: available memory, capped by the
// cgroup limit). Before the model loads, what it needs (packed and mapped weights, KV for --ctx
// tokens stored as --kv-dtype: f16 by default, or f32 at twice the bytes, workspace) is reserved;
// when it does not fit, the breakdown and the budget are printed and the exit status is 1.
// --memory-stats prints the governor's figures at the end as one line "memory: {json}" on stderr.
//
// With -p the prompt is tokenized as is (with the BOS the model asks for), prefilled, and
// up to N tokens are sampled and printed as they complete (UTF-8 safe), stopping early at
// an end-of-generation token or when the context is full. With --chat every line of
// standard input is a user turn: the conversation so far is rendered with the model's chat
// template, only the tokens not already in the KV cache are prefilled, and the reply is
// printed followed by a newline. At the end, prompt and decode speeds go to stderr.
// Bad values (negative temperature, top_p outside (0, 1], a prompt longer than the
// context, ...) print the reason and exit 1.
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
#include "engine/local_model.h"
#include "engine/sampling/sampler.h"
#include "serving/device_set.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace pier::cli {
namespace {

using Clock = std::chrono::steady_clock;

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
  bool verbose_prompt = false;
  std::optional<std::string> memory_budget;  // unset: 100% of the device
  std::optional<std::string> device_memory;  // unset: probed
  bool memory_stats = false;
};

struct Speed {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
};

constexpr int64_t kPrefillChunk = 512;  // tokens per prefill step (bounds the workspace)

// One sequence filling the whole KV store; keeps the tokens whose K/V are cached so that a
// chat turn prefills only what is new.
class Generator {
 public:
  Generator(engine::LocalModel& model, const tokenizer::Tokenizer& tok, int64_t ctx)
      : model_(model), tok_(tok), ctx_(ctx) {
    const int64_t n_blocks = model.kv().num_blocks();
    for (int32_t b = 0; b < n_blocks; ++b) blocks_.push_back(b);
  }

  // Prefills `prompt` (reusing the cached common prefix), then samples up to n tokens,
  // writing text to stdout as it completes (and to last_reply()).
  Status Generate(const std::vector<int32_t>& prompt, int64_t n,
                  const sampling::SamplingParams& params, Speed& speed) {
    if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
    if (static_cast<int64_t>(prompt.size()) >= ctx_) {
      return InvalidArgumentError("the prompt has " + std::to_string(prompt.size()) +
                                  " tokens; the context holds " + std::to_string(ctx_) +
                                  " (raise --ctx, up to the model's context length)");
    }
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) {
      ++common;
    }
    common = std::min(common, prompt.size() - 1);  // the last prompt token yields the logits
    cached_.assign(prompt.begin(), prompt.begin() + static_cast<int64_t>(common));

    const auto prefill_start = Clock::now();
    std::vector<float> logits;
    for (size_t first = common; first < prompt.size(); first += kPrefillChunk) {
      const size_t end = std::min(prompt.size(), first + kPrefillChunk);
      std::vector<int32_t> chunk(prompt.begin() + first, prompt.begin() + end);
      PIER_RETURN_IF_ERROR(Step(
          chunk, end == prompt.size() ? engine::LogitsWanted::kLast : engine::LogitsWanted::kNone,
          &logits));
    }
    speed.prompt_tokens += static_cast<int64_t>(prompt.size() - common);
    speed.prompt_seconds += std::chrono::duration<double>(Clock::now() - prefill_start).count();

    PIER_ASSIGN_OR_RETURN(sampling::Sampler sampler,
                          sampling::Sampler::Create(params, static_cast<int32_t>(logits.size())));
    PIER_RETURN_IF_ERROR(sampler.AddPromptTokens(prompt));
    tokenizer::IncrementalDecoder decoder(tok_, /*skip_special=*/true);
    last_reply_.clear();
    const auto decode_start = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      PIER_ASSIGN_OR_RETURN(sampling::SampleResult sample, sampler.Sample(logits));
      if (tok_.IsEndOfGeneration(sample.token)) break;
      const std::string text = decoder.Push(sample.token);
      last_reply_ += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      if (static_cast<int64_t>(cached_.size()) >= ctx_) {
        std::fprintf(stderr, "\n[context of %lld tokens is full]\n", static_cast<long long>(ctx_));
        break;
      }
      if (i + 1 == n) break;  // the last token needs no forward pass
      PIER_RETURN_IF_ERROR(Step({sample.token}, engine::LogitsWanted::kLast, &logits));
      ++speed.decode_tokens;
    }
    speed.decode_seconds += std::chrono::duration<double>(Clock::now() - decode_start).count();
    const std::string rest = decoder.Flush();
    last_reply_ += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fflush(stdout);
    return Status::Ok();
  }

  const std::string& last_reply() const { return last_reply_; }

 private:
  Status Step(const std::vector<int32_t>& tokens, engine::LogitsWanted wanted,
              std::vector<float>* logits) {
    engine::SequenceSpan span;
    span.tokens = tokens;
    span.first_position = static_cast<int64_t>(cached_.size());
    span.block_table = blocks_;
    span.logits = wanted;
    PIER_ASSIGN_OR_RETURN(engine::StepOutput out, model_.runner().Step(engine::Batch{{span}}));
    cached_.insert(cached_.end(), tokens.begin(), tokens.end());
    if (wanted != engine::LogitsWanted::kNone) logits->assign(out.logits.begin(), out.logits.end());
    return Status::Ok();
  }

  engine::LocalModel& model_;
  const tokenizer::Tokenizer& tok_;
  const int64_t ctx_;
  std::vector<int32_t> blocks_;  // the whole store, in order
  std::vector<int32_t> cached_;  // tokens whose K/V are in the store, positions 0..
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
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail(tok.status());
  std::optional<tokenizer::ChatTemplate> chat_template;
  if (options.chat) {
    auto loaded = tokenizer::LoadChatTemplate(**file);
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
  auto model = engine::LocalModel::Create(std::move(file).value(), model_options,
                                          &(*devices)->cpu_governor());
  if (!model.ok()) return Fail(model.status());
  const tokenizer::Tokenizer& tokenizer = **tok;
  Generator generator(**model, tokenizer, ctx);
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
  command->add_option("--memory-budget", options->memory_budget,
                      "Memory budget: bytes with a unit (512MiB, 2GB) or a percentage of the "
                      "device's capacity (80%); default 100%");
  command->add_option("--device-memory", options->device_memory,
                      "CPU device capacity, e.g. 1GiB (default: available memory, capped by "
                      "the cgroup limit)");
  command->add_flag("--memory-stats", options->memory_stats,
                    "Print the memory governor's figures to stderr at the end");
  command->add_flag("--verbose-prompt", options->verbose_prompt,
                    "Print the prompt text and its token ids to stderr");
  command->callback([options, &exit_code] { exit_code = RunRun(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(run, RegisterRun);

}  // namespace pier::cli
