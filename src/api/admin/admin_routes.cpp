#include "api/admin/admin_routes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>
#include <vector>

#include "api/admin/admin_guard.h"
#include "api/kserve/tensor_model_json.h"
#include "api/pending_response.h"
#include "api/status_map.h"
#include "common/check.h"
#include "engine/runner/local_model.h"
#include "placement/cpu_list.h"
#include "serving/embedder.h"
#include "serving/tensor_runner.h"
#include "serving/worker_client.h"

namespace pier::api {
namespace {

using Json = nlohmann::ordered_json;

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  // Decoded text may hold bytes that are not UTF-8: replace rather than throw.
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "%2F" -> "/"; a malformed escape is kept as written.
std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]);
      const int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

constexpr std::string_view kModelsPrefix = "/v1/models/";

// The model object of /v1/models and /v1/models/{id}: OpenAI's fields, vLLM's max_model_len
// (when loaded), and Pier's own under "pier" (clients ignore unknown fields).
Json ModelObject(const serving::ModelEntry& entry) {
  const serving::ServedModel* model = entry.model.get();
  Json object{{"id", entry.id},
              {"object", "model"},
              {"created", model != nullptr ? model->created_unix_seconds : 0},
              {"owned_by", "pier"}};
  if (model != nullptr) object["max_model_len"] = model->max_request_tokens;
  Json pier{{"aliases", entry.aliases},
            {"state", serving::ModelStateName(entry.state)},
            {"load", serving::LoadPolicyName(entry.load)}};
  if (!entry.reason.empty()) pier["reason"] = entry.reason;
  if (model != nullptr) {
    pier["kind"] = serving::ModelKindName(model->kind);
    if (model->kind == serving::ModelKind::kEmbed) pier["dimensions"] = model->embedding_dim;
  } else if (entry.kind.has_value()) {
    pier["kind"] = serving::ModelKindName(*entry.kind);  // from its latest load
  }
  object["pier"] = std::move(pier);
  return object;
}

// An embedding model's batcher figures for /metrics.
serving::EmbeddingFigures EmbeddingFiguresOf(const serving::ServedModel& model) {
  const serving::EmbedderStats b = model.embedder->Stats();
  auto buckets = [](const serving::LatencyBuckets& in) {
    return serving::EmbeddingFigures::Buckets{in.bounds, in.counts, in.sum};
  };
  serving::EmbeddingFigures e;
  e.queued_texts = b.queued_texts;
  e.batches = b.batches;
  e.texts = b.texts;
  e.tokens = b.tokens;
  e.expired = b.expired;
  e.predicted_refusals = b.predicted_refusals;
  e.window_seconds = b.window_seconds;
  e.batch_texts = buckets(b.batch_texts);
  e.batch_tokens = buckets(b.batch_tokens);
  e.queue_seconds = buckets(b.queue_seconds);
  e.compute_seconds = buckets(b.compute_seconds);
  return e;
}

// The bytes of every owner on `governor` that belongs to model `id` (named "<id>/...").
Json OwnersOf(const std::string& id, const MemoryGovernor& governor, uint64_t* total) {
  Json owners = Json::array();
  const GovernorStats g = governor.Stats();
  for (const OwnerStats& o : g.owners) {
    if (engine::OwnerModelName(o.name) != id) continue;
    owners.push_back({{"owner", o.name},
                      {"used_bytes", o.allocated_bytes},
                      {"committed_bytes", o.committed_bytes},
                      {"guaranteed_bytes", o.guaranteed_bytes}});
    *total += o.committed_bytes;
  }
  return owners;
}

// A tensor model's side of /admin/models: what it takes and gives (KServe's datatypes and
// shapes, -1 where open), how it batches, its batcher's counters, and what loading it measured.
void AddTensorDetail(const serving::ServedModel& model, Json& pier) {
  const serving::TensorModelInfo& info = model.tensors->info();
  const Json metadata = TensorModelMetadata(model);
  pier["tensor"] = {{"platform", info.platform},
                    {"opset", info.opset},
                    {"producer", info.producer},
                    {"parameter_bytes", info.parameter_bytes},
                    {"max_batch_size", info.max_batch_size},
                    {"preferred_batch_sizes", info.preferred_batch_sizes},
                    {"inputs", metadata["inputs"]},
                    {"outputs", metadata["outputs"]}};
  const serving::TensorRunnerStats s = model.tensors->Stats();
  pier["batcher"] = {{"queued_items", s.queued_items}, {"running_items", s.running_items},
                     {"batches", s.batches},           {"items", s.items},
                     {"requests", s.requests},         {"expired", s.expired},
                     {"cancelled", s.cancelled},       {"window_seconds", s.window_seconds}};
  if (const std::optional<serving::TensorRunnerMemory> m = model.tensors->Memory()) {
    pier["memory"]["measured"] = {{"weights_bytes", m->weights_bytes},
                                  {"workspace_peak_bytes", m->workspace_peak},
                                  {"ort_overhead_bytes", m->overhead_bytes},
                                  {"resident_delta_bytes", m->resident_delta},
                                  {"warmed", m->warmed}};
  }
}

