#include "cli/serve_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/setting_text.h"
#include "common/yaml.h"
#include "device/device_name.h"
#include "pipelines/pipeline_spec.h"
#include "serving/request_policy.h"

namespace pier::cli {
namespace {

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

Result<int64_t> ParseInteger(std::string_view value, std::string_view source, int64_t min,
                             int64_t max) {
  return ParseIntegerSetting(value, source, min, max);
}

Result<double> ParseSeconds(std::string_view value, std::string_view source, double min) {
  return ParseSecondsSetting(value, source, min);
}

Result<std::string> NonEmpty(std::string_view value, std::string_view source) {
  if (value.empty()) return InvalidArgumentError(std::string(source) + ": must not be empty");
  return std::string(value);
}

constexpr int64_t kMaxTokens = int64_t{1} << 24;

// An origin as browsers send it (RFC 6454): scheme "://" host [":" port], nothing after;
// scheme http or https, host of letters, digits, '-', '.', or a bracketed IPv6 address.
bool IsOrigin(std::string_view origin) {
  size_t rest = 0;
  if (origin.starts_with("http://")) {
    rest = 7;
  } else if (origin.starts_with("https://")) {
    rest = 8;
  } else {
    return false;
  }
  std::string_view host = origin.substr(rest);
  if (host.empty()) return false;
  if (host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : host.substr(1, close - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
    host.remove_prefix(close + 1);
  } else {
    size_t n = 0;
    while (n < host.size() && (std::isalnum(static_cast<unsigned char>(host[n])) ||
                               host[n] == '-' || host[n] == '.')) {
      ++n;
    }
    if (n == 0) return false;
    host.remove_prefix(n);
  }
  if (host.empty()) return true;
  if (host.front() != ':' || host.size() < 2 || host.size() > 6) return false;
  for (char c : host.substr(1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "https://a.example, http://localhost:3000" or "*".
Result<std::vector<std::string>> ParseCorsOrigins(std::string_view value, std::string_view source) {
  std::vector<std::string> origins;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string_view::npos) end = value.size();
    std::string_view item = value.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    if (item != "*" && !IsOrigin(item)) {
      return InvalidArgumentError(
          std::string(source) + ": " + Quote(item) +
          " is not an origin (scheme://host[:port], e.g. http://localhost:3000, or *)");
    }
    origins.emplace_back(item);
    start = end + 1;
  }
  if (origins.size() > 1 && std::find(origins.begin(), origins.end(), "*") != origins.end()) {
    return InvalidArgumentError(std::string(source) + ": * allows every origin; list no others");
  }
  return origins;
}

}  // namespace

const std::vector<std::string_view>& ServeSettingNames() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names = {
        "model",
        "name",
        "host",
        "port",
        "grpc_port",
        "http_threads",
        "api_keys",
        "metrics_key",
        "admin_key",
        "onnxruntime_library",
        "memory_budget",
        "memory_reserve",
        "workers",
        "worker_heartbeat_timeout",
        "worker_leak_margin",
        "topology",
        "device_memory",
        "device",
        "class_max_queue_ms",
        "class_deadline_action",
        "class_ttft_ms",
        "class_tpot_ms",
        "max_body_bytes",
        "shutdown_grace",
        "watchdog_seconds",
        "gpu_telemetry",
        "gpu_telemetry_min_period",
        "gpu_telemetry_max_period",
        "ready_policy",
        "load_wait",
        "unload_grace",
        "stream_backlog",
        "write_timeout",
        "default_max_tokens",
        "max_tokens_limit",
        "cors_origins",
    };
    for (const serving::ModelSettingKey& key : serving::ModelSettingKeys()) {
      names.push_back(key.name);
    }
    return names;
  }();
  return kNames;
}

std::string FlagName(std::string_view setting) {
  std::string flag = "--";
  for (char c : setting) flag.push_back(c == '_' ? '-' : c);
  return flag;
}

namespace {

Result<bool> ParseOnOff(std::string_view value, std::string_view source) {
  return ParseOnOffSetting(value, source);
}

}  // namespace

Status CheckDeviceName(std::string_view value, std::string_view at) {
  if (IsDeviceName(value)) return Status::Ok();
  return InvalidArgumentError(std::string(at) + ": \"" + std::string(value) +
                              "\" is not a device (cpu, cuda:N for GPU N, a GPU's UUID, or a "
                              "MIG instance's with workers: on)");
}

Status ApplyServeSetting(ServeOptions* o, std::string_view name, std::string_view value,
                         std::string_view source) {
  if (serving::FindModelSettingKey(name) != nullptr) {
    return serving::ApplyModelSetting(&o->model_defaults, name, nlohmann::json(value), source);
  }
  if (name == "model") {
    PIER_ASSIGN_OR_RETURN(o->model, NonEmpty(value, source));
  } else if (name == "name") {
    PIER_ASSIGN_OR_RETURN(o->name, NonEmpty(value, source));
    if (!IsValidModelName(o->name)) {
      return InvalidArgumentError(std::string(source) + ": " + Quote(value) +
                                  " may use only letters, digits and . _ : - (at most 128)");
    }
  } else if (name == "host") {
    PIER_ASSIGN_OR_RETURN(o->host, NonEmpty(value, source));
  } else if (name == "port") {
    PIER_ASSIGN_OR_RETURN(int64_t port, ParseInteger(value, source, 0, 65535));
    o->port = static_cast<uint16_t>(port);
  } else if (name == "grpc_port") {
    PIER_ASSIGN_OR_RETURN(int64_t port, ParseInteger(value, source, -1, 65535));
    o->grpc_port = static_cast<int>(port);
  } else if (name == "http_threads") {
    PIER_ASSIGN_OR_RETURN(int64_t n, ParseInteger(value, source, 1, 64));
    o->http_threads = static_cast<int>(n);
  } else if (name == "api_keys") {
    PIER_ASSIGN_OR_RETURN(o->api_keys, NonEmpty(value, source));
  } else if (name == "metrics_key") {
    PIER_ASSIGN_OR_RETURN(o->metrics_key, NonEmpty(value, source));
  } else if (name == "admin_key") {
    PIER_ASSIGN_OR_RETURN(o->admin_key, NonEmpty(value, source));
  } else if (name == "onnxruntime_library") {
    PIER_ASSIGN_OR_RETURN(o->onnxruntime_library, NonEmpty(value, source));
  } else if (name == "memory_budget") {
    PIER_ASSIGN_OR_RETURN(o->memory_budget, ParseBudget(value, source));
  } else if (name == "workers") {
    PIER_ASSIGN_OR_RETURN(o->workers, ParseOnOff(value, source));
  } else if (name == "worker_heartbeat_timeout") {
    PIER_ASSIGN_OR_RETURN(o->worker_heartbeat_timeout_seconds, ParseSeconds(value, source, 0.05));
  } else if (name == "worker_leak_margin") {
    if (value == "0") {
      o->worker_leak_margin = 0;
    } else {
      PIER_ASSIGN_OR_RETURN(o->worker_leak_margin, ParseByteSize(value, source));
    }
  } else if (name == "topology") {
    PIER_ASSIGN_OR_RETURN(o->topology, NonEmpty(value, source));
  } else if (name == "memory_reserve") {
    if (value == "0") {
      o->memory_reserve = 0;
    } else {
      PIER_ASSIGN_OR_RETURN(o->memory_reserve, ParseByteSize(value, source));
    }
  } else if (name == "device_memory") {
    PIER_ASSIGN_OR_RETURN(o->device_memory, ParseByteSize(value, source));
  } else if (name == "device") {
    PIER_RETURN_IF_ERROR(CheckDeviceName(value, source));
    o->device = std::string(value);
  } else if (name == "class_max_queue_ms") {
    Result<serving::ClassQueueLimits> limits = serving::ParseClassQueueLimits(value);
    if (!limits.ok()) {
      return InvalidArgumentError(std::string(source) + ": " + limits.status().message());
    }
    o->class_max_queue.max_queue_ms = limits->max_queue_ms;
  } else if (name == "class_deadline_action") {
    if (Status parsed = serving::ParseClassDeadlineActions(value, &o->class_max_queue);
        !parsed.ok()) {
      return InvalidArgumentError(std::string(source) + ": " + parsed.message());
    }
  } else if (name == "class_ttft_ms" || name == "class_tpot_ms") {
    Result<std::array<int64_t, 4>> ms = serving::ParseClassMilliseconds(name, value);
    if (!ms.ok()) return InvalidArgumentError(std::string(source) + ": " + ms.status().message());
    (name == "class_ttft_ms" ? o->class_slo.ttft_ms : o->class_slo.tpot_ms) = *ms;
  } else if (name == "max_body_bytes") {
    PIER_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(value, source));
    if (bytes < 1) return InvalidArgumentError(std::string(source) + ": must be at least 1 byte");
    o->max_body_bytes = bytes;
  } else if (name == "shutdown_grace") {
    PIER_ASSIGN_OR_RETURN(o->shutdown_grace_seconds, ParseSeconds(value, source, 0));
  } else if (name == "ready_policy") {
    if (value != "all" && value != "any") {
      return InvalidArgumentError(std::string(source) + ": expected all or any, got \"" +
                                  std::string(value) + "\"");
    }
    o->ready_any = value == "any";
  } else if (name == "gpu_telemetry") {
    PIER_ASSIGN_OR_RETURN(o->gpu_telemetry, ParseOnOff(value, source));
  } else if (name == "gpu_telemetry_min_period") {
    PIER_ASSIGN_OR_RETURN(o->gpu_telemetry_min_period_seconds, ParseSeconds(value, source, 0.01));
  } else if (name == "gpu_telemetry_max_period") {
    PIER_ASSIGN_OR_RETURN(o->gpu_telemetry_max_period_seconds, ParseSeconds(value, source, 0.01));
  } else if (name == "watchdog_seconds") {
    PIER_ASSIGN_OR_RETURN(o->watchdog_seconds, ParseSeconds(value, source, 0.001));
  } else if (name == "load_wait") {
    PIER_ASSIGN_OR_RETURN(o->load_wait_seconds, ParseSeconds(value, source, 0));
  } else if (name == "unload_grace") {
    PIER_ASSIGN_OR_RETURN(o->unload_grace_seconds, ParseSeconds(value, source, 0));
  } else if (name == "stream_backlog") {
    PIER_ASSIGN_OR_RETURN(o->stream_backlog, ParseInteger(value, source, 1, 1 << 24));
  } else if (name == "write_timeout") {
    PIER_ASSIGN_OR_RETURN(o->write_timeout_seconds, ParseSeconds(value, source, 0.001));
  } else if (name == "default_max_tokens") {
    PIER_ASSIGN_OR_RETURN(o->default_max_tokens, ParseInteger(value, source, 1, kMaxTokens));
  } else if (name == "max_tokens_limit") {
    PIER_ASSIGN_OR_RETURN(o->max_tokens_limit, ParseInteger(value, source, 0, kMaxTokens));
  } else if (name == "cors_origins") {
    PIER_ASSIGN_OR_RETURN(o->cors_origins, ParseCorsOrigins(value, source));
  } else {
    return InvalidArgumentError(std::string(source) + ": unknown setting " + Quote(name));
  }
  return Status::Ok();
}

