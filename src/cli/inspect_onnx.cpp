// `pier inspect MODEL.onnx [--memory] [--threads N] [--json]`: what an ONNX model takes and
// gives. Without --memory it reads the file and asks ONNX Runtime for the graph's inputs and
// outputs (names, types, shapes with -1 for open dimensions), whether it batches, its opset,
// producer and initializer bytes. With --memory it loads the model as `pier serve` would
// (serving/tensor_host.h: the session, warm-up at max_batch_size) under an unlimited budget
// and reports what was measured: the weights through Pier's allocator, the working memory of
// a full batch, and what ONNX Runtime allocated beside it; and the provisional figure
// admission starts from.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "device/cpu/cpu_device.h"
#include "memory/byte_size.h"
#include "serving/tensor_host.h"
#include "tensor_models/onnx/onnx_session.h"

namespace pier::cli {
namespace {

int Fail(const Status& status) {
  std::cerr << "pier inspect: " << status.ToString() << "\n";
  return 1;
}

nlohmann::json SpecsJson(const std::vector<TensorSpec>& specs) {
  nlohmann::json list = nlohmann::json::array();
  for (const TensorSpec& spec : specs) {
    list.push_back({{"name", spec.name},
                    {"datatype", std::string(ElementTypeName(spec.type))},
                    {"shape", spec.shape}});
  }
  return list;
}

}  // namespace

int RunInspectOnnx(const std::string& path, bool memory, int threads, int64_t max_batch_size,
                   bool json) {
  // Log lines (where ONNX Runtime was loaded from) go to stderr: stdout holds the answer, which
  // --json makes a document for scripts.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "pier", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  std::unique_ptr<CpuDevice> device;
  if (Result<std::unique_ptr<CpuDevice>> made = CpuDevice::Create(); made.ok()) {
    device = std::move(*made);
  } else {
    return Fail(made.status());
  }
  Result<std::unique_ptr<MemoryGovernor>> governor = MemoryGovernor::Create(device.get());
  if (!governor.ok()) return Fail(governor.status());
  serving::TensorHostOptions options;
  options.path = path;
  options.id = "inspect";
  options.threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  options.max_batch_size = max_batch_size;
  Result<uint64_t> provisional = serving::TensorHost::EstimateBytes(options);
  if (!provisional.ok()) return Fail(provisional.status());

  nlohmann::json out;
  std::unique_ptr<serving::TensorHost> host;
  std::unique_ptr<tensor_models::OnnxSession> session;
  const serving::TensorModelInfo* info = nullptr;
  tensor_models::OnnxFileInfo file;
  if (memory) {
    Result<std::unique_ptr<serving::TensorHost>> opened =
        serving::TensorHost::Open(options, governor->get());
    if (!opened.ok()) return Fail(opened.status());
    host = std::move(*opened);
    info = &host->info();
  } else {
    tensor_models::OnnxSessionOptions session_options;
    session_options.path = path;
    session_options.governor = governor->get();
    session_options.max_batch_size = max_batch_size;
    Result<OwnerId> owner = (*governor)->AddOwner({.name = "inspect"});
    if (!owner.ok()) return Fail(owner.status());
    session_options.owner = *owner;
    Result<std::unique_ptr<tensor_models::OnnxSession>> opened =
        tensor_models::OnnxSession::Open(session_options);
    if (!opened.ok()) return Fail(opened.status());
    session = std::move(*opened);
    info = &session->info();
  }
  Result<tensor_models::OnnxFileInfo> read = tensor_models::ReadOnnxFileInfo(path);
  if (!read.ok()) return Fail(read.status());
  file = *read;

  out["file"] = path;
  out["kind"] = "tensor (ONNX)";
  out["file_bytes"] = file.file_bytes;
  out["ir_version"] = file.ir_version;
  out["opset"] = file.opset;
  out["producer"] = file.producer;
  out["nodes"] = file.nodes;
  out["initializers"] = file.initializers;
  out["parameter_bytes"] = file.parameter_bytes;
  out["max_batch_size"] = info->max_batch_size;
  out["inputs"] = SpecsJson(info->inputs);
  out["outputs"] = SpecsJson(info->outputs);
  out["provisional_bytes"] = *provisional;
  out["metadata"] = file.metadata;
  if (host != nullptr) {
    const serving::TensorHostMemory& m = host->memory();
    out["memory"] = {{"weights_bytes", m.weights_bytes},
                     {"workspace_peak_bytes", m.workspace_peak},
                     {"onnxruntime_overhead_bytes", m.overhead_bytes},
                     {"total_bytes", m.weights_bytes + m.workspace_peak + m.overhead_bytes},
                     {"warmed_up", m.warmed}};
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  auto line = [](const std::string& label, const std::string& value) {
    std::printf("%-22s %s\n", (label + ":").c_str(), value.c_str());
  };
  line("file", path + " (" + FormatBytes(file.file_bytes) + ")");
  line("kind", "tensor model (ONNX, IR " + std::to_string(file.ir_version) + ", opset " +
                   std::to_string(file.opset) + ")");
  line("producer", file.producer.empty() ? "(none)" : file.producer);
  line("nodes", std::to_string(file.nodes));
  line("parameters",
       std::to_string(file.initializers) + " initializers, " + FormatBytes(file.parameter_bytes));
  line("batching", info->max_batch_size > 0
                       ? "up to " + std::to_string(info->max_batch_size) + " items per run"
                       : std::string("none (one request per run, shapes as declared)"));
  for (const TensorSpec& spec : info->inputs) {
    line("input",
         spec.name + " " + std::string(ElementTypeName(spec.type)) + " " + ShapeText(spec.shape));
  }
  for (const TensorSpec& spec : info->outputs) {
    line("output",
         spec.name + " " + std::string(ElementTypeName(spec.type)) + " " + ShapeText(spec.shape));
  }
  // The graph's metadata_props, each summarised (a class list is what `labels: metadata:KEY`
  // reads).
  for (const auto& [key, value] : file.metadata) {
    const size_t lines = static_cast<size_t>(std::count(value.begin(), value.end(), '\n')) + 1;
    std::string shown = value.substr(0, std::min(value.find('\n'), size_t{40}));
    if (shown.size() < value.size()) shown += " ...";
    line("metadata", key + ": " + shown + " (" + std::to_string(value.size()) + " bytes" +
                         (lines > 1 ? ", " + std::to_string(lines) + " lines" : "") + ")");
  }
  line("admission estimate", FormatBytes(*provisional) + " (before it is measured)");
  if (host != nullptr) {
    const serving::TensorHostMemory& m = host->memory();
    line("weights (allocator)", FormatBytes(m.weights_bytes));
    line("working memory", FormatBytes(m.workspace_peak) +
                               (m.warmed ? " (a full batch, measured)" : " (not warmed up)"));
    line("onnxruntime's own",
         FormatBytes(m.overhead_bytes) + " (resident growth the allocator did not see)");
    line("total", FormatBytes(m.weights_bytes + m.workspace_peak + m.overhead_bytes));
  } else {
    std::printf("(--memory loads it and measures what it holds)\n");
  }
  return 0;
}

}  // namespace pier::cli