// /admin/models' detail of one model: its state and counters, its configuration, and when
// loaded its engine's queue and KV and the governor owners that belong to it with their bytes.
Json ModelDetail(const serving::ModelEntry& entry, const serving::ModelSpec* spec,
                 const MemoryGovernor* device, const std::map<std::string, bool>& fallbacks) {
  Json detail = ModelObject(entry);
  Json& pier = detail["pier"];
  pier["lifecycle"] = {{"loads", entry.loads},
                       {"load_failures", entry.load_failures},
                       {"unloads", entry.unloads},
                       {"evictions", entry.evictions},
                       {"idle_unloads", entry.idle_unloads},
                       {"last_load_seconds", entry.last_load_seconds}};
  if (spec != nullptr) {
    const serving::ModelLoadOptions& l = spec->load;
    pier["config"] = {
        {"path", l.path},
        {"instances", l.instances},
        {"priority", l.priority},
        {"ctx", l.settings.ctx},
        {"kv_policy", l.settings.kv_policy == engine::KvPolicy::kElastic ? "elastic" : "static"},
        {"kv_min", l.settings.kv_min.ToString()},
        {"kv_max", l.settings.kv_max.is_set() ? l.settings.kv_max.ToString()
                                              : std::to_string(l.settings.ctx) + " tokens"},
        {"max_seqs", l.settings.max_seqs},
        {"max_batched_tokens", l.settings.max_batched_tokens},
        {"prefill_chunk_while_decoding", l.settings.prefill_chunk_while_decoding},
        {"speculative", serving::ModelSettingsToJson(l.settings, /*all=*/true)["speculative"]},
        {"idle_unload_after_seconds", spec->idle_unload_after.count() / 1000.0},
        {"fallback", spec->fallback},
        // Every per-model key's value, as a config file would give it.
        {"settings", serving::ModelSettingsToJson(l.settings, /*all=*/true)}};
    if (!spec->fallback.empty()) {
      // Whether its requests go to the fallback now (the switch engages under load).
      const auto it = fallbacks.find(entry.id);
      pier["fallback_active"] = it != fallbacks.end() && it->second;
    }
  }
  const serving::ServedModel* model = entry.model.get();
  uint64_t total = 0;
  Json owners = Json::array();
  const MemoryGovernor* governor = model != nullptr ? model->governor : device;
  if (governor != nullptr) {
    pier["device"] = governor->Stats().device;
    owners = OwnersOf(entry.id, *governor, &total);
  }
  pier["memory"] = {{"committed_bytes", total}, {"owners", std::move(owners)}};
  if (model == nullptr) return detail;
  if (model->kind == serving::ModelKind::kTensor && model->tensors != nullptr) {
    AddTensorDetail(*model, pier);
  }
  const engine::EngineStats e = model->client->Stats();
  pier["engine"] = {
      {"running", e.running},
      {"waiting", e.waiting},
      {"max_request_tokens", e.max_request_tokens},
      {"kv_block_size", e.kv_block_size},
      {"kv_blocks_used", e.kv_blocks_used},
      {"kv_blocks_total", e.kv_blocks_total},
      {"kv_tokens_used", e.kv_tokens_used},
      {"kv_blocks_max", e.kv_blocks_max},
      {"kv_grows", e.kv_grows},
      {"kv_shrinks", e.kv_shrinks},
      {"preemptions", e.preemptions},
      {"requests_finished", e.requests_finished},
      // Prompt and generated tokens run so far: their rate is the engine's
      // throughput now (the console's tok/s), unlike per-request counters that
      // grow only when a request ends.
      {"steps", e.steps},
      {"tokens_processed",
       static_cast<int64_t>(std::llround(e.tokens_per_step * static_cast<double>(e.steps)))}};
  if (!e.spec_accepted_lengths.empty()) {
    pier["engine"]["speculative"] = {
        {"drafts", e.spec_drafts},
        {"draft_tokens", e.spec_draft_tokens},
        {"accepted_tokens", e.spec_accepted_tokens},
        {"acceptance_rate", e.spec_draft_tokens > 0 ? static_cast<double>(e.spec_accepted_tokens) /
                                                          static_cast<double>(e.spec_draft_tokens)
                                                    : 0.0},
        {"accepted_per_position", e.spec_accepted_per_position},
        {"skipped", e.spec_skipped}};
  }
  Json instances = Json::array();
  for (size_t n = 0; n < model->instances.size(); ++n) {
    const engine::EngineStats i = model->instances[n]->Stats();
    Json instance = {{"running", i.running},
                     {"waiting", i.waiting},
                     {"kv_blocks_used", i.kv_blocks_used},
                     {"requests_finished", i.requests_finished}};
    if (n < model->workers.size()) {
      const serving::WorkerHealth h = model->workers[n]->Health();
      instance["worker"] = {{"state", h.state},
                            {"pid", h.pid},
                            {"restarts", h.restarts},
                            {"last_failure", h.last_failure},
                            {"rss_bytes", h.rss_bytes},
                            {"committed_bytes", h.committed_bytes},
                            {"granted_bytes", h.granted_bytes},
                            {"kv_lent_bytes", h.kv_lent_bytes}};
      const placement::Binding& b = h.binding;
      instance["worker"]["binding"] = {
          {"description", b.Describe()},
          {"cpus", placement::FormatCpuList(b.cpus)},
          {"numa_node", b.numa_node >= 0 ? Json(b.numa_node) : Json(nullptr)},
          {"gpu", b.gpu.empty() ? Json(nullptr) : Json(b.gpu)},
          {"gpu_numa_node", b.gpu_numa_node >= 0 ? Json(b.gpu_numa_node) : Json(nullptr)},
          {"environment", b.environment},
          {"warnings", b.warnings}};
    }
    instances.push_back(std::move(instance));
  }
  pier["instances"] = std::move(instances);
  return detail;
}

