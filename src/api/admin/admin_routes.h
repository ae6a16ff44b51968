// AdminRoutes: the routes of `pier serve` besides the OpenAI completions: GET /health,
// GET /ready, GET /metrics, GET /v1/models, GET /v1/models/{id}, POST /tokenize,
// POST /detokenize, and the operator's GET /admin/models, GET /admin/models/{name} (one model's
// entry of the list), POST /admin/models/{name}/load,
// POST /admin/models/{name}/unload, POST /admin/models/{name}/drain (restart its worker
// processes gracefully), POST /admin/reload, GET /admin/qos (the live QoS state: queues per
// class and tenant, virtual clocks, reserve use), and the web console's live routes
// GET /admin/events (server-sent events), GET /admin/history (memory over the last minutes) and
// GET /admin/requests (what runs and waits). EngineWatchdog: the stall rule behind /ready.
//
// Admin gate: with --admin-key every /admin route needs "Authorization: Bearer <key>";
// without one only loopback clients are answered. Either way admin_guard.h refuses a POST
// from a foreign Origin, and without a key a Host that is not an IP literal or localhost
// (CSRF and DNS rebinding from a web page).
//
// Auth: with API keys, /v1/models*, /tokenize and /detokenize need a key (401 otherwise);
// /health and /ready are always open; /metrics is open unless a metrics key is set, then it
// needs "Authorization: Bearer <metrics key>".
//
// Models: every route that concerns a model takes it from the ModelRegistry: /v1/models lists
// them all with their state, /v1/models/{id} looks one up, /tokenize and /detokenize use the
// body's `model` (or the default model when there is none; 503 when it is not ready).
//
// Lifecycle (with a ModelManager): load and unload answer when done (a deferred response:
// 200 with the model's state; 404 unknown, 503 with the memory breakdown when it does not
// fit or the server stops, 409 for a model the manager does not manage); an unload drains
// (requests in flight may finish for the drain grace period, then end with a reason). Reload
// re-reads the configuration (options.read_config) and applies the difference (ModelManager::
// Reload): 200 with what was added, removed, reloaded, unchanged and failed (a model whose new
// version failed keeps serving the old one); 400 when the file no longer validates (nothing
// changes).
//
// Readiness (GET /ready): 200 {"status":"ready"} only when the models are loaded (state
// kReady), shutdown has not begun, and no model's engine is stalled nor without a ready worker
// (with `ready_any`: at least one loaded model can serve); else 503
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
// Ownership: borrows the registry (and its models), keys and metrics, which must outlive it.
// Thread-safety: handlers, SetState, Tick and CheckReady may run on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "common/mutex.h"
#include "engine/engine_client.h"
#include "metrics/gpu_telemetry.h"
#include "serving/live/event_log.h"
#include "serving/live/memory_history.h"
#include "serving/live/request_board.h"
#include "serving/model_manager.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"
#include "serving/serving_metrics.h"

namespace pier::api {

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
  Mutex mutex_;
  engine::TimestampUs busy_since_us_ PIER_GUARDED_BY(mutex_) =
      0;  // 0: idle at the last observation
};

enum class ServeState : uint8_t { kLoading, kReady, kShuttingDown };

