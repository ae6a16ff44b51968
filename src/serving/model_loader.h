// OpenModel: opens one model (all its instances) on its device, the way `pier serve`'s
// ModelManager brings a model up, in this process or one `pier worker` process per instance
// (ModelLoadOptions::workers): the KV cache holds `ctx`
// positions for all requests together (one request at most the model's trained context),
// the engine is sized from the scheduler limits, and `created` is the file's
// modification time. The result owns its hosts (ServedModel::parts): dropping the last
// reference stops its engines and returns its memory.
//
// Thread-safety: plain functions; loads that run together mis-measure each other's memory, so
// the manager runs one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "placement/binding.h"
#include "serving/device_health.h"
#include "serving/device_set.h"
#include "serving/model_host.h"
#include "serving/model_registry.h"
#include "serving/model_settings.h"
#include "serving/tensor_host.h"

namespace pier::serving {

struct ModelLoadOptions {
  std::string path;                  // GGUF file
  std::string id;                    // what clients name; empty: the file name without .gguf
  std::vector<std::string> aliases;  // other names clients may use
  // A Jinja chat template file that replaces the GGUF's (empty: the file's own). A template
  // that does not parse fails the load, naming the file.
  std::string chat_template_path;
  // A tensor model's class names (class_labels.h): a file, "metadata" or "metadata:KEY";
  // empty: none.
  std::string labels;
  int priority = 0;  // its memory owners' priority under reclaim
  // Where it runs: "cpu", "cuda:N" (GPU N in PCI bus order, through the CUDA runner), a GPU's
  // UUID, or with workers a MIG instance's ("MIG-..."). A GPU that cannot be used fails the
  // load with the reason.
  std::string device = "cpu";
  // The device is the server's default (`--device`), not the model's own: an embedding model
  // then runs on the CPU (where encoders run) instead of being refused.
  bool device_from_server = false;
  int instances = 1;  // engines serving it (each with its own KV and owners)
  // Its engine, KV cache, batcher and QoS settings (model_settings.h): the server's defaults
  // with the model's own keys applied. threads 0: every core.
  ModelSettings settings;
  // Run each instance in its own `pier worker` process (worker_client.h) instead of in this
  // one. Each worker is granted what its instance is guaranteed (weights, workspace, and the
  // KV minimum or, static, the whole KV cache); an elastic KV cache grows beyond it with
  // chunks lent through the device's governor (worker_client.h).
  bool workers = false;
  std::chrono::milliseconds heartbeat_timeout{5000};  // a worker silent this long is killed
  uint64_t worker_leak_margin_bytes = 0;  // resident above grant + this: leaking (0: off)
  // The device's view of each worker (device memory, GPU errors; null: none).
  std::shared_ptr<const DeviceHealthProbe> device_health = nullptr;
  std::chrono::milliseconds worker_drain_grace{30'000};  // a leaking worker's requests' time
  std::vector<std::string> worker_environment = {};      // "NAME=value" for the workers (tests)
  // Where each worker instance runs (`cpus`, `numa_node`, `gpu`, MPS limits): none, one for
  // every instance, or one per instance; placed by the device set's Placer at load.
  std::vector<placement::BindingRequest> bindings = {};
  // settings.speculative with method draft: the draft model's proposer (DraftProposer), made
  // by the model manager from the loaded draft; the engine runs in this process then.
  std::shared_ptr<engine::Proposer> draft_proposer = nullptr;

  bool operator==(const ModelLoadOptions&) const = default;
};

// One instance's host options (its governor owners named after `id`); the swap pool is left
// for the caller to set.
ModelHostOptions HostOptionsOf(const ModelLoadOptions& options, const std::string& id);
// A tensor (ONNX) model's host options: its path, threads, batching and `inputs` (shapes and pad
// rules).
TensorHostOptions TensorOptionsOf(const ModelLoadOptions& options, const std::string& id);
// Whether `path` names a tensor (ONNX) model (an .onnx file) rather than a GGUF one.
bool IsOnnxPath(std::string_view path);

// The file's and the host's errors (a model that does not fit the device's budget is
// RESOURCE_EXHAUSTED with the numbers).
[[nodiscard]] Result<ModelRef> OpenModel(const ModelLoadOptions& options, DeviceSet& devices);

// Where the model runs: options.device, or "cpu" for an embedding model whose device is the
// server's default. The file's errors.
[[nodiscard]] Result<std::string> EffectiveDevice(const ModelLoadOptions& options);

// What admission will hold for the model from load on (all instances): weights, workspace and
// the KV minimum (elastic) or the whole KV cache (static), estimated from the file's header.
[[nodiscard]] Result<uint64_t> GuaranteedBytes(const ModelLoadOptions& options);

// What a GPU worker's process holds on its GPU outside its governor (the CUDA context and
// module images), charged to the GPU's books beside its grant.
inline constexpr uint64_t kGpuWorkerContextBytes = uint64_t{512} << 20;

// What the model's device's books hold for it from load on: GuaranteedBytes, plus each GPU
// worker's kGpuWorkerContextBytes.
[[nodiscard]] Result<uint64_t> DeviceBytes(const ModelLoadOptions& options);

// "SmolLM2-135M-Instruct.Q4_1" for ".../SmolLM2-135M-Instruct.Q4_1.gguf".
std::string ModelIdFromPath(std::string_view path);

}  // namespace pier::serving