// A manager's answer as HTTP.
HttpResponse FromManagerStatus(const Status& status) {
  int http = HttpStatusOf(status);
  // Where the manager's meaning differs from the map's: RESOURCE_EXHAUSTED is memory that
  // cannot hold the load now, the server's state rather than the caller's rate (503, as
  // UNAVAILABLE); a model file that does not load (INVALID_ARGUMENT, UNSUPPORTED) is the
  // configuration's fault, not the request's (500).
  if (status.code() == StatusCode::kResourceExhausted) http = 503;
  if (http == 400) http = 500;
  HttpResponse response = ErrorResponse(http, status.message(), "model",
                                        http == 404   ? "model_not_found"
                                        : http == 503 ? "model_unavailable"
                                                      : "");
  if (http == 503) response.headers.emplace_back("Retry-After", "5");
  return response;
}

}  // namespace

std::optional<std::string> EngineWatchdog::Observe(const engine::EngineStats& stats,
                                                   engine::TimestampUs now_us) {
  MutexLock lock(mutex_);
  if (stats.running + stats.waiting <= 0) {
    busy_since_us_ = 0;
    return std::nullopt;
  }
  if (busy_since_us_ == 0) busy_since_us_ = now_us;
  const engine::TimestampUs reference = std::max(busy_since_us_, stats.last_step_at_us);
  const int64_t silent_us = now_us - reference;
  if (silent_us <= stall_timeout_us_) return std::nullopt;
  return "engine stalled: " + std::to_string(stats.running + stats.waiting) +
         " sequences pending and no step finished for " + std::to_string(silent_us / 1000) +
         " ms (watchdog timeout " + std::to_string(stall_timeout_us_ / 1000) + " ms)";
}

AdminRoutes::AdminRoutes(AdminRoutesOptions options, serving::ModelRegistry* registry,
                         const ApiKeys* keys, const serving::ServingMetrics* metrics)
    : options_(std::move(options)), registry_(registry), keys_(keys), metrics_(metrics) {
  PIER_CHECK(registry_ != nullptr && metrics_ != nullptr,
             "AdminRoutes needs a model registry and metrics");
}

