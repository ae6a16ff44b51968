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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/model_repository.h"
#include "common/status.h"
#include "engine/kv/kv_size.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "memory/byte_size.h"
#include "serving/request_policy.h"

namespace pier::cli {

struct ServeOptions {
  std::string model;  // GGUF file; empty: the default model
  std::string name;   // model id; empty: the file name without .gguf
  std::string host = "127.0.0.1";
  uint16_t port = 8080;      // 0: any free port
  int grpc_port = -1;        // KServe v2 gRPC: -1 off, 0 any free port
  int threads = 0;           // compute threads; 0: every core
  int http_threads = 1;      // I/O threads of the HTTP server
  std::string api_keys;      // keys file; empty: the API is open
  std::string metrics_key;   // empty: /metrics is open
  std::string admin_key;     // empty: /admin/* answer on loopback only
  int64_t max_queued = 256;  // waiting sequences before 429; 0: no limit
  BudgetSpec memory_budget = BudgetSpec::Percent(100);
  std::optional<uint64_t> device_memory;  // CPU capacity; unset: probed
  // Where models run unless they name their own `device`: cpu, cuda:N, a GPU's UUID, or a MIG
  // instance's (worker processes only).
  std::string device = "cpu";
  uint64_t memory_reserve = 0;                       // bytes of the budget never handed to models
  int64_t ctx = 4096;                                // KV cache positions, all requests together
  engine::KvDtype kv_dtype = engine::KvDtype::kF16;  // K/V element type in the cache
  // f32/f16/bf16 matrices quantized at load (q8_0 or q4_0); unset: as the file stores them.
  std::optional<DType> weights_dtype;
  // elastic: each model's KV grows on demand up to its capacity and is lent between models
  // (never below kv_min); static: each model holds its whole capacity from load on. The
  // capacity is kv_max when set (then ctx only limits one request), else ctx. Both take
  // tokens ("2048") or bytes ("64MiB").
  engine::KvPolicy kv_policy = engine::KvPolicy::kElastic;
  engine::KvSize kv_min;             // KV always kept (unset: one chunk)
  engine::KvSize kv_max;             // KV capacity (unset: ctx tokens)
  int64_t max_batched_tokens = 512;  // tokens per engine step
  // Largest prompt chunk per step while other sequences decode (0: no cap).
  int64_t prefill_chunk_while_decoding = 64;
  int64_t max_seqs = 64;  // running sequences at once
  // Embedding models' dynamic batching: the window a batch waits for company, the texts and
  // tokens one batch holds.
  int64_t max_queue_delay_ms = 10;
  int64_t max_batch_texts = 64;
  int64_t embed_batch_tokens = 4096;
  bool adaptive_batch_window = true;  // off: every batch waits the whole max_queue_delay_ms
  // Each class's longest wait in a queue before a 429 or the delay action, and its SLO targets
  // (serving/request_policy.h); none by default.
  serving::ClassQueueLimits class_max_queue;
  serving::ClassSloTargets class_slo;
  double qos_reserve = 0.05;   // share of each engine's slots, tokens and KV kept for critical
  bool qos = true;             // off: first come, first served (classes, tenants, reserve off)
  bool qos_stop_steps = true;  // EngineOptions::stop_steps_for_critical
  // Adaptive batching (serving/model_loader.h): on by default; its latency-leaning budget and
  // throughput-leaning prompt chunk (0: half of max_batched_tokens, 4 x the chunk).
  bool adaptive_batching = true;
  int64_t min_batched_tokens = 0;
  int64_t max_prefill_chunk = 0;
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
  uint64_t swap_space = 0;           // bytes of KV swap space per model instance (0: off)
  // An idle elastic KV cache gives its chunks above kv_min back after this long (0: never).
  double kv_idle_release_seconds = 120;
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
  // The file's `models:` list (model_repository.h); empty: one model, from `model` and `name`.
  std::vector<ModelConfig> models;
};

// The names of all settings, as YAML keys (flags: "--" + name with '_' -> '-'), except
// "config", which is a flag only.
const std::vector<std::string_view>& ServeSettingNames();

// INVALID_ARGUMENT (naming `at`) unless `value` names a device: cpu, cuda:N, a GPU's UUID
// (GPU-...) or a MIG instance's (MIG-...). Whether it is usable is known when a model loads.
[[nodiscard]] Status CheckDeviceName(std::string_view value, std::string_view at);

// "--max-batched-tokens" for "max_batched_tokens".
std::string FlagName(std::string_view setting);

// Sets one setting from its text. `source` names where the value came from, for the message
// ("--port", "serve.yaml: port"). INVALID_ARGUMENT for an unknown name, a value that does not
// parse or is out of range.
[[nodiscard]] Status ApplyServeSetting(ServeOptions* options, std::string_view name,
                                       std::string_view value, std::string_view source);

// The settings of a YAML document, in file order. INVALID_ARGUMENT (naming `source_name`)
// for bad YAML, a document that is not a map, values that are not single scalars, and unknown
// names (all of them listed). An empty document has no settings.
[[nodiscard]] Result<std::vector<std::pair<std::string, std::string>>> ParseServeConfig(
    std::string_view yaml_text, std::string_view source_name);

// Defaults, then the file named by flags["config"] (when present), then every other flag.
// `flags` maps setting names (underscored, as in ServeSettingNames, plus "config") to the text
// given on the command line. Relative `model` and `api_keys` paths from the file are taken
// from the file's folder. NOT_FOUND when the file cannot be read.
[[nodiscard]] Result<ServeOptions> ResolveServeOptions(
    const std::map<std::string, std::string>& flags);

}  // namespace pier::cli