Status ApplyServeSettingValue(ServeOptions* o, std::string_view name, const nlohmann::json& value,
                              std::string_view source) {
  if (serving::FindModelSettingKey(name) != nullptr) {
    return serving::ApplyModelSetting(&o->model_defaults, name, value, source);
  }
  if (value.is_null()) return InvalidArgumentError(std::string(source) + " has no value");
  if (!value.is_string()) {
    return InvalidArgumentError(std::string(source) + " must be a single value");
  }
  return ApplyServeSetting(o, name, value.get_ref<const std::string&>(), source);
}

Result<std::vector<std::pair<std::string, nlohmann::json>>> ParseServeConfig(
    std::string_view yaml_text, std::string_view source_name) {
  const std::string source(source_name);
  PIER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, source));
  std::vector<std::pair<std::string, nlohmann::json>> settings;
  if (root.IsNull()) return settings;
  if (!root.IsMap()) {
    return InvalidArgumentError(source + ": expected a map of settings (e.g. \"port: 8081\")");
  }
  const std::vector<std::string_view>& known = ServeSettingNames();
  std::string unknown;
  for (const auto& item : root) {
    const std::string name = item.first.Scalar();
    if (name == "models") continue;     // the model list: ParseModelRepository
    if (name == "pipelines") continue;  // pipelines::ParsePipelines
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      unknown += (unknown.empty() ? "" : ", ") + Quote(name);
      continue;
    }
    if (item.second.IsNull()) return InvalidArgumentError(source + ": " + name + " has no value");
    settings.emplace_back(name, YamlToJson(item.second));
  }
  if (!unknown.empty()) {
    std::string names;
    for (std::string_view n : known) names += (names.empty() ? "" : ", ") + std::string(n);
    return InvalidArgumentError(source + ": unknown settings " + unknown + " (known: " + names +
                                ", models, pipelines)");
  }
  return settings;
}

