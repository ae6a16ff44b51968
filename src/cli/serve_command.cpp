// `pier serve [-m MODEL] [--name NAME] [--host 127.0.0.1] [--port 8080] [--threads N]
//             [--http-threads N] [--api-keys FILE] [--metrics-key KEY] [--max-queued N]
//             [--memory-budget B] [--device-memory B] [--ctx N] [--max-batched-tokens N]
//             [--max-seqs N] [--max-body-bytes N] [--shutdown-grace SECONDS]
//             [--watchdog-seconds SECONDS] [--config FILE]`:
// serves one model, or the models: list of --config, over HTTP: the OpenAI-compatible API
// (OpenAiApi), /health, /ready, /metrics, /v1/models, /tokenize, /detokenize and the admin
// routes (AdminRoutes; /admin/models, load, unload, reload through the ModelManager).
//
// Startup, in order: SIGTERM and SIGINT are blocked (before any thread starts, so every
// thread inherits the mask and only this command's main thread receives them, through
// sigtimedwait); the options are resolved (serve_config.h: defaults < --config file < flags);
// the API keys file is read; the device set is created (one governor per device), every model
// is declared in the ModelRegistry and the on_start ones are loaded by the ModelManager, one
// at a time (serving/model_loader.h: KV up to --ctx positions for all requests together, each
// request at most the model's context); then the routes and the HTTP server start, and one line
// goes to stdout, exactly:
//   pier serve: listening on http://HOST:PORT (model ID)
// and then one `pier serve: try: curl ...` line, a request to copy and paste (for the default
// model's kind: a chat, an embedding, or a tensor model's metadata).
// (with --port 0 it shows the port the system chose). A bad setting, an unreadable keys file,
// a model that does not load or fit its budget, or an address that cannot be bound print the
// reason to stderr and exit 1 before anything listens. Logs go to stderr.
//
// Shutdown: on SIGTERM or SIGINT, /ready turns 503, the server stops accepting, in-flight
// requests may finish for --shutdown-grace seconds, the rest are cancelled (their engine
// requests aborted), the manager stops (drains in progress end), the engines stop, and the
// exit status is 0. A second signal during the
// grace period exits at once with status 1.
//
// Threads: --threads compute threads (the engine's pool, default: every core) and
// --http-threads I/O threads (default 1); this main thread only waits for signals and feeds
// /ready's watchdog once a second.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/admin/admin_routes.h"
#include "api/auth/api_keys.h"
#include "api/console/console_routes.h"
#include "api/kserve/classify_api.h"
#include "api/kserve/kserve_api.h"
#include "api/openai/embeddings_api.h"
#include "api/openai/openai_api.h"
#include "api/pipelines/pipeline_api.h"
#include "cli/commands.h"
#include "cli/serve_config.h"
#include "common/check.h"
#include "grpc/kserve_grpc_server.h"
#include "http/server.h"
#include "metrics/gpu_telemetry.h"
#include "serving/device_set.h"
#include "serving/live/event_log.h"
#include "serving/live/event_watcher.h"
#include "serving/live/memory_history.h"
#include "serving/live/request_board.h"
#include "serving/model_host.h"
#include "serving/model_loader.h"
#include "serving/model_manager.h"
#include "serving/model_registry.h"
#include "serving/pipeline_set.h"
#include "serving/serving_metrics.h"
#include "tensor_models/onnx/ort_library.h"