std::optional<std::string> AdminRoutes::ObserveEngines() {
  const std::vector<serving::ModelRef> models = registry_->ReadyModels();
  const size_t known = registry_->Snapshot().size();
  const auto timeout =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.watchdog_timeout);
  std::optional<std::string> first;
  bool any_serving = false;
  MutexLock lock(watchdogs_mutex_);
  for (const serving::ModelRef& model : models) {
    std::unique_ptr<EngineWatchdog>& watchdog = watchdogs_[model->id];
    if (watchdog == nullptr) watchdog = std::make_unique<EngineWatchdog>(timeout);
    std::optional<std::string> stall = watchdog->Observe(model->client->Stats(), engine::NowUs());
    if (!stall.has_value()) stall = NoReadyWorker(*model);
    if (!stall.has_value()) any_serving = true;
    if (stall.has_value() && !first.has_value()) {
      first = known == 1 ? *stall : "model " + model->id + ": " + *stall;
    }
  }
  if (options_.ready_any && any_serving) return std::nullopt;
  if (options_.ready_any && first.has_value() && models.size() > 1) {
    return "no model can serve (" + *first + ", ...)";
  }
  return first;
}

std::optional<std::string> AdminRoutes::CannotAdmit(const engine::EngineStats& stats) {
  // Requests wait for KV memory other models hold and nothing runs: the model takes requests
  // but starts none until memory is given back. A balancer should send work elsewhere.
  if (stats.kv_waiting_for_memory <= 0 || stats.running > 0) return std::nullopt;
  const int64_t waited_ms =
      stats.kv_waiting_since_us > 0 ? (engine::NowUs() - stats.kv_waiting_since_us) / 1000 : 0;
  return std::to_string(stats.kv_waiting_for_memory) +
         " sequences cannot start: the KV cache cannot grow under the memory budget (waiting " +
         std::to_string(waited_ms) + " ms for other models to give memory back)";
}

std::optional<std::string> AdminRoutes::NoReadyWorker(const serving::ServedModel& model) {
  if (model.workers.empty()) return std::nullopt;
  std::string why;
  for (const serving::WorkerClient* worker : model.workers) {
    const serving::WorkerHealth h = worker->Health();
    if (h.state == "ready") return std::nullopt;
    if (why.empty()) why = h.state + (h.last_failure.empty() ? "" : ": " + h.last_failure);
  }
  return "no instance is ready (" + why + ")";
}

HttpResponse AdminRoutes::ModelReady(const HttpRequest& request) {
  const std::string id = request.path.substr(std::string_view("/ready/").size());
  Result<serving::ModelEntry> entry = registry_->Lookup(id);
  if (!entry.ok() || id.empty()) {
    return ErrorResponse(404, "the model '" + id + "' does not exist", "model", "model_not_found");
  }
  std::optional<std::string> reason;
  if (entry->state != serving::ModelState::kReady || entry->model == nullptr) {
    reason = "model " + entry->id + " is " + std::string(serving::ModelStateName(entry->state)) +
             (entry->reason.empty() ? "" : ": " + entry->reason);
  } else {
    reason = NoReadyWorker(*entry->model);
  }
  if (!reason.has_value()) reason = CannotAdmit(entry->model->client->Stats());
  if (!reason.has_value())
    return JsonResponse(200, Json{{"status", "ready"}, {"model", entry->id}});
  return JsonResponse(503,
                      Json{{"status", "not ready"}, {"model", entry->id}, {"reason", *reason}});
}

