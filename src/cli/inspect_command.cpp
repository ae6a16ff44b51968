// `pier inspect [MODEL] [--json]`: what a GGUF model file holds (an .onnx file: inspect_onnx.cpp).
// `pier inspect --memory [MODEL] [--ctx N] [--threads N] [--kv-dtype f16|f32|q8_0] [--json]`: what
// loading it with `pier run` would reserve from the memory budget (engine::EstimateMemory,
// the function `pier run`'s admission uses): mapped, packed and converted weights, KV per token and
// for the context (in the --kv-dtype `pier run` would use), workspace, total. With --memory-budget
// (and --device-memory) it also says whether that fits, as `pier run` would decide.
//
// Prints the architecture, hyper-parameters, tensor types and counts, bytes of
// weights, KV bytes per token and whether a chat template is present; with
// --json the same facts as one JSON object. A missing or corrupt file prints
// the reader's message (it names the file and the problem) and exits 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "device/cpu/cpu_device.h"
#include "device/device_name.h"
#include "encoder/encoder_info.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "memory/byte_size.h"
#include "model/gguf_file.h"
#include "model/model_info.h"

namespace pier::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool memory = false;
  int64_t ctx = 4096;
  int threads = 0;  // 0: all hardware threads, as `pier run`
  std::string kv_dtype = "f16";
  std::string weights_dtype;
  std::optional<std::string> memory_budget;
  std::optional<std::string> device_memory;
  std::string device = "cpu";  // cpu, or cuda / cuda:N: what the model would take on a GPU
  int64_t max_batch_size = 8;  // an ONNX model's, as `pier serve`'s default
};

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return buffer;
}

nlohmann::json ToJson(const model::GgufFile& file, const model::ModelInfo& info) {
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [type, count] : info.tensor_types) types[std::string(DTypeName(type))] = count;
  nlohmann::json out = {
      {"file", file.path()},
      {"gguf_version", file.version()},
      {"file_bytes", file.file_size()},
      {"architecture", info.architecture},
      {"name", info.name},
      {"context_length", info.context_length},
      {"embedding_length", info.embedding_length},
      {"block_count", info.block_count},
      {"feed_forward_length", info.feed_forward_length},
      {"head_count", info.head_count},
      {"head_count_kv", info.head_count_kv},
      {"head_dim", info.head_dim},
      {"rope_dimension_count", info.rope_dimension_count},
      {"rope_freq_base", info.rope_freq_base},
      {"rms_norm_eps", info.rms_norm_eps},
      {"vocab_size", info.vocab_size},
      {"tensor_count", file.tensors().size()},
      {"tensor_types", types},
      {"parameter_count", info.parameter_count},
      {"weight_bytes", info.weight_bytes},
      {"kv_bytes_per_token", info.kv_bytes_per_token},
      {"has_chat_template", info.has_chat_template},
  };
  out["rope_scaling"] = nullptr;
  if (info.rope_scaling.has_value()) {
    out["rope_scaling"] = {{"type", info.rope_scaling->type},
                           {"factor", info.rope_scaling->factor},
                           {"original_context_length", info.rope_scaling->original_context}};
  }
  return out;
}

void PrintText(const model::GgufFile& file, const model::ModelInfo& info) {
  auto line = [](const std::string& label, const std::string& value) {
    std::printf("%-22s %s\n", (label + ":").c_str(), value.c_str());
  };
  auto number = [](auto v) { return std::to_string(v); };
  auto real = [](double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", v);
    return std::string(buffer);
  };
  line("file", file.path() + " (GGUF v" + number(file.version()) + ", " +
                   HumanBytes(file.file_size()) + ")");
  line("name", info.name.empty() ? "(none)" : info.name);
  line("architecture", info.architecture);
  line("context length", number(info.context_length));
  line("embedding length", number(info.embedding_length));
  line("blocks", number(info.block_count));
  line("feed-forward length", number(info.feed_forward_length));
  line("attention heads", number(info.head_count) + " (kv heads " + number(info.head_count_kv) +
                              ", head dim " + number(info.head_dim) + ")");
  line("rope",
       "freq base " + real(info.rope_freq_base) + ", dims " + number(info.rope_dimension_count) +
           (info.rope_scaling.has_value()
                ? ", scaling " + info.rope_scaling->type + " x" + real(info.rope_scaling->factor)
                : ", no scaling"));
  if (info.sliding_window > 0) {
    line("sliding window",
         number(info.sliding_window) + " positions" +
             (info.architecture == "gemma3"
                  ? " on " + number(info.block_count - info.block_count / 6) + " of " +
                        number(info.block_count) + " layers (every 6th attends globally)"
              : info.architecture == "gemma2"
                  ? " on " + number(info.block_count - info.block_count / 2) + " of " +
                        number(info.block_count) + " layers (every other)"
                  : " on every layer"));
  }
  if (info.attn_logit_softcapping > 0 || info.final_logit_softcapping > 0) {
    line("soft-capping", "attention " + real(info.attn_logit_softcapping) + ", logits " +
                             real(info.final_logit_softcapping) + " (0: none)");
  }
  line("rms norm eps", real(info.rms_norm_eps));
  line("vocab size", number(info.vocab_size));
  std::string types;
  for (const auto& [type, count] : info.tensor_types) {
    types += (types.empty() ? "" : ", ") + std::string(DTypeName(type)) + " " + number(count);
  }
  line("tensors", number(file.tensors().size()) + " (" + types + ")");
  line("parameters", number(info.parameter_count));
  line("weights", number(info.weight_bytes) + " bytes (" + HumanBytes(info.weight_bytes) + ")");
  line("KV cache per token", number(info.kv_bytes_per_token) +
                                 " bytes (f16 K and V, the CPU runner's default; see --memory)");
  line("chat template", info.has_chat_template ? "present" : "absent");
}