namespace pier::cli {
namespace {

struct SettingHelp {
  std::string_view name;
  std::string_view type;  // shown in --help: "--port PORT"
  std::string_view help;
};

// One entry per server setting of ServeSettingNames() (checked at registration); the
// per-model keys' lines are in their table (serving/model_settings.h).
constexpr SettingHelp kSettingHelp[] = {
    {"model", "FILE", "GGUF model file (default: the default model)"},
    {"name", "ID", "Model id clients use (default: the file name without .gguf)"},
    {"host", "ADDRESS", "Address to listen on (default 127.0.0.1)"},
    {"port", "PORT", "Port to listen on; 0 picks a free one (default 8080)"},
    {"grpc_port", "PORT",
     "Serve the KServe v2 gRPC API (GRPCInferenceService) on this port too; 0 picks a free one "
     "(default -1: off)"},
    {"http_threads", "N", "HTTP I/O threads (default 1)"},
    {"api_keys", "FILE",
     "YAML file of API keys (key, tenant, max_priority); without it the API is open"},
    {"metrics_key", "KEY", "Require \"Authorization: Bearer KEY\" on /metrics (default: open)"},
    {"admin_key", "KEY",
     "Require \"Authorization: Bearer KEY\" on /admin/* (default: loopback clients only)"},
    {"onnxruntime_library", "PATH",
     "ONNX Runtime's library (libonnxruntime.so.1, 1.21 or later) for tensor models (default: "
     "the one scripts/bootstrap fetched, then beside the binary, then the system's)"},
    {"memory_budget", "BYTES|PCT",
     "Memory budget: 512MiB, 2GB or a percentage of the device (80%)"},
    {"device_memory", "BYTES", "CPU device capacity, e.g. 4GiB (default: available memory)"},
    {"device", "DEVICE",
     "Where models run unless they name their own: cpu (default), cuda:N (GPU N in PCI bus "
     "order), a GPU's UUID, or with --workers on a MIG instance's (MIG-...)"},
    {"workers", "on|off",
     "on: each model instance runs in its own worker process, restarted when it crashes or "
     "hangs; --kv-policy applies as in one process (elastic KV is lent between workers "
     "through the supervisor) (default off: every model in this process)"},
    {"worker_heartbeat_timeout", "SECONDS",
     "A worker process silent this long is killed and restarted (default 5)"},
    {"worker_leak_margin", "BYTES",
     "A worker resident this much above its memory grant is leaking: drained and restarted "
     "(default 256MiB; 0: off)"},
    {"topology", "FILE",
     "Place worker instances (cpus/numa_node/gpu: auto) on the machine this hwloc XML file "
     "describes (lstopo --of xml) instead of this one, to check a config for another machine"},
    {"memory_reserve", "BYTES",
     "Part of the budget never handed to models, e.g. 256MiB (headroom for the process and "
     "the OS; default 0)"},
    {"class_max_queue_ms", "CLASS=MS,...",
     "The longest each priority class may wait in a queue before it is refused with 429, e.g. "
     "normal=10000,low=30000 (0 or left out: no limit)"},
    {"class_deadline_action", "CLASS=reject|delay,...",
     "What happens to a request still waiting at its class's max queue time: reject (429, the "
     "default) or delay (it waits on behind every request within its time)"},
    {"class_ttft_ms", "CLASS=MS,...",
     "Each class's time-to-first-token target, for pier_qos_slo_attainment_ratio"},
    {"class_tpot_ms", "CLASS=MS,...",
     "Each class's time-per-output-token target, for pier_qos_slo_attainment_ratio"},
    {"max_body_bytes", "BYTES", "Largest request body; larger gets 413 (default 4MiB)"},
    {"shutdown_grace", "SECONDS",
     "Seconds in-flight requests may finish after SIGTERM (default 10)"},
    {"stream_backlog", "EVENTS",
     "A stream whose client falls this many events behind is aborted (default 4096)"},
    {"write_timeout", "SECONDS",
     "A stream whose client does not take one write within this time is aborted (default 30)"},
    {"default_max_tokens", "TOKENS",
     "max_tokens of a request that gives none (default 2048; never above --max-tokens-limit "
     "or the context)"},
    {"max_tokens_limit", "TOKENS",
     "Largest max_tokens a request may ask for; more gets 400 (default 0: the context)"},
    {"cors_origins", "ORIGINS",
     "Comma-separated origins allowed by CORS (http://localhost:3000), or * (default: off)"},
    {"ready_policy", "all|any",
     "all: /ready is 200 only while every loaded model can serve (a ready instance, an engine "
     "that is not stalled); any: while at least one can (default all)"},
    {"gpu_telemetry", "on|off",
     "Read GPU utilisation, memory, temperature, power, clocks, ECC and XID errors through NVML "
     "for /metrics and the workers' health (default on; without NVML it says so once)"},
    {"gpu_telemetry_min_period", "SECONDS",
     "GPU sampling period when the GPUs are idle (default 1)"},
    {"gpu_telemetry_max_period", "SECONDS",
     "GPU sampling period at full load: sampling backs off as SM utilisation rises (default 10)"},
    {"watchdog_seconds", "SECONDS",
     "/ready turns 503 when the engine has work and no step ends for this long (default 30)"},
    {"load_wait", "SECONDS",
     "A request for an on_demand model that is not loaded waits this long for its load "
     "(default 60; 0: 503 at once)"},
    {"unload_grace", "SECONDS",
     "Requests in flight on a model being unloaded may finish for this long, then are aborted "
     "(default 30)"},
};

int Fail(const Status& status) {
  std::fprintf(stderr, "pier serve: %s\n", status.ToString().c_str());
  return 1;
}

// A 429 or 503 answer as a request_refused event, with the reason its body gives.
void PublishRefusal(const api::HttpRequest& request, const api::HttpResponse& response,
                    serving::EventLog* events) {
  std::string reason;
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].value("message", nlohmann::json()).is_string()) {
    reason = body["error"]["message"].get<std::string>();
  }
  events->Publish("request_refused", serving::EventLevel::kWarning, response.model,
                  std::to_string(response.status) + " on " + request.path +
                      (reason.empty() ? "" : ": " + reason),
                  {{"status", response.status}, {"route", api::MetricsRouteLabel(request.path)}});
}