struct AdminRoutesOptions {
  std::chrono::milliseconds watchdog_timeout{30'000};
  // /ready's rule over the loaded models: every one must be able to serve (a ready instance,
  // an engine that is not stalled), or, with ready_any, at least one of them.
  bool ready_any = false;
  // The device's governor: /admin/models and /metrics show its figures even when no model
  // on it is loaded. Null: those of the loaded models' governors only.
  const MemoryGovernor* device_governor = nullptr;
  // Every device's governor (the CPU, each GPU, GPUs kept for worker processes), listed under
  // /admin/models' "devices"; null: only device_governor.
  std::function<std::vector<const MemoryGovernor*>()> device_governors = nullptr;
  // GPU telemetry (NVML) appended to /metrics, with each worker's device memory; null: none.
  const metrics::GpuTelemetry* gpu_telemetry = nullptr;
  // Lifecycle routes: null manager: they answer 501. read_config: the models of the
  // configuration file as it is now (POST /admin/reload; null: 501).
  serving::ModelManager* manager = nullptr;
  std::function<Result<std::vector<serving::ModelSpec>>()> read_config = nullptr;
  std::string metrics_key = {};  // empty: /metrics is open
  // /admin/*: with a key, requests must send "Authorization: Bearer <admin_key>"; without
  // one they are answered only from loopback (127.0.0.1, ::1), 403 otherwise.
  std::string admin_key = {};
  // /tokenize and /detokenize for an on_demand model wait this long for its load (0: 503).
  std::chrono::milliseconds load_wait{60'000};
  // Shown by GET /admin/qos: the classes' queue limits and SLO targets, and the QoS mode.
  serving::ClassQueueLimits class_max_queue = {};
  serving::ClassSloTargets class_slo = {};
  bool qos = true;
  double qos_reserve = 0.05;
  bool qos_stop_steps = true;
  // The server's pipelines (api/pipelines/pipeline_api.h): GET /admin/pipelines' body and their
  // families appended to /metrics; null: none.
  std::function<nlohmann::json()> pipelines = nullptr;
  std::function<std::string()> pipeline_metrics = nullptr;
  // The console's live routes (admin_live.cpp): GET /admin/events (the log's events, streamed
  // or as JSON), GET /admin/history (the memory samples), GET /admin/requests (the board);
  // each null: that route answers 501. Admin actions are published to `events` too.
  serving::EventLog* events = nullptr;
  const serving::MemoryHistory* history = nullptr;
  const serving::RequestBoard* requests = nullptr;
  std::chrono::milliseconds history_interval{2000};  // how often `history` is sampled
  // Fallback switches (each: every primary model's, engaged or not): /admin/models shows a
  // model with a fallback as pier.fallback_active.
  std::vector<std::function<std::map<std::string, bool>()>> fallback_states = {};
};

// One device of /admin/models' "devices": its budget split by owner, the reserve, what is
// free, its pressure figures, and NVML's readings of a GPU when `telemetry` has them
// (admin_devices.cpp).
nlohmann::ordered_json DeviceDetail(const MemoryGovernor& governor,
                                    const metrics::GpuTelemetry* telemetry);

struct Readiness {
  bool ready = false;
  std::string reason;  // why not ready; empty when ready
};

class AdminRoutes {
 public:
  // `registry` and `metrics` are required; `keys` may be null (open API). A model whose
  // governor is null has no memory figures in /metrics.
  AdminRoutes(AdminRoutesOptions options, serving::ModelRegistry* registry, const ApiKeys* keys,
              const serving::ServingMetrics* metrics);

  // Adds the routes listed at the top of this file.
  void Register(Router& router);

  void SetState(ServeState state) { state_.store(state); }
  ServeState state() const { return state_.load(); }
  // Feeds the watchdogs one snapshot of every engine (call it periodically); returns the stall
  // reason when an engine is stalled now.
  std::optional<std::string> Tick();
  Readiness CheckReady();

 private:
  HttpResponse Health(const HttpRequest& request);
  HttpResponse Ready(const HttpRequest& request);
  HttpResponse Metrics(const HttpRequest& request);
  HttpResponse ListModels(const HttpRequest& request);
  HttpResponse GetModel(const HttpRequest& request);
  HttpResponse AdminModels(const HttpRequest& request);
  // GET /admin/models/{name}: one model's entry of /admin/models ({name} may be an alias).
  HttpResponse AdminModel(const HttpRequest& request);
  // POST /admin/models/{name}/load and .../unload.
  HttpResponse AdminModelAction(const HttpRequest& request);
  HttpResponse AdminReload(const HttpRequest& request);
  // GET /admin/qos: the live QoS state of every loaded model (admin_qos.cpp).
  HttpResponse AdminQos(const HttpRequest& request);
  // admin_live.cpp: GET /admin/events, /admin/history, /admin/requests, and POST
  // /admin/models/{name}/drain (called by AdminModelAction).
  HttpResponse AdminEvents(const HttpRequest& request);
  HttpResponse AdminHistory(const HttpRequest& request);
  HttpResponse AdminRequests(const HttpRequest& request);
  HttpResponse AdminDrain(const HttpRequest& request, const serving::ModelEntry& entry);
  // Every model's fallback switch: engaged in any of options_.fallback_states.
  std::map<std::string, bool> FallbackStates() const;
  // Publishes an admin_action event (who asked what), when there is an event log.
  void PublishAction(const HttpRequest& request, const std::string& model,
                     const std::string& message, serving::EventLevel level) const;
  // The admin routes' gate (AdminRoutesOptions::admin_key); nullopt when allowed.
  std::optional<HttpResponse> RequireAdmin(const HttpRequest& request) const;
  // GET /ready/{model}: 200 while the model is ready with at least one ready instance.
  HttpResponse ModelReady(const HttpRequest& request);
  // With worker processes: why none of the model's instances is ready; nullopt when one is.
  // Why a ready model starts no work now (memory), if it does not.
  static std::optional<std::string> CannotAdmit(const engine::EngineStats& stats);
  static std::optional<std::string> NoReadyWorker(const serving::ServedModel& model);
  HttpResponse Tokenize(const HttpRequest& request);
  HttpResponse Detokenize(const HttpRequest& request);
  // The 401 response when the request lacks a valid API key, else nullopt.
  std::optional<HttpResponse> RequireKey(const HttpRequest& request) const;
  // The first stall among the models ("model X: engine stalled: ..."), observed now.
  std::optional<std::string> ObserveEngines();

  const AdminRoutesOptions options_;
  serving::ModelRegistry* const registry_;
  const ApiKeys* const keys_;
  const serving::ServingMetrics* const metrics_;
  std::atomic<ServeState> state_{ServeState::kLoading};
  Mutex watchdogs_mutex_;
  // One per loaded model, by id (made when first seen; a reloaded model keeps its watchdog).
  std::map<std::string, std::unique_ptr<EngineWatchdog>> watchdogs_
      PIER_GUARDED_BY(watchdogs_mutex_);
};

// The `route` label for a request path in HTTP metrics: the path for a known route,
// "/v1/models/{id}" for a model lookup, "other" for anything else (keeps the label set
// bounded whatever paths clients send).
std::string_view MetricsRouteLabel(std::string_view path);

}  // namespace pier::api