nlohmann::json MemoryJson(const model::GgufFile& file, const engine::MemoryEstimate& e) {
  return {{"file", file.path()},
          {"context_tokens", e.kv_tokens},
          {"threads", e.threads},
          {"max_step_tokens", e.max_step_tokens},
          {"mapped_weight_bytes", e.mapped_weight_bytes},
          {"packed_weight_bytes", e.packed_weight_bytes},
          {"converted_weight_bytes", e.small_weight_bytes},
          {"gpu_weight_bytes", e.gpu_weight_bytes},
          {"weight_bytes", e.weight_bytes()},
          {"kv_dtype", engine::KvDtypeName(e.kv_dtype)},
          {"kv_bytes_per_token", e.kv_bytes_per_token},
          {"kv_bytes", e.kv_bytes},
          {"kv_layers", e.kv_layers},
          {"kv_sliding_layers", e.kv_sliding_layers},
          {"kv_window", e.kv_window},
          {"kv_sequence_bytes", e.kv_sequence_bytes},
          {"workspace_step_bytes", e.workspace_step_bytes},
          {"workspace_bytes", e.workspace_bytes},
          {"graph_workspace_bytes", e.graph_workspace_bytes},
          {"total_bytes", e.total_bytes()}};
}

void PrintMemory(const model::GgufFile& file, const engine::MemoryEstimate& e) {
  auto line = [](const std::string& label, uint64_t bytes, const std::string& note = "") {
    std::printf("%-26s %12llu bytes (%s)%s\n", (label + ":").c_str(),
                static_cast<unsigned long long>(bytes), HumanBytes(bytes).c_str(), note.c_str());
  };
  std::printf("memory to load %s with %lld tokens of context (%d threads, steps of %lld tokens):\n",
              file.path().c_str(), static_cast<long long>(e.kv_tokens), e.threads,
              static_cast<long long>(e.max_step_tokens));
  if (e.gpu_weight_bytes > 0) {
    line("weights, on the GPU", e.gpu_weight_bytes,
         ", every tensor as the file stores it (norms in f32), one block");
  } else {
    line("weights, mapped", e.mapped_weight_bytes, ", used in place");
    line("weights, packed", e.packed_weight_bytes,
         ", matrices repacked for the packed kernels, pool segment");
    line("weights, converted", e.small_weight_bytes, ", f32 norms and biases, pool segment");
  }
  line("KV cache per token", e.kv_bytes_per_token,
       ", " + std::string(engine::KvDtypeName(e.kv_dtype)) + " K and V, all layers");
  line("KV cache for " + std::to_string(e.kv_tokens) + " tokens", e.kv_bytes);
  if (e.kv_sliding_layers > 0) {
    // What releasing the sliding layers' blocks behind their window buys.
    const double share = static_cast<double>(e.kv_sequence_bytes) /
                         static_cast<double>(std::max<uint64_t>(1, e.kv_bytes));
    char note[160];
    std::snprintf(note, sizeof(note),
                  ", %lld of %lld layers attend the last %lld positions and release the blocks "
                  "behind them: %.0f%% of the cache",
                  static_cast<long long>(e.kv_sliding_layers), static_cast<long long>(e.kv_layers),
                  static_cast<long long>(e.kv_window), 100.0 * share);
    line("one " + std::to_string(e.kv_tokens) + "-token sequence", e.kv_sequence_bytes, note);
  }
  line("workspace", e.workspace_bytes,
       ", pool segment for a step of " + std::to_string(e.workspace_step_bytes) + " bytes");
  if (e.graph_workspace_bytes > 0) {
    line("of which decode graphs", e.graph_workspace_bytes, ", CUDA graphs' buffers");
  }
  line("total", e.total_bytes(), ", reserved before loading");
}