void AdminRoutes::Register(Router& router) {
  router.Add("GET", "/health", [this](const HttpRequest& r) { return Health(r); });
  router.Add("GET", "/ready", [this](const HttpRequest& r) { return Ready(r); });
  router.AddPrefix("GET", "/ready/", [this](const HttpRequest& r) { return ModelReady(r); });
  router.Add("GET", "/metrics", [this](const HttpRequest& r) { return Metrics(r); });
  router.Add("GET", "/v1/models", [this](const HttpRequest& r) { return ListModels(r); });
  router.Add("GET", "/admin/models", [this](const HttpRequest& r) { return AdminModels(r); });
  router.AddPrefix("GET", "/admin/models/", [this](const HttpRequest& r) { return AdminModel(r); });
  router.AddPrefix("POST", "/admin/models/",
                   [this](const HttpRequest& r) { return AdminModelAction(r); });
  router.Add("POST", "/admin/reload", [this](const HttpRequest& r) { return AdminReload(r); });
  router.Add("GET", "/admin/qos", [this](const HttpRequest& r) { return AdminQos(r); });
  router.Add("GET", "/admin/events", [this](const HttpRequest& r) { return AdminEvents(r); });
  router.Add("GET", "/admin/history", [this](const HttpRequest& r) { return AdminHistory(r); });
  router.Add("GET", "/admin/requests", [this](const HttpRequest& r) { return AdminRequests(r); });
  router.Add("GET", "/admin/pipelines", [this](const HttpRequest& r) {
    if (auto denied = RequireAdmin(r)) return std::move(*denied);
    if (!options_.pipelines) {
      return JsonResponse(200, Json{{"object", "list"}, {"data", Json::array()}});
    }
    return JsonResponse(200, Json::parse(options_.pipelines().dump()));
  });
  router.AddPrefix("GET", std::string(kModelsPrefix),
                   [this](const HttpRequest& r) { return GetModel(r); });
  // The same without /v1, for clients configured with a base URL that lacks it.
  router.Add("GET", "/models", [this](const HttpRequest& r) { return ListModels(r); });
  router.AddPrefix("GET", "/models/", [this](const HttpRequest& r) { return GetModel(r); });
  router.Add("POST", "/tokenize", [this](const HttpRequest& r) { return Tokenize(r); });
  router.Add("POST", "/detokenize", [this](const HttpRequest& r) { return Detokenize(r); });
}

std::optional<std::string> AdminRoutes::Tick() { return ObserveEngines(); }

std::map<std::string, bool> AdminRoutes::FallbackStates() const {
  std::map<std::string, bool> states;
  for (const auto& source : options_.fallback_states) {
    if (!source) continue;
    for (const auto& [model, engaged] : source()) states[model] = states[model] || engaged;
  }
  return states;
}

Readiness AdminRoutes::CheckReady() {
  switch (state_.load()) {
    case ServeState::kLoading:
      return {false, "the model is loading"};
    case ServeState::kShuttingDown:
      return {false, "the server is shutting down"};
    case ServeState::kReady:
      break;
  }
  if (std::optional<std::string> stall = ObserveEngines()) return {false, *stall};
  return {true, ""};
}

std::optional<HttpResponse> AdminRoutes::RequireKey(const HttpRequest& request) const {
  if (keys_ == nullptr || !keys_->enabled()) return std::nullopt;
  auto result = keys_->Authenticate(request);
  if (HttpResponse* denied = std::get_if<HttpResponse>(&result)) return std::move(*denied);
  return std::nullopt;
}

HttpResponse AdminRoutes::Health(const HttpRequest&) {
  return JsonResponse(200, Json{{"status", "ok"}});
}

HttpResponse AdminRoutes::Ready(const HttpRequest&) {
  const Readiness readiness = CheckReady();
  if (readiness.ready) return JsonResponse(200, Json{{"status", "ready"}});
  return JsonResponse(503, Json{{"status", "not ready"}, {"reason", readiness.reason}});
}

namespace {

// 401 unless the request carries "Authorization: Bearer <key>"; `what` names the key.
std::optional<HttpResponse> RequireBearer(const HttpRequest& request, std::string_view key,
                                          std::string_view what) {
  constexpr std::string_view kBearer = "Bearer ";
  const std::optional<std::string_view> auth = request.Header("authorization");
  if (auth.has_value() && auth->starts_with(kBearer) &&
      ConstantTimeEquals(auth->substr(kBearer.size()), key)) {
    return std::nullopt;
  }
  const std::string name(what);
  return ErrorResponse(401,
                       auth.has_value()
                           ? "invalid " + name
                           : "missing " + name + ": send \"Authorization: Bearer <" + name + ">\"",
                       "", auth.has_value() ? "invalid_api_key" : "missing_api_key");
}

}  // namespace

std::optional<HttpResponse> AdminRoutes::RequireAdmin(const HttpRequest& request) const {
  if (auto refused = CheckAdminOrigin(request, options_.admin_key.empty())) return refused;
  if (!options_.admin_key.empty()) return RequireBearer(request, options_.admin_key, "admin key");
  if (FromLoopback(request)) return std::nullopt;
  return ErrorResponse(403,
                       "the admin routes answer only on loopback unless pier serve has "
                       "--admin-key (then send \"Authorization: Bearer <admin key>\")",
                       "", "admin_forbidden");
}