Result<ServeOptions> ResolveServeOptions(const std::map<std::string, std::string>& flags) {
  ServeOptions options;
  bool default_from_file = false;
  if (auto config = flags.find("config"); config != flags.end()) {
    const std::string& path = config->second;
    if (path.empty()) return InvalidArgumentError("--config: must not be empty");
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFoundError("cannot read the configuration file " + path);
    std::ostringstream text;
    text << in.rdbuf();
    PIER_ASSIGN_OR_RETURN(auto settings, ParseServeConfig(text.str(), path));
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    PIER_ASSIGN_OR_RETURN(options.models, ParseModelRepository(text.str(), path, folder.string()));
    PIER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text.str(), path));
    if (root.IsMap()) {
      PIER_ASSIGN_OR_RETURN(options.pipelines,
                            pipelines::ParsePipelines(root["pipelines"], path, folder.string()));
    }
    for (auto& [name, value] : settings) {
      if (!options.models.empty() && (name == "model" || name == "name")) {
        return InvalidArgumentError(path + ": " + name +
                                    " describes the one model of a file without a models: list; "
                                    "give each model's path and name in the list instead");
      }
      if ((name == "model" || name == "api_keys") && value.is_string() &&
          !value.get_ref<const std::string&>().empty() &&
          std::filesystem::path(value.get<std::string>()).is_relative() && !folder.empty()) {
        value = (folder / value.get<std::string>()).string();
      }
      PIER_RETURN_IF_ERROR(ApplyServeSettingValue(&options, name, value, path + ": " + name));
      if (name == "default_max_tokens") default_from_file = true;
    }
  }
  for (const auto& [name, value] : flags) {
    if (name == "config") continue;
    if (!options.models.empty() && (name == "model" || name == "name")) {
      return InvalidArgumentError(FlagName(name) + " cannot be combined with the models: list of " +
                                  flags.at("config"));
    }
    PIER_RETURN_IF_ERROR(ApplyServeSetting(&options, name, value, FlagName(name)));
  }
  if (options.gpu_telemetry_min_period_seconds > options.gpu_telemetry_max_period_seconds) {
    return InvalidArgumentError(fmt::format(
        "gpu_telemetry_min_period ({} s) is above gpu_telemetry_max_period ({} s)",
        options.gpu_telemetry_min_period_seconds, options.gpu_telemetry_max_period_seconds));
  }
  if (options.max_tokens_limit > 0 && options.default_max_tokens > options.max_tokens_limit) {
    // Only an explicit default is an error: the built-in one follows the limit down.
    const bool default_given = flags.count("default_max_tokens") > 0 || default_from_file;
    if (default_given) {
      return InvalidArgumentError(
          "default_max_tokens (" + std::to_string(options.default_max_tokens) +
          ") is above max_tokens_limit (" + std::to_string(options.max_tokens_limit) + ")");
    }
    options.default_max_tokens = options.max_tokens_limit;
  }
  return options;
}

}  // namespace pier::cli