int Fail(const Status& status) {
  std::cerr << "pier inspect: " << status.ToString() << "\n";
  return 1;
}

struct BudgetCheck {
  uint64_t capacity_bytes = 0;
  uint64_t budget_bytes = 0;
};

// The budget `pier run` would have with the same --memory-budget and --device-memory.
Result<std::optional<BudgetCheck>> ResolveBudget(const InspectOptions& options) {
  if (!options.memory_budget.has_value() && !options.device_memory.has_value()) {
    return std::optional<BudgetCheck>();
  }
  BudgetSpec spec = BudgetSpec::Percent(100);
  if (options.memory_budget.has_value()) {
    PIER_ASSIGN_OR_RETURN(spec, ParseBudget(*options.memory_budget, "--memory-budget"));
  }
  CpuDeviceOptions device_options;
  if (options.device_memory.has_value()) {
    PIER_ASSIGN_OR_RETURN(device_options.capacity_bytes,
                          ParseByteSize(*options.device_memory, "--device-memory"));
  }
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device, CpuDevice::Create(device_options));
  BudgetCheck check;
  check.capacity_bytes = device->TotalBytes();
  PIER_ASSIGN_OR_RETURN(check.budget_bytes, spec.Resolve(check.capacity_bytes));
  return std::optional<BudgetCheck>(check);
}

int RunInspectMemory(const InspectOptions& options, const model::GgufFile& file) {
  if (options.ctx < 2) return Fail(InvalidArgumentError("--ctx must be at least 2"));
  if (options.threads < 0) return Fail(InvalidArgumentError("--threads must be >= 1"));
  engine::LocalModelOptions model_options;
  model_options.threads = options.threads > 0
                              ? options.threads
                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  model_options.kv_tokens = engine::ClampContext(file, options.ctx);
  auto kv_dtype = engine::ParseKvDtype(options.kv_dtype);
  if (!kv_dtype.ok()) return Fail(kv_dtype.status().WithContext("--kv-dtype"));
  model_options.kv_dtype = *kv_dtype;
  if (!options.weights_dtype.empty() && options.weights_dtype != "none") {
    auto weights = engine::ParseWeightsDtype(options.weights_dtype);
    if (!weights.ok()) return Fail(weights.status().WithContext("--weights-dtype"));
    model_options.weights_dtype = *weights;
  }
  if (options.device == "cuda" || CudaOrdinalOf(options.device) >= 0) {
    model_options.device = DeviceKind::kCuda;
  } else if (options.device != "cpu") {
    return Fail(InvalidArgumentError("--device '" + options.device + "': cpu or cuda[:N]"));
  }
  if (model_options.device == DeviceKind::kCuda && options.memory_budget.has_value() &&
      !options.device_memory.has_value()) {
    // The capacity probed here is the CPU's; a GPU's must be given.
    return Fail(
        InvalidArgumentError("--device cuda with --memory-budget needs --device-memory "
                             "(the GPU's memory)"));
  }
  auto budget = ResolveBudget(options);
  if (!budget.ok()) return Fail(budget.status());
  auto estimate = engine::EstimateMemory(file, model_options);
  if (!estimate.ok()) return Fail(estimate.status());
  const bool fits = !budget->has_value() || estimate->total_bytes() <= (*budget)->budget_bytes;
  if (options.json) {
    nlohmann::json j = MemoryJson(file, *estimate);
    if (budget->has_value()) {
      j["capacity_bytes"] = (*budget)->capacity_bytes;
      j["budget_bytes"] = (*budget)->budget_bytes;
      j["fits"] = fits;
    }
    std::cout << j.dump(2) << "\n";
  } else {
    PrintMemory(file, *estimate);
    if (budget->has_value()) {
      std::printf("%-26s %12llu bytes (%s) of a device of %s: %s\n",
                  "budget:", static_cast<unsigned long long>((*budget)->budget_bytes),
                  HumanBytes((*budget)->budget_bytes).c_str(),
                  HumanBytes((*budget)->capacity_bytes).c_str(), fits ? "fits" : "does not fit");
    }
  }
  return 0;
}