HttpResponse AdminRoutes::Metrics(const HttpRequest& request) {
  if (!options_.metrics_key.empty()) {
    if (auto denied = RequireBearer(request, options_.metrics_key, "metrics key")) {
      return std::move(*denied);
    }
  }
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  const std::vector<serving::ModelEntry> entries = registry_->Snapshot();
  std::vector<serving::ModelFigures> figures;
  std::vector<serving::ModelLifecycle> lifecycle;
  for (const serving::ModelEntry& entry : entries) {
    if (entry.model != nullptr) {
      serving::ModelFigures figure{entry.id, entry.model->client->Stats(), entry.model->governor};
      if (entry.model->embedder != nullptr) figure.embedding = EmbeddingFiguresOf(*entry.model);
      if (entry.model->tensors != nullptr) figure.tensor = entry.model->tensors->Stats();
      for (size_t n = 0; n < entry.model->workers.size(); ++n) {
        const serving::WorkerHealth h = entry.model->workers[n]->Health();
        figure.workers.push_back({.instance = static_cast<int>(n + 1),
                                  .up = h.state == "ready",
                                  .restarts = h.restarts,
                                  .rss_bytes = h.rss_bytes,
                                  .granted_bytes = h.granted_bytes,
                                  .kv_lent_bytes = h.kv_lent_bytes,
                                  .device_bytes = h.device_bytes});
      }
      figures.push_back(std::move(figure));
    }
    lifecycle.push_back({.model = entry.id,
                         .state = serving::ModelStateName(entry.state),
                         .loads = entry.loads,
                         .load_failures = entry.load_failures,
                         .unloads_requested = entry.unloads - entry.evictions - entry.idle_unloads,
                         .unloads_evicted = entry.evictions,
                         .unloads_idle = entry.idle_unloads});
  }
  response.body = metrics_->Render(figures, lifecycle, options_.device_governor);
  if (options_.gpu_telemetry != nullptr) {
    // A GPU's governor is named "cuda:N": its waiting allocations weigh that GPU's pressure.
    std::map<unsigned, uint64_t> waiting;
    const std::vector<const MemoryGovernor*> governors =
        options_.device_governors ? options_.device_governors()
                                  : std::vector<const MemoryGovernor*>{options_.device_governor};
    for (const MemoryGovernor* g : governors) {
      if (g == nullptr) continue;
      const GovernorStats stats = g->Stats();
      if (stats.device.starts_with("cuda:")) {
        waiting[static_cast<unsigned>(std::atoi(stats.device.c_str() + 5))] =
            stats.waiting_allocations;
      }
    }
    metrics::RenderGpuMetrics(options_.gpu_telemetry->Snapshot(), waiting, &response.body);
  }
  if (options_.pipeline_metrics) response.body += options_.pipeline_metrics();
  return response;
}

HttpResponse AdminRoutes::ListModels(const HttpRequest& request) {
  if (auto denied = RequireKey(request)) return std::move(*denied);
  Json data = Json::array();
  for (const serving::ModelEntry& entry : registry_->Snapshot()) data.push_back(ModelObject(entry));
  Json list{{"object", "list"}, {"data", std::move(data)}};
  return JsonResponse(200, list);
}

HttpResponse AdminRoutes::AdminModels(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  Json data = Json::array();
  uint64_t committed = 0;
  const MemoryGovernor* device = options_.device_governor;
  const std::map<std::string, bool> fallbacks = FallbackStates();
  for (const serving::ModelEntry& entry : registry_->Snapshot()) {
    std::shared_ptr<const serving::ModelSpec> spec =
        options_.manager != nullptr ? options_.manager->SpecOf(entry.id) : nullptr;
    data.push_back(ModelDetail(entry, spec.get(), device, fallbacks));
    committed += data.back()["pier"]["memory"]["committed_bytes"].get<uint64_t>();
    if (device == nullptr && entry.model != nullptr) device = entry.model->governor;
  }
  Json body{{"object", "list"}, {"data", std::move(data)}};
  // The device's own figure beside the models' sum: they agree when every byte has an owner
  // named after its model.
  if (device != nullptr) {
    const GovernorStats g = device->Stats();
    body["device"] = {{"name", g.device},
                      {"budget_bytes", g.budget_bytes},
                      {"committed_bytes", g.committed_bytes},
                      {"models_committed_bytes", committed}};
  }
  // Every device with its budget: the GPUs too (a GPU served by worker processes shows what
  // their grants hold of it).
  Json devices = Json::array();
  const std::vector<const MemoryGovernor*> governors =
      options_.device_governors ? options_.device_governors()
                                : std::vector<const MemoryGovernor*>{options_.device_governor};
  for (const MemoryGovernor* governor : governors) {
    if (governor == nullptr) continue;
    devices.push_back(DeviceDetail(*governor, options_.gpu_telemetry));
  }
  body["devices"] = std::move(devices);
  return JsonResponse(200, body);
}

