// ServingMetrics: what `pier serve` counts and measures, rendered in Prometheus' text format
// for GET /metrics.
//
// The HTTP layer records each finished request (RecordRequest) and each HTTP response
// (RecordHttpResponse); Render() adds live figures read at scrape time from the engine
// (EngineStats) and the memory governor (MemoryGovernor::Stats). Names use the `pier_`
// prefix; the names vLLM dashboards and Kubernetes' Gateway API Inference Extension read
// (`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`,
// `vllm:time_to_first_token_seconds`, ...) are exposed too, as aliases with the same values.
// docs/metrics.md lists every name, its type, labels and meaning.
//
// Thread-safety: every method may be called from any thread (I/O threads record, a scrape
// renders).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/buckets.h"
#include "engine/core/engine.h"
#include "memory/memory_governor.h"
#include "serving/tensor_runner.h"

namespace pier::metrics {
class Registry;
}  // namespace pier::metrics

namespace pier::serving {

// One finished request as the HTTP layer saw it. Durations in seconds; a negative value means
// "not measured" (e.g. no token was produced, so no time to first token).
struct RequestRecord {
  std::string_view model = {};          // empty: the model name ServingMetrics was created with
  std::string_view finish_reason = {};  // "stop", "length", "abort", "error"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double queue_seconds = -1;          // arrival -> first scheduled (engine timestamps)
  double time_to_first_token = -1;    // arrival -> first token
  double time_per_output_token = -1;  // (last token - first token) / (tokens - 1)
  double e2e_seconds = -1;            // arrival -> finished
  // QoS (issue #16): the request's tenant and priority class ("critical" .. "low"; empty: no
  // per-tenant series), and whether it met its class's SLO targets (nullopt: the class has
  // none). finish_reason "expired": refused as its queue deadline passed.
  std::string_view tenant = {};
  std::string_view priority_class = {};
  std::optional<bool> slo_met = std::nullopt;
};

// One worker process of a model (with --workers on), read at scrape time.
struct WorkerFigures {
  int instance = 1;
  bool up = false;  // ready (not restarting, not quarantined)
  int64_t restarts = 0;
  uint64_t rss_bytes = 0;      // its resident memory (last heartbeat)
  uint64_t granted_bytes = 0;  // what it was granted from the device's budget, KV lent included
  uint64_t kv_lent_bytes = 0;  // elastic KV lent to it above its minimum
  std::optional<uint64_t> device_bytes = std::nullopt;  // NVML's figure for its process
};

// An embedding model's batcher, read at scrape time (encoder/embedding_batcher.h's figures).
struct EmbeddingFigures {
  using Buckets = pier::Buckets;  // common/buckets.h
  int64_t queued_texts = 0;
  int64_t batches = 0;
  int64_t texts = 0;
  int64_t tokens = 0;
  int64_t expired = 0;
  int64_t predicted_refusals = 0;
  double window_seconds = 0;
  Buckets batch_texts, batch_tokens, queue_seconds, compute_seconds;
};

// One served model's live figures, read at scrape time.
struct ModelFigures {
  std::string_view model;
  engine::EngineStats engine;
  const MemoryGovernor* governor = nullptr;                  // null: no memory figures
  std::vector<WorkerFigures> workers = {};                   // empty: in-process instances
  std::optional<EmbeddingFigures> embedding = std::nullopt;  // embedding models
  // Tensor models: their batcher's figures (TensorRunner::Stats), rendered as pier_tensor_*
  // instead of the engine's.
  std::optional<TensorRunnerStats> tensor = std::nullopt;
};

// One known model's lifecycle, read at scrape time (every model, loaded or not).
struct ModelLifecycle {
  std::string_view model;
  std::string_view state;  // "unloaded", "loading", "ready", "draining", "failed"
  int64_t loads = 0;
  int64_t load_failures = 0;
  int64_t unloads_requested = 0;  // unloads asked for (admin, reload)
  int64_t unloads_evicted = 0;    // to make room for another model
  int64_t unloads_idle = 0;       // after idle_unload_after
};

class ServingMetrics {
 public:
  explicit ServingMetrics(std::string model_name);
  ~ServingMetrics();
  ServingMetrics(const ServingMetrics&) = delete;
  ServingMetrics& operator=(const ServingMetrics&) = delete;

  void RecordRequest(const RequestRecord& record);
  // Every inter-token gap of a stream as it is sent (seconds).
  // `model`: the request's; empty: the model name this was created with.
  void RecordInterTokenLatency(double seconds, std::string_view model = {});
  // Every HTTP response, by status code (200, 400, 429, ...), route ("/v1/completions") and the
  // model it was for (empty: none, e.g. /health or a request refused before its model was
  // known: label model="").
  void RecordHttpResponse(int status, std::string_view route, std::string_view model = {});
  // One model instance loaded in `seconds` (pier_model_load_seconds; its _count counts loads).
  void RecordModelLoad(std::string_view model, double seconds);
  // Requests aborted because the client went away or read too slowly.
  // `model`: the request's; empty: the model name this was created with.
  void RecordClientAbort(std::string_view reason, std::string_view model = {});
  // A request of `tenant` and class `priority_class` refused before it reached the engine, or
  // answered by another model: `outcome` is "refused_predicted_wait", "refused_rate_limit",
  // "fallback_load", ... (pier_qos_requests_total).
  void RecordQosOutcome(std::string_view model, std::string_view tenant,
                        std::string_view priority_class, std::string_view outcome);

  // The full exposition (text format 0.0.4): the recorded families, and the live figures of
  // every model (engine state, and memory when its governor is given), one child per model.
  // With `lifecycle`, pier_model_state has a child per state of each model (1 for the state it
  // is in, 0 for the others) and the load/unload counters one per model; else every model in
  // `models` reads ready. `device`: a governor whose device series are shown even when no
  // model on it is loaded (may be null).
  std::string Render(std::span<const ModelFigures> models,
                     std::span<const ModelLifecycle> lifecycle = {},
                     const MemoryGovernor* device = nullptr) const;
  // The same for the one model this was created for. `governor` may be null.
  std::string Render(const engine::EngineStats& engine, const MemoryGovernor* governor) const;

 private:
  struct Instruments;  // the recorded families and the children hot paths use

  const std::string model_name_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<Instruments> instruments_;
};

}  // namespace pier::serving