// An encoder (embedding) model: its architecture, pooling and dimensions.
int InspectEncoder(const InspectOptions& options, const model::GgufFile& file) {
  Result<encoder::EncoderInfo> info = encoder::ReadEncoderInfo(file);
  if (!info.ok()) return Fail(info.status());
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [type, count] : info->tensor_types) types[std::string(DTypeName(type))] = count;
  if (options.json) {
    const nlohmann::json out = {
        {"file", file.path()},
        {"gguf_version", file.version()},
        {"file_bytes", file.file_size()},
        {"kind", "embed"},
        {"architecture", info->architecture},
        {"name", info->name},
        {"context_length", info->context_length},
        {"embedding_length", info->embedding_length},
        {"block_count", info->block_count},
        {"feed_forward_length", info->feed_forward_length},
        {"head_count", info->head_count},
        {"head_dim", info->head_dim},
        {"layer_norm_eps", info->layer_norm_eps},
        {"pooling", encoder::PoolingName(info->pooling)},
        {"token_type_count", info->token_type_count},
        {"vocab_size", info->vocab_size},
        {"tensor_count", file.tensors().size()},
        {"tensor_types", types},
        {"parameter_count", info->parameter_count},
        {"weight_bytes", info->weight_bytes},
    };
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  auto line = [](const std::string& label, const std::string& value) {
    std::printf("%-22s %s\n", (label + ":").c_str(), value.c_str());
  };
  auto number = [](auto v) { return std::to_string(v); };
  line("file", file.path() + " (GGUF v" + number(file.version()) + ", " +
                   HumanBytes(file.file_size()) + ")");
  line("name", info->name.empty() ? "(none)" : info->name);
  line("kind", "embedding model (encoder)");
  line("architecture", info->architecture);
  line("pooling", std::string(encoder::PoolingName(info->pooling)));
  line("dimensions", number(info->embedding_length));
  line("context length", number(info->context_length));
  line("blocks", number(info->block_count));
  line("feed-forward length", number(info->feed_forward_length));
  line("attention heads", number(info->head_count) + " (head dim " + number(info->head_dim) + ")");
  line("token types", number(info->token_type_count));
  line("vocab size", number(info->vocab_size));
  std::string type_list;
  for (const auto& [type, count] : info->tensor_types) {
    type_list +=
        (type_list.empty() ? "" : ", ") + std::string(DTypeName(type)) + " " + number(count);
  }
  line("tensors", number(file.tensors().size()) + " (" + type_list + ")");
  line("parameters", number(info->parameter_count));
  line("weights", number(info->weight_bytes) + " bytes (" + HumanBytes(info->weight_bytes) + ")");
  return 0;
}

int RunInspect(const InspectOptions& options) {
  const std::string path = options.model.empty() ? DefaultModelPath() : options.model;
  if (path.ends_with(".onnx")) {
    return RunInspectOnnx(path, options.memory, options.threads, options.max_batch_size,
                          options.json);
  }
  auto file = model::GgufFile::Open(path);
  if (!file.ok()) return Fail(file.status());
  if (Result<std::string_view> arch = (*file)->GetString("general.architecture");
      arch.ok() && encoder::IsEncoderArchitecture(*arch)) {
    if (options.memory) {
      return Fail(UnsupportedError(path +
                                   ": --memory estimates an LLM's KV cache; an embedding "
                                   "model has none (its weights are listed without --memory)"));
    }
    return InspectEncoder(options, **file);
  }
  if (options.memory) return RunInspectMemory(options, **file);
  auto info = model::ReadModelInfo(**file);
  if (!info.ok()) {
    std::cerr << "pier inspect: " << info.status().ToString() << "\n";
    return 1;
  }
  if (options.json) {
    std::cout << ToJson(**file, *info).dump(2) << "\n";
  } else {
    PrintText(**file, *info);
  }
  return 0;
}

void RegisterInspect(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* command = app.add_subcommand("inspect", "Show what a GGUF or ONNX model file holds");
  command->add_option("model", options->model,
                      "GGUF or ONNX model file (default: the default model in $PIER_MODELS)");
  command
      ->add_option("--max-batch-size", options->max_batch_size,
                   "An ONNX model's batch (0: unbatched); with --memory its warm-up runs at it")
      ->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON object");
  command->add_flag("--memory", options->memory,
                    "Show what loading the model would reserve from the memory budget");
  command->add_option("--ctx", options->ctx, "With --memory: context (KV cache) size in tokens")
      ->capture_default_str();
  command->add_option("--threads", options->threads,
                      "With --memory: compute threads (default: all, as pier run)");
  command
      ->add_option("--kv-dtype", options->kv_dtype,
                   "With --memory: KV cache element type, f32 or f16 (as pier run)")
      ->capture_default_str();
  command->add_option("--weights-dtype", options->weights_dtype,
                      "With --memory: weights quantized at load, q8_0 or q4_0 (as pier run)");
  command->add_option("--memory-budget", options->memory_budget,
                      "With --memory: say whether the model fits this budget (as pier run)");
  command->add_option("--device-memory", options->device_memory,
                      "With --memory: the device capacity to assume (as pier run)");
  command
      ->add_option("--device", options->device,
                   "With --memory: the device to size for, cpu or cuda[:N] (a GPU: the CUDA "
                   "runner's weights and workspaces; no GPU needed)")
      ->capture_default_str();
  command->callback([options, &exit_code] { exit_code = RunInspect(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(inspect, RegisterInspect);

}  // namespace pier::cli