std::string HostForUrl(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Waits up to `timeout` for a blocked signal of `signals`; 0 when none came.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec wait{};
  wait.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  wait.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1'000'000);
  const int signal = ::sigtimedwait(&signals, nullptr, &wait);
  return signal > 0 ? signal : 0;
}

// The models to serve: the models: list, or the one model of -m / model / name; each with the
// server-wide engine settings and then its own.
// NVML's view of a worker process for its supervisor (serving/device_health.h).
class NvmlDeviceHealth final : public serving::DeviceHealthProbe {
 public:
  explicit NvmlDeviceHealth(std::shared_ptr<const metrics::GpuTelemetry> telemetry)
      : telemetry_(std::move(telemetry)) {}
  std::optional<uint64_t> DeviceMemoryOf(int64_t pid) const override {
    return telemetry_->ProcessDeviceMemory(pid);
  }
  uint64_t ErrorsOn(const std::string& gpu) const override {
    return telemetry_->DeviceFatalXids(gpu);
  }

 private:
  std::shared_ptr<const metrics::GpuTelemetry> telemetry_;
};

Result<std::vector<serving::ModelSpec>> ModelSpecsOf(
    const ServeOptions& options,
    std::shared_ptr<const serving::DeviceHealthProbe> device_health = nullptr) {
  std::vector<ModelConfig> repository = options.models;
  if (repository.empty()) {
    ModelConfig single;
    single.path = options.model.empty() ? DefaultModelPath() : options.model;
    single.name = options.name;
    repository.push_back(std::move(single));
  }
  std::vector<serving::ModelSpec> specs;
  for (const ModelConfig& model : repository) {
    serving::ModelSpec spec;
    serving::ModelLoadOptions& load = spec.load;
    load.settings = options.model_defaults;  // the server-wide values, then the model's own
    for (const auto& [name, value] : model.settings.items()) {
      PIER_RETURN_IF_ERROR(
          serving::ApplyModelSetting(&load.settings, name, value, model.source + ": " + name));
    }
    load.path = model.path;
    load.id = model.name.empty() ? serving::ModelIdFromPath(model.path) : model.name;
    load.aliases = model.aliases;
    load.chat_template_path = model.chat_template;
    load.labels = model.labels;
    load.priority = model.priority;
    load.device = model.device.empty() ? options.device : model.device;
    load.device_from_server = model.device.empty();
    load.instances = model.instances;
    load.workers = options.workers;
    load.worker_leak_margin_bytes = options.worker_leak_margin;
    load.device_health = device_health;
    load.heartbeat_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(options.worker_heartbeat_timeout_seconds * 1000));
    load.bindings = model.bindings;
    if (!load.bindings.empty() && !load.workers) {
      return InvalidArgumentError(model.source +
                                  ": cpus, numa_node, gpu and the MPS limits bind worker "
                                  "processes: they need workers: on");
    }
    spec.policy = model.on_demand ? serving::LoadPolicy::kOnDemand : serving::LoadPolicy::kOnStart;
    spec.idle_unload_after =
        std::chrono::milliseconds(static_cast<int64_t>(model.idle_unload_after_seconds * 1000.0));
    spec.fallback = model.fallback;
    spec.fallback_when = model.fallback_when;
    specs.push_back(std::move(spec));
  }
  return specs;
}