HttpResponse AdminRoutes::AdminModel(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  constexpr std::string_view kPrefix = "/admin/models/";
  const std::string_view rest = std::string_view(request.path).substr(kPrefix.size());
  // /admin/models/{name}/load and /unload are POST routes: a GET there is the wrong method,
  // not a model called "{name}/load".
  if (rest.ends_with("/load") || rest.ends_with("/unload") || rest.ends_with("/drain")) {
    HttpResponse response = ErrorResponse(405, "method " + request.method + " is not allowed on " +
                                                   request.path + " (allowed: POST)");
    response.headers.emplace_back("Allow", "POST");
    return response;
  }
  const std::string name = PercentDecode(rest);
  Result<serving::ModelEntry> entry =
      name.empty() ? Result<serving::ModelEntry>(NotFoundError("")) : registry_->Lookup(name);
  if (!entry.ok()) {
    return ErrorResponse(
        404,
        "the model '" + name + "' does not exist (this server knows " + registry_->KnownIds() + ")",
        "model", "model_not_found");
  }
  std::shared_ptr<const serving::ModelSpec> spec =
      options_.manager != nullptr ? options_.manager->SpecOf(entry->id) : nullptr;
  return JsonResponse(200,
                      ModelDetail(*entry, spec.get(), options_.device_governor, FallbackStates()));
}

HttpResponse AdminRoutes::AdminModelAction(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  constexpr std::string_view kPrefix = "/admin/models/";
  const std::string_view rest = std::string_view(request.path).substr(kPrefix.size());
  const size_t slash = rest.rfind('/');
  const std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (slash == std::string_view::npos || slash == 0 ||
      (action != "load" && action != "unload" && action != "drain")) {
    return ErrorResponse(404, "unknown admin route " + std::string(request.path) +
                                  " (POST /admin/models/{name}/load, /unload or /drain)");
  }
  const std::string name = PercentDecode(rest.substr(0, slash));
  if (options_.manager == nullptr) {
    return ErrorResponse(501, "this server cannot load or unload models");
  }
  Result<serving::ModelEntry> entry = registry_->Lookup(name);
  if (!entry.ok()) {
    return ErrorResponse(
        404,
        "the model '" + name + "' does not exist (this server knows " + registry_->KnownIds() + ")",
        "model", "model_not_found");
  }
  if (action == "drain") return AdminDrain(request, *entry);
  PublishAction(request, entry->id, std::string(action) + " of " + entry->id + " asked",
                serving::EventLevel::kInfo);
  auto pending = std::make_shared<PendingResponse>();
  serving::ModelRegistry* registry = registry_;
  serving::EventLog* events = options_.events;
  auto done = [pending, registry, events, id = entry->id,
               what = std::string(action)](Status status) {
    if (events != nullptr) {
      events->Publish(
          "admin_action", status.ok() ? serving::EventLevel::kInfo : serving::EventLevel::kWarning,
          id, what + " of " + id + (status.ok() ? " done" : " failed: " + status.message()));
    }
    if (!status.ok()) {
      pending->Resolve(FromManagerStatus(status));
      return;
    }
    Result<serving::ModelEntry> now = registry->Lookup(id);
    Json body = now.ok() ? ModelObject(*now) : Json{{"id", id}};
    pending->Resolve(JsonResponse(200, body));
  };
  if (action == "load") {
    options_.manager->Load(entry->id, std::move(done));
  } else {
    options_.manager->Unload(entry->id, std::move(done));
  }
  HttpResponse response;
  response.deferred = pending;
  return response;
}

