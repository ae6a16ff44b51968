// AdminRoutes: the routes of `pier serve` besides the OpenAI completions: GET /health,
// GET /ready, GET /metrics, GET /v1/models, GET /v1/models/{id}, POST /tokenize and
// POST /detokenize. EngineWatchdog: the stall rule behind /ready.
//
// Auth: with API keys, /v1/models*, /tokenize and /detokenize need a key (401 otherwise);
// /health and /ready are always open; /metrics is open unless a metrics key is set, then it
// needs "Authorization: Bearer <metrics key>".
//
// Readiness (GET /ready): 200 {"status":"ready"} only when the model is loaded (state
// kReady), shutdown has not begun, and the engine is not stalled; else 503
// {"status":"not ready","reason":...}. Stall rule: the engine is stalled when it has had work
// (running + waiting > 0) for longer than the watchdog timeout without finishing a step. "Has
// had work since" is the later of the engine's heartbeat (EngineStats::last_step_at_us, the end
// of its latest step) and the first observation of pending work after an idle one, so an
// engine that idled for an hour and just got a request is not reported stalled; observations
// come from every /ready call and from Tick(), which `pier serve` calls every second. The stall
// clock therefore starts at most one tick late (the rule errs towards "alive" by up to 1 s).
// A step that takes longer than the timeout (a huge prefill on a slow machine) also reads as a
// stall: choose the timeout well above the longest step (--watchdog-seconds, default 30).
//
// Ownership: borrows the client, tokenizer, keys, metrics and governor, which must outlive it.
// Thread-safety: handlers, SetState, Tick and CheckReady may run on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine_client.h"
#include "engine/scheduler/engine.h"
#include "http/api_keys.h"
#include "http/http_types.h"
#include "memory/memory_governor.h"
#include "metrics/serving_metrics.h"
#include "tokenizer/tokenizer.h"

namespace pier::http {

// The stall rule above, fed with engine snapshots. Thread-safe (one mutex).
class EngineWatchdog {
 public:
  explicit EngineWatchdog(std::chrono::microseconds stall_timeout)
      : stall_timeout_us_(stall_timeout.count()) {}

  // Records one observation at `now_us` (engine::NowUs() clock). Returns why the engine is
  // stalled, or nullopt when it is idle or stepping.
  std::optional<std::string> Observe(const engine::EngineStats& stats, engine::TimestampUs now_us);

 private:
  const int64_t stall_timeout_us_;
  std::mutex mutex_;
  engine::TimestampUs busy_since_us_ = 0;  // guarded by mutex_; 0: idle at the last observation
};

enum class ServeState : uint8_t { kLoading, kReady, kShuttingDown };

struct AdminRoutesOptions {
  std::string model_id;
  int64_t created_unix_seconds = 0;
  int64_t max_model_len = 0;  // positions one request may use (prompt + generated)
  std::chrono::milliseconds watchdog_timeout{30'000};
  std::string metrics_key;  // empty: /metrics is open
};

struct Readiness {
  bool ready = false;
  std::string reason;  // why not ready; empty when ready
};

class AdminRoutes {
 public:
  // `client`, `tokenizer` and `metrics` are required; `keys` and `governor` may be null (open
  // API; no memory figures in /metrics).
  AdminRoutes(AdminRoutesOptions options, engine::EngineClient* client,
              const tokenizer::Tokenizer* tokenizer, const ApiKeys* keys,
              const metrics::ServingMetrics* metrics, const MemoryGovernor* governor);

  // Adds the seven routes listed at the top of this file.
  void Register(Router& router);

  void SetState(ServeState state) { state_.store(state); }
  ServeState state() const { return state_.load(); }
  // Feeds the watchdog one engine snapshot (call it periodically); returns the stall reason
  // when the engine is stalled now.
  std::optional<std::string> Tick();
  Readiness CheckReady();

 private:
  HttpResponse Health(const HttpRequest& request);
  HttpResponse Ready(const HttpRequest& request);
  HttpResponse Metrics(const HttpRequest& request);
  HttpResponse ListModels(const HttpRequest& request);
  HttpResponse GetModel(const HttpRequest& request);
  HttpResponse Tokenize(const HttpRequest& request);
  HttpResponse Detokenize(const HttpRequest& request);
  // The 401 response when the request lacks a valid API key, else nullopt.
  std::optional<HttpResponse> RequireKey(const HttpRequest& request) const;

  const AdminRoutesOptions options_;
  engine::EngineClient* const client_;
  const tokenizer::Tokenizer* const tokenizer_;
  const ApiKeys* const keys_;
  const metrics::ServingMetrics* const metrics_;
  const MemoryGovernor* const governor_;
  std::atomic<ServeState> state_{ServeState::kLoading};
  EngineWatchdog watchdog_;
};

// The `route` label for a request path in HTTP metrics: the path for a known route,
// "/v1/models/{id}" for a model lookup, "other" for anything else (keeps the label set
// bounded whatever paths clients send).
std::string_view MetricsRouteLabel(std::string_view path);

}  // namespace pier::http
