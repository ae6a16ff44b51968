// ServeOptions: every setting of `pier serve`, from its defaults, a YAML configuration file
// (--config) and command-line flags, in that order (a flag given on the command line wins
// over the file).
//
// Each setting has one name used both ways: the YAML key `max_batched_tokens` is the flag
// `--max-batched-tokens`. The file is a map of names to single values:
//
//   model: models/SmolLM2-135M-Instruct.Q4_1.gguf   # relative paths: from the file's folder
//   port: 8081
//   memory_budget: 80%
//   api_keys: keys.yaml
//
// or, for several models in one server, a `models:` list (model_repository.h) beside the
// server-wide keys.
//
// Unknown names in the file are an error naming them (a typo never goes unnoticed), as are
// values that do not parse or are out of range (the message names the file or flag), and
// settings that contradict each other (default_max_tokens above max_tokens_limit).
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/model_repository.h"
#include "common/status.h"
#include "memory/byte_size.h"
#include "pipelines/pipeline_spec.h"
#include "serving/model_settings.h"
#include "serving/request_policy.h"

namespace pier::cli {

struct ServeOptions {
  std::string model;  // GGUF file; empty: the default model
  std::string name;   // model id; empty: the file name without .gguf
  std::string host = "127.0.0.1";
  uint16_t port = 8080;     // 0: any free port
  int grpc_port = -1;       // KServe v2 gRPC: -1 off, 0 any free port
  int http_threads = 1;     // I/O threads of the HTTP server
  std::string api_keys;     // keys file; empty: the API is open
  std::string metrics_key;  // empty: /metrics is open
  std::string admin_key;    // empty: /admin/* answer on loopback only
  // ONNX Runtime's library for tensor models; empty: the one scripts/bootstrap placed (its
  // path recorded at build time), then beside the binary, then the loader's search.
  std::string onnxruntime_library;
  BudgetSpec memory_budget = BudgetSpec::Percent(100);
  std::optional<uint64_t> device_memory;  // CPU capacity; unset: probed
  // Where models run unless they name their own `device`: cpu, cuda:N, a GPU's UUID, or a MIG
  // instance's (worker processes only).
  std::string device = "cpu";
  uint64_t memory_reserve = 0;  // bytes of the budget never handed to models
  // Each class's longest wait in a queue before a 429 or the delay action, and its SLO targets
  // (serving/request_policy.h); none by default.
  serving::ClassQueueLimits class_max_queue;
  serving::ClassSloTargets class_slo;
  uint64_t max_body_bytes = uint64_t{4} << 20;
  double shutdown_grace_seconds = 10;  // in-flight requests may finish this long after SIGTERM
  double watchdog_seconds = 30;        // /ready's engine-stall timeout
  // GPU telemetry through NVML (metrics/gpu_telemetry.h): on by default (a machine without
  // NVML says so once); its sampling period moves between these with the GPUs' load.
  bool gpu_telemetry = true;
  double gpu_telemetry_min_period_seconds = 1;
  double gpu_telemetry_max_period_seconds = 10;
  bool ready_any = false;  // ready_policy any: /ready is 200 while any loaded model can serve
  double load_wait_seconds = 60;     // a request for an on_demand model waits this for its load
  double unload_grace_seconds = 30;  // in-flight requests of a model being unloaded may finish
  // Each model instance in its own `pier worker` process, restarted when it fails.
  bool workers = false;
  double worker_heartbeat_timeout_seconds = 5;  // a worker silent this long is killed
  // A worker resident this far above its grant is leaking: drained and restarted (0: off).
  uint64_t worker_leak_margin = uint64_t{256} << 20;
  // An hwloc XML file to place worker instances on instead of this machine (empty: this one).
  std::string topology;
  // Slow readers: a stream is aborted when this many engine events wait unsent, or when one
  // write to its client takes longer than write_timeout seconds.
  int64_t stream_backlog = 4096;
  double write_timeout_seconds = 30;
  // max_tokens of a request without one (capped by max_tokens_limit and the context), and the
  // largest a request may ask for (0: the context is the only limit).
  int64_t default_max_tokens = 2048;
  int64_t max_tokens_limit = 0;
  // Origins allowed by CORS ("https://app.example", or "*"); empty: no CORS headers.
  std::vector<std::string> cors_origins;
  // The per-model keys' server-wide values (serving/model_settings.h): every model's defaults,
  // which a `models:` entry may override for its model.
  serving::ModelSettings model_defaults;
  // The file's `models:` list (model_repository.h); empty: one model, from `model` and `name`.
  std::vector<ModelConfig> models;
  // The file's `pipelines:` list (pipelines/pipeline_spec.h), checked but not yet built.
  std::vector<pipelines::PipelineSpec> pipelines;
};

// The names of all settings, as YAML keys (flags: "--" + name with '_' -> '-'), except
// "config", which is a flag only: the server's own, then the per-model keys
// (serving::ModelSettingKeys()).
const std::vector<std::string_view>& ServeSettingNames();

// INVALID_ARGUMENT (naming `at`) unless `value` names a device: cpu, cuda:N, a GPU's UUID
// (GPU-...) or a MIG instance's (MIG-...). Whether it is usable is known when a model loads.
[[nodiscard]] Status CheckDeviceName(std::string_view value, std::string_view at);

// "--max-batched-tokens" for "max_batched_tokens".
std::string FlagName(std::string_view setting);

// Sets one setting from its text (a flag's). `source` names where the value came from, for
// the message ("--port", "serve.yaml: port"). INVALID_ARGUMENT for an unknown name, a value
// that does not parse or is out of range. A per-model key sets options->model_defaults.
[[nodiscard]] Status ApplyServeSetting(ServeOptions* options, std::string_view name,
                                       std::string_view value, std::string_view source);
// The same from a file's value: a scalar (as a JSON string), or a list or map where the key
// takes one (model_settings.h); the server's own keys take scalars only.
[[nodiscard]] Status ApplyServeSettingValue(ServeOptions* options, std::string_view name,
                                            const nlohmann::json& value, std::string_view source);

// The settings of a YAML document, in file order, each value as JSON (scalars as strings).
// INVALID_ARGUMENT (naming `source_name`) for bad YAML, a document that is not a map, a key
// without a value, and unknown names (all of them listed). An empty document has no settings.
[[nodiscard]] Result<std::vector<std::pair<std::string, nlohmann::json>>> ParseServeConfig(
    std::string_view yaml_text, std::string_view source_name);

// Defaults, then the file named by flags["config"] (when present), then every other flag.
// `flags` maps setting names (underscored, as in ServeSettingNames, plus "config") to the text
// given on the command line. Relative `model` and `api_keys` paths from the file are taken
// from the file's folder. NOT_FOUND when the file cannot be read.
[[nodiscard]] Result<ServeOptions> ResolveServeOptions(
    const std::map<std::string, std::string>& flags);

}  // namespace pier::cli