HttpResponse AdminRoutes::AdminReload(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  if (options_.manager == nullptr || !options_.read_config) {
    return ErrorResponse(501, "this server has no configuration file to reload");
  }
  Result<std::vector<serving::ModelSpec>> specs = options_.read_config();
  if (!specs.ok()) {
    return ErrorResponse(400, "reload refused, nothing changed: " + specs.status().message());
  }
  PublishAction(request, "", "configuration reload asked", serving::EventLevel::kInfo);
  auto pending = std::make_shared<PendingResponse>();
  serving::EventLog* events = options_.events;
  options_.manager->Reload(std::move(specs).value(), [pending, events](
                                                         Result<serving::ReloadReport> report) {
    if (!report.ok()) {
      if (events != nullptr) {
        events->Publish("config_reloaded", serving::EventLevel::kError, "",
                        "configuration reload failed: " + report.status().message());
      }
      pending->Resolve(FromManagerStatus(report.status()));
      return;
    }
    Json failed = Json::array();
    for (const auto& [id, why] : report->failed) {
      failed.push_back({{"id", id}, {"reason", why}});
    }
    Json body{{"added", report->added},
              {"removed", report->removed},
              {"reloaded", report->reloaded},
              {"unchanged", report->unchanged},
              {"failed", std::move(failed)}};
    if (events != nullptr) {
      events->Publish(
          "config_reloaded",
          report->failed.empty() ? serving::EventLevel::kInfo : serving::EventLevel::kWarning, "",
          "configuration reloaded: " + std::to_string(report->added.size()) + " added, " +
              std::to_string(report->removed.size()) + " removed, " +
              std::to_string(report->reloaded.size()) + " reloaded, " +
              std::to_string(report->failed.size()) + " failed",
          nlohmann::json::parse(body.dump()));
    }
    pending->Resolve(JsonResponse(200, body));
  });
  HttpResponse response;
  response.deferred = pending;
  return response;
}

HttpResponse AdminRoutes::GetModel(const HttpRequest& request) {
  if (auto denied = RequireKey(request)) return std::move(*denied);
  const std::string_view path = request.path;
  const size_t prefix =
      path.starts_with(kModelsPrefix) ? kModelsPrefix.size() : std::string_view("/models/").size();
  const std::string id = PercentDecode(path.substr(prefix));
  Result<serving::ModelEntry> entry =
      id.empty() ? Result<serving::ModelEntry>(NotFoundError("")) : registry_->Lookup(id);
  if (!entry.ok()) {
    return ErrorResponse(
        404,
        "the model '" + id + "' does not exist (this server serves " + registry_->KnownIds() + ")",
        "model", "model_not_found");
  }
  return JsonResponse(200, ModelObject(*entry));
}

std::string_view MetricsRouteLabel(std::string_view path) {
  static constexpr std::array<std::string_view, 22> kRoutes = {"/health",
                                                               "/ready",
                                                               "/metrics",
                                                               "/v1/models",
                                                               "/v1/chat/completions",
                                                               "/v1/completions",
                                                               "/v1/responses",
                                                               "/v1/embeddings",
                                                               "/tokenize",
                                                               "/detokenize",
                                                               "/admin/models",
                                                               "/admin/reload",
                                                               "/admin/qos",
                                                               "/v2",
                                                               "/v2/health/live",
                                                               "/v2/health/ready",
                                                               "/embeddings",
                                                               "/v1/classify",
                                                               "/admin/events",
                                                               "/admin/history",
                                                               "/admin/requests",
                                                               "/ui"};
  for (std::string_view route : kRoutes) {
    if (path == route) return route;
  }
  if (path.starts_with("/ready/")) return "/ready/{model}";
  if (path.starts_with("/v2/models/")) {
    if (path.ends_with("/infer")) return "/v2/models/{model}/infer";
    if (path.ends_with("/ready")) return "/v2/models/{model}/ready";
    return "/v2/models/{model}";
  }
  if (path.starts_with(kModelsPrefix)) return "/v1/models/{id}";
  if (path.starts_with("/ui/")) return "/ui/{file}";
  if (path.starts_with("/admin/models/")) {
    if (path.ends_with("/load")) return "/admin/models/{name}/load";
    if (path.ends_with("/unload")) return "/admin/models/{name}/unload";
    if (path.ends_with("/drain")) return "/admin/models/{name}/drain";
    return "/admin/models/{name}";
  }
  return "other";
}

}  // namespace pier::api