// Every binding checked against the topology the instances are placed on (CPUs outside the
// allowed set, nodes or GPUs that do not exist), before anything loads.
Status CheckBindings(const std::vector<serving::ModelSpec>& specs, serving::DeviceSet& devices) {
  const bool any = std::any_of(specs.begin(), specs.end(),
                               [](const auto& spec) { return !spec.load.bindings.empty(); });
  if (!any) return Status::Ok();
  PIER_ASSIGN_OR_RETURN(placement::Placer * placer, devices.placer());
  for (const serving::ModelSpec& spec : specs) {
    for (size_t i = 0; i < spec.load.bindings.size(); ++i) {
      std::string who = "model " + spec.load.id;
      if (spec.load.bindings.size() > 1) who += " instance " + std::to_string(i + 1);
      PIER_RETURN_IF_ERROR(placer->Check(spec.load.bindings[i], who));
    }
  }
  return Status::Ok();
}

int RunServe(const ServeOptions& options, const std::map<std::string, std::string>& flags) {
  // Before any thread starts: every thread inherits the mask, so SIGTERM/SIGINT stay pending
  // until the wait loop below takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (int rc = ::pthread_sigmask(SIG_BLOCK, &signals, nullptr); rc != 0) {
    return Fail(InternalError(std::string("cannot block SIGTERM/SIGINT: ") + std::strerror(rc)));
  }
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a signal
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "pier", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));

  if (!options.onnxruntime_library.empty()) {
    if (Status set = tensor_models::SetOrtLibraryPath(options.onnxruntime_library); !set.ok()) {
      return Fail(set);
    }
  }
  api::ApiKeys keys;
  if (!options.api_keys.empty()) {
    Result<api::ApiKeys> loaded = api::ApiKeys::Load(options.api_keys);
    if (!loaded.ok()) return Fail(loaded.status());
    keys = std::move(loaded).value();
  }
  const api::ApiKeys* keys_or_null = keys.enabled() ? &keys : nullptr;

  // GPU telemetry first: the workers' supervisors read it from their first heartbeat.
  std::shared_ptr<metrics::GpuTelemetry> gpu_telemetry;
  std::shared_ptr<const serving::DeviceHealthProbe> device_health;
  if (options.gpu_telemetry) {
    metrics::GpuTelemetryOptions telemetry_options;
    telemetry_options.min_period = std::chrono::milliseconds(
        static_cast<int64_t>(options.gpu_telemetry_min_period_seconds * 1000));
    telemetry_options.max_period = std::chrono::milliseconds(
        static_cast<int64_t>(options.gpu_telemetry_max_period_seconds * 1000));
    gpu_telemetry = std::make_shared<metrics::GpuTelemetry>(telemetry_options);
    if (gpu_telemetry->available()) {
      device_health = std::make_shared<NvmlDeviceHealth>(gpu_telemetry);
    } else {
      gpu_telemetry.reset();
    }
  }

  // The model repository: the models: list, or the one model of -m / model / name.
  Result<std::vector<serving::ModelSpec>> specs = ModelSpecsOf(options, device_health);
  if (!specs.ok()) return Fail(specs.status());

  // One device set for the process: every model on a device shares its governor.
  serving::DeviceSetOptions device_options;
  device_options.cpu_budget = options.memory_budget;
  device_options.cpu_capacity = options.device_memory;
  device_options.cpu_reserve_bytes = options.memory_reserve;
  device_options.topology_xml = options.topology;
  // The swap pool holds every model instance's swap space.
  for (const serving::ModelSpec& spec : *specs) {
    device_options.swap_space_bytes +=
        spec.load.settings.swap_space * static_cast<uint64_t>(spec.load.instances);
  }
  Result<std::unique_ptr<serving::DeviceSet>> created = serving::DeviceSet::Create(device_options);
  if (!created.ok()) return Fail(created.status());
  std::unique_ptr<serving::DeviceSet> devices = std::move(created).value();
  if (Status checked = CheckBindings(*specs, *devices); !checked.ok()) return Fail(checked);
  const bool any_binding = std::any_of(specs->begin(), specs->end(),
                                       [](const auto& s) { return !s.load.bindings.empty(); });
  if (any_binding || !options.topology.empty()) {
    Result<placement::Placer*> placer = devices->placer();
    if (!placer.ok()) return Fail(placer.status());
    spdlog::info("placing worker instances on {}: {}", (*placer)->topology().source,
                 (*placer)->topology().Summary());
  }

  const std::string model_id = specs->front().load.id;
  serving::ServingMetrics metrics(model_id);
  auto registry = std::make_unique<serving::ModelRegistry>();
  serving::ModelManagerOptions manager_options;
  manager_options.drain_grace =
      std::chrono::milliseconds(static_cast<int64_t>(options.unload_grace_seconds * 1000));
  manager_options.on_loaded = [&metrics](const std::string& id, double seconds) {
    metrics.RecordModelLoad(id, seconds);
  };
  auto manager =
      std::make_unique<serving::ModelManager>(manager_options, devices.get(), registry.get());
  // The on_start models load one at a time (loads that run together would mis-measure each
  // other's memory), before anything listens.
  if (Status started = manager->Start(std::move(specs).value()); !started.ok()) {
    // With a models: list, say which entry of the file did not load.
    for (const ModelConfig& model : options.models) {
      Result<serving::ModelEntry> entry = registry->Lookup(model.name);
      if (entry.ok() && entry->load_failures > 0) return Fail(started.WithContext(model.source));
    }
    return Fail(started);
  }

  // Pipelines are built over the models now loaded (each step's ports checked against its
  // model), before anything listens.
  std::unique_ptr<serving::PipelineSet> pipeline_set;
  if (!options.pipelines.empty()) {
    Result<std::unique_ptr<serving::PipelineSet>> made = serving::PipelineSet::Create(
        options.pipelines, registry.get(), &devices->cpu_governor(),
        [manager = manager.get()](const std::string& id) {
          std::shared_ptr<const serving::ModelSpec> spec = manager->SpecOf(id);
          return spec == nullptr ? std::string() : spec->load.path;
        });
    if (!made.ok()) return Fail(made.status());
    pipeline_set = std::move(made).value();
    for (const auto& p : pipeline_set->All()) {
      spdlog::info("pipeline {}: {} steps", p->spec().name, p->spec().steps.size());
    }
  }
  // The web console's live state: events, the memory history, the requests in flight.
  serving::EventLog events;
  serving::MemoryHistory history;
  serving::RequestBoard board;
  // Tensor models' fallbacks: one switch per model for KServe infer and /v1/classify.
  serving::FallbackSwitch tensor_fallbacks;
  api::PipelineApi pipeline_api({.class_max_queue = options.class_max_queue, .board = &board},
                                pipeline_set.get(), keys_or_null);

  api::OpenAiApiOptions api_options;
  api_options.default_max_tokens = static_cast<int32_t>(options.default_max_tokens);
  api_options.max_tokens_limit = static_cast<int32_t>(options.max_tokens_limit);
  api_options.class_max_queue = options.class_max_queue;
  api_options.class_slo = options.class_slo;
  api_options.fallback_of =
      [manager = manager.get()](const std::string& id) -> std::optional<serving::FallbackRoute> {
    std::shared_ptr<const serving::ModelSpec> spec = manager->SpecOf(id);
    if (spec == nullptr || spec->fallback.empty()) return std::nullopt;
    return serving::FallbackRoute{.model = spec->fallback, .when = spec->fallback_when};
  };
  api_options.load_wait =
      std::chrono::milliseconds(static_cast<int64_t>(options.load_wait_seconds * 1000));
  api_options.board = &board;
  api::OpenAiApi api(api_options, registry.get(), keys_or_null, &metrics);
  api::EmbeddingsApi embeddings({.load_wait = api_options.load_wait,
                                 .class_max_queue = options.class_max_queue,
                                 .board = &board},
                                registry.get(), keys_or_null, &metrics);

  api::AdminRoutesOptions admin_options;
  admin_options.watchdog_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.watchdog_seconds * 1000));
  admin_options.ready_any = options.ready_any;
  admin_options.metrics_key = options.metrics_key;
  admin_options.admin_key = options.admin_key;
  admin_options.load_wait = api_options.load_wait;
  admin_options.class_max_queue = options.class_max_queue;
  admin_options.class_slo = options.class_slo;
  admin_options.qos = options.model_defaults.qos;
  admin_options.qos_stop_steps = options.model_defaults.qos_stop_steps;
  admin_options.qos_reserve = options.model_defaults.qos_reserve;
  admin_options.device_governor = &devices->cpu_governor();
  admin_options.device_governors = [set = devices.get()] {
    const std::vector<MemoryGovernor*> all = set->Governors();
    return std::vector<const MemoryGovernor*>(all.begin(), all.end());
  };
  admin_options.gpu_telemetry = gpu_telemetry.get();
  admin_options.manager = manager.get();
  if (flags.count("config") > 0) {
    // POST /admin/reload: the file as it is now, with the same flags on top.
    serving::DeviceSet* device_set = devices.get();
    admin_options.read_config = [flags, device_set,
                                 device_health]() -> Result<std::vector<serving::ModelSpec>> {
      PIER_ASSIGN_OR_RETURN(ServeOptions now, ResolveServeOptions(flags));
      // A file that names no model (emptied, or caught half-written) is refused: applied, it
      // would unload every model for the default one, which only a server started without
      // a model serves.
      if (now.models.empty() && now.model.empty()) {
        return InvalidArgumentError(flags.at("config") +
                                    " names no model (no models: list and no model:)");
      }
      PIER_ASSIGN_OR_RETURN(std::vector<serving::ModelSpec> specs,
                            ModelSpecsOf(now, device_health));
      PIER_RETURN_IF_ERROR(CheckBindings(specs, *device_set));
      return specs;
    };
  }
  admin_options.pipelines = [&pipeline_api] { return pipeline_api.AdminList(); };
  admin_options.pipeline_metrics = [&pipeline_api] { return pipeline_api.MetricsText(); };
  admin_options.fallback_states = {[&api] { return api.FallbackStates(); },
                                   [&tensor_fallbacks] { return tensor_fallbacks.Snapshot(); }};
  admin_options.events = &events;
  admin_options.history = &history;
  admin_options.requests = &board;
  api::AdminRoutes admin(admin_options, registry.get(), keys_or_null, &metrics);

  auto router = std::make_shared<api::Router>();
  api::KServeApiOptions kserve_options;
  kserve_options.ready = [&admin](std::string* reason) {
    const api::Readiness readiness = admin.CheckReady();
    *reason = readiness.reason;
    return readiness.ready;
  };
  // generate / generate_stream run as /v1/completions requests (the router outlives the API).
  api::Router* completions_router = router.get();
  kserve_options.completions = [completions_router](const api::HttpRequest& request) {
    return completions_router->Dispatch(request);
  };
  kserve_options.class_max_queue = options.class_max_queue;
  kserve_options.load_wait = api_options.load_wait;
  kserve_options.max_body_bytes =
      static_cast<int64_t>(std::min<uint64_t>(options.max_body_bytes, INT64_MAX));
  kserve_options.fallback_of = api_options.fallback_of;
  kserve_options.fallback_switch = &tensor_fallbacks;
  kserve_options.metrics = &metrics;
  kserve_options.board = &board;
  kserve_options.pipeline_route = [&pipeline_api](
                                      const api::HttpRequest& http, const std::string& name,
                                      const std::string& action, const api::Principal& principal) {
    return pipeline_api.KServeRoute(http, name, action, principal);
  };
  api::ClassifyApiOptions classify_options;
  classify_options.class_max_queue = options.class_max_queue;
  classify_options.load_wait = api_options.load_wait;
  classify_options.board = &board;
  classify_options.fallback = {api_options.fallback_of, &tensor_fallbacks, registry.get(),
                               &metrics};
  api::ClassifyApi classify(std::move(classify_options), registry.get(), keys_or_null);
  api::KServeApi kserve(std::move(kserve_options), registry.get(), keys_or_null);
  api.Register(*router);
  embeddings.Register(*router);
  kserve.Register(*router);
  classify.Register(*router);
  pipeline_api.Register(*router);
  admin.Register(*router);
  const char* ui_dir = std::getenv("PIER_UI_DIR");  // the console's files, for editing them
  const api::ConsoleRoutes console(
      {.admin_key_set = !options.admin_key.empty(), .files_dir = ui_dir != nullptr ? ui_dir : ""});
  console.Register(*router);

  http::HttpServerOptions server_options;
  server_options.host = options.host;
  server_options.port = options.port;
  server_options.io_threads = options.http_threads;
  server_options.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  server_options.max_stream_backlog = static_cast<size_t>(options.stream_backlog);
  server_options.write_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.write_timeout_seconds * 1000.0));
  server_options.paths_served_while_draining = {"/health", "/ready", "/metrics"};
  server_options.cors_origins = options.cors_origins;
  server_options.on_response = [&metrics](const api::HttpRequest& request, int status,
                                          std::string_view model) {
    metrics.RecordHttpResponse(status, api::MetricsRouteLabel(request.path), model);
  };
  server_options.on_refusal = [&events](const api::HttpRequest& request,
                                        const api::HttpResponse& response) {
    PublishRefusal(request, response, &events);
  };
  serving::EventWatcher watcher(
      {.governors = admin_options.device_governors, .fallbacks = admin_options.fallback_states},
      registry.get(), &events, &history);
  watcher.Tick();  // learns the state after startup: the models already loaded are not news
  events.Publish("server_started", serving::EventLevel::kInfo, "", "pier serve started");
  Result<std::unique_ptr<http::HttpServer>> started =
      http::HttpServer::Start(server_options, std::move(router));
  if (!started.ok()) return Fail(started.status());
  std::unique_ptr<http::HttpServer> server = std::move(started).value();
  std::unique_ptr<grpc_api::KServeGrpcServer> grpc_server;
  if (options.grpc_port >= 0) {
    grpc_api::KServeGrpcOptions grpc_options;
    grpc_options.host = options.host;
    grpc_options.port = options.grpc_port;
    grpc_options.class_max_queue = options.class_max_queue;
    grpc_options.fallback = {api_options.fallback_of, &tensor_fallbacks, registry.get(), &metrics};
    grpc_options.pipelines = &pipeline_api;
    grpc_options.board = &board;
    // The HTTP body cap bounds a gRPC message too: one size for one request, either way.
    grpc_options.max_message_bytes =
        static_cast<int64_t>(std::min<uint64_t>(options.max_body_bytes, INT64_MAX));
    grpc_options.ready = [&admin](std::string* reason) {
      const api::Readiness readiness = admin.CheckReady();
      *reason = readiness.reason;
      return readiness.ready;
    };
    grpc_server =
        std::make_unique<grpc_api::KServeGrpcServer>(grpc_options, registry.get(), keys_or_null);
    if (Status grpc_started = grpc_server->Start(); !grpc_started.ok()) {
      return Fail(grpc_started);
    }
  }
  admin.SetState(api::ServeState::kReady);
  const std::string url_host = HostForUrl(options.host);
  const unsigned port = static_cast<unsigned>(server->port());
  std::string served;
  size_t known = 0;
  for (const serving::ModelEntry& m : registry->Snapshot()) {  // holds no model past this loop
    ++known;
    served += (served.empty() ? "" : ", ") + m.id;
    if (m.state != serving::ModelState::kReady)
      served += " (" + std::string(ModelStateName(m.state)) + ")";
  }
  if (grpc_server != nullptr) {
    std::printf("pier serve: KServe v2 gRPC on %s:%d\n", url_host.c_str(), grpc_server->port());
  }
  std::printf("pier serve: listening on http://%s:%u (model%s %s)\n", url_host.c_str(), port,
              known > 1 ? "s" : "", served.c_str());
  // One copy-paste request for whoever just ran `make serve` (a wildcard host is reached
  // through loopback; an API key, when keys are on, is the operator's to add).
  const std::string try_host =
      (options.host == "0.0.0.0" || options.host == "::") ? "127.0.0.1" : url_host;
  const std::string auth = options.api_keys.empty() ? "" : " -H 'Authorization: Bearer YOUR_KEY'";
  serving::ModelKind default_kind = serving::ModelKind::kGenerate;
  if (Result<serving::ModelRef> first = registry->Resolve(model_id); first.ok()) {
    default_kind = (*first)->kind;
  }
  if (default_kind == serving::ModelKind::kTensor) {
    // A tensor model's inputs are its own: its metadata says what to send to /infer.
    std::printf("pier serve: try: curl http://%s:%u/v2/models/%s%s\n", try_host.c_str(), port,
                model_id.c_str(), auth.c_str());
  } else if (default_kind == serving::ModelKind::kEmbed) {
    std::printf(
        "pier serve: try: curl http://%s:%u/v1/embeddings%s"
        " -H 'Content-Type: application/json' -d '{\"model\": \"%s\", \"input\": \"Say "
        "hello.\"}'\n",
        try_host.c_str(), port, auth.c_str(), model_id.c_str());
  } else {
    std::printf(
        "pier serve: try: curl http://%s:%u/v1/chat/completions%s"
        " -H 'Content-Type: application/json' -d '{\"model\": \"%s\", \"messages\":"
        " [{\"role\": \"user\", \"content\": \"Say hello.\"}], \"max_tokens\": 32}'\n",
        try_host.c_str(), port, auth.c_str(), model_id.c_str());
  }
  std::fflush(stdout);

  // Wait for a signal, feeding the watchdog every second (and logging its verdict changes).
  int signal = 0;
  bool stalled = false;
  auto next_admin_tick = std::chrono::steady_clock::now();
  while (signal == 0) {
    // The event watcher every 250 ms (events reach the console within a quarter second), the
    // watchdog every second.
    signal = WaitForSignal(signals, std::chrono::milliseconds(250));
    watcher.Tick();
    if (std::chrono::steady_clock::now() < next_admin_tick) continue;
    next_admin_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    const std::optional<std::string> stall = admin.Tick();
    if (stall.has_value() != stalled) {
      stalled = stall.has_value();
      if (stalled) {
        spdlog::error("pier serve: {}; /ready answers 503", *stall);
      } else {
        spdlog::info("pier serve: the engine is stepping again; /ready answers 200");
      }
    }
  }
  const auto grace =
      std::chrono::milliseconds(static_cast<int64_t>(options.shutdown_grace_seconds * 1000));
  spdlog::info("pier serve: {} received: shutting down (in-flight requests have {} s)",
               ::strsignal(signal), options.shutdown_grace_seconds);
  admin.SetState(api::ServeState::kShuttingDown);

  // Shutdown joins the I/O threads; this thread keeps watching for a second signal.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    if (grpc_server != nullptr) {
      grpc_server->Shutdown(static_cast<double>(grace.count()) / 1000.0);
    }
    server->Shutdown(grace);
    stopped.store(true);
  });
  while (!stopped.load()) {
    if (int again = WaitForSignal(signals, std::chrono::milliseconds(50)); again != 0) {
      std::fprintf(stderr, "pier serve: second %s: exiting without waiting\n", ::strsignal(again));
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  stopper.join();
  grpc_server.reset();
  server.reset();
  pipeline_set.reset();  // its requests end before the models they use
  manager->Stop();       // no more loads or unloads; drains in progress end
  manager.reset();
  registry.reset();  // each engine ends whatever is left (abort) before its model goes
  devices.reset();   // the governors last, once nothing is charged to them
  spdlog::info("pier serve: stopped");
  return 0;
}

void RegisterServe(CLI::App& app, int& exit_code) {
  CLI::App* command = app.add_subcommand(
      "serve", "Serve a model over HTTP (OpenAI-compatible API, health, metrics)");
  // Every setting is taken as text and parsed by serve_config (one parser for flags and file).
  auto values = std::make_shared<std::map<std::string, std::string>>();
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  std::vector<SettingHelp> settings(std::begin(kSettingHelp), std::end(kSettingHelp));
  for (const serving::ModelSettingKey& key : serving::ModelSettingKeys()) {
    settings.push_back({key.name, key.type, key.help});
  }
  PIER_CHECK(settings.size() == ServeSettingNames().size(),
             "every serve setting needs a help line");
  for (const SettingHelp& setting : settings) {
    const std::string name(setting.name);
    PIER_CHECK(std::find(ServeSettingNames().begin(), ServeSettingNames().end(), name) !=
                   ServeSettingNames().end(),
               "help for an unknown serve setting");
    std::string flags = FlagName(name);
    if (name == "model") flags = "-m," + flags;
    // A per-model key says so: a models: entry may set its own value.
    const std::string help = std::string(setting.help) +
                             (serving::FindModelSettingKey(name) != nullptr ? " [per model]" : "");
    CLI::Option* option =
        command->add_option(flags, (*values)[name], help)->type_name(std::string(setting.type));
    given->emplace_back(name, option);
  }
  CLI::Option* config = command
                            ->add_option("--config", (*values)["config"],
                                         "YAML file setting any of the above (same names with "
                                         "underscores, e.g. \"port: 8081\"); "
                                         "flags on the command line win")
                            ->type_name("FILE");
  given->emplace_back("config", config);
  command->callback([values, given, &exit_code] {
    std::map<std::string, std::string> flags;
    for (const auto& [name, option] : *given) {
      if (option->count() > 0) flags[name] = (*values)[name];
    }
    Result<ServeOptions> options = ResolveServeOptions(flags);
    exit_code = options.ok() ? RunServe(*options, flags) : Fail(options.status());
  });
}

}  // namespace

PIER_REGISTER_COMMAND(serve, RegisterServe);

}  // namespace pier::cli
