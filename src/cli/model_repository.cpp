#include "cli/model_repository.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <optional>

#include "cli/serve_config.h"
#include "common/yaml.h"
#include "memory/byte_size.h"
#include "placement/cpu_list.h"
#include "serving/model_settings.h"

namespace pier::cli {
namespace {

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string Join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

bool IsValidModelName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

namespace {

Result<int> SmallInteger(std::string_view value, const std::string& where, int min, int max) {
  int parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || parsed < min || parsed > max) {
    return InvalidArgumentError(where + ": expected an integer in [" + std::to_string(min) + ", " +
                                std::to_string(max) + "], got " + Quote(value));
  }
  return parsed;
}

Result<std::string> Scalar(const YAML::Node& node, const std::string& where) {
  if (node.IsNull()) return InvalidArgumentError(where + " has no value");
  if (!node.IsScalar()) return InvalidArgumentError(where + " must be a single value");
  return node.Scalar();
}

// A binding key's values: one for every instance, or one per instance (a list). A flat list
// of numbers under `cpus` is one CPU list.
Result<std::vector<std::string>> BindingValues(const YAML::Node& node, const std::string& key,
                                               const std::string& at) {
  const auto cpu_list_text = [&](const YAML::Node& list) -> Result<std::string> {
    std::string text;
    for (const YAML::Node& cpu : list) {
      PIER_ASSIGN_OR_RETURN(std::string c, Scalar(cpu, at));
      text += (text.empty() ? "" : ",") + c;
    }
    return text;
  };
  if (!node.IsSequence()) {
    PIER_ASSIGN_OR_RETURN(std::string value, Scalar(node, at));
    return std::vector<std::string>{value};
  }
  if (node.size() == 0) return InvalidArgumentError(at + ": the list is empty");
  const bool flat_numbers =
      key == "cpus" && std::all_of(node.begin(), node.end(), [](auto n) {
        return n.IsScalar() && !n.Scalar().empty() &&
               n.Scalar().find_first_not_of("0123456789") == std::string::npos;
      });
  if (flat_numbers) {
    PIER_ASSIGN_OR_RETURN(std::string text, cpu_list_text(node));
    return std::vector<std::string>{text};
  }
  std::vector<std::string> values;
  for (const YAML::Node& item : node) {
    if (key == "cpus" && item.IsSequence()) {
      PIER_ASSIGN_OR_RETURN(std::string text, cpu_list_text(item));
      values.push_back(std::move(text));
    } else {
      PIER_ASSIGN_OR_RETURN(std::string value, Scalar(item, at));
      values.push_back(std::move(value));
    }
  }
  return values;
}

// The per-instance bindings from the binding keys' values (each one value, or one per
// instance); empty when no key binds anything.
Result<std::vector<placement::BindingRequest>> BuildBindings(
    const std::map<std::string, std::vector<std::string>>& values, int instances,
    int mps_thread_percentage, uint64_t mps_memory_limit, const std::string& source) {
  using Choice = placement::BindingRequest::Choice;
  size_t count = 1;
  for (const auto& [key, list] : values) {
    if (list.size() > 1 && list.size() != static_cast<size_t>(instances)) {
      return InvalidArgumentError(source + ": " + key + ": " + std::to_string(list.size()) +
                                  " values for " + std::to_string(instances) +
                                  " instances (give one for all, or one per instance)");
    }
    count = std::max(count, list.size());
  }
  if (values.empty() && mps_thread_percentage == 0 && mps_memory_limit == 0) {
    return std::vector<placement::BindingRequest>{};
  }
  std::vector<placement::BindingRequest> bindings(count);
  for (size_t i = 0; i < count; ++i) {
    placement::BindingRequest& b = bindings[i];
    b.mps_thread_percentage = mps_thread_percentage;
    b.mps_memory_limit_bytes = mps_memory_limit;
    for (const auto& [key, list] : values) {
      const std::string& value = list.size() == 1 ? list.front() : list[i];
      const std::string at = source + ": " + key;
      if (key == "cpus") {
        if (value == "auto") {
          b.cpus = Choice::kAuto;
        } else {
          Result<std::vector<int>> cpus = placement::ParseCpuList(value);
          if (!cpus.ok()) return cpus.status().WithContext(at);
          b.cpus = Choice::kGiven;
          b.cpu_list = std::move(cpus).value();
        }
      } else if (key == "numa_node") {
        if (value == "auto") {
          b.numa = Choice::kAuto;
        } else {
          Result<int> node = SmallInteger(value, at + " (a node or auto)", 0, 1023);
          if (!node.ok()) return node.status();
          b.numa = Choice::kGiven;
          b.numa_node = *node;
        }
      } else if (key == "gpu") {
        b.gpu = value;
      }
    }
  }
  return bindings;
}

Result<ModelConfig> ParseEntry(const YAML::Node& entry, const std::string& where,
                               const std::filesystem::path& folder) {
  if (!entry.IsMap()) {
    return InvalidArgumentError(where + ": expected a map (name, path, ...), got " +
                                (entry.IsScalar() ? Quote(entry.Scalar()) : "a list"));
  }
  ModelConfig model;
  // The entry's name, for messages about its other keys.
  if (const YAML::Node name = entry["name"]; name && name.IsScalar()) model.name = name.Scalar();
  model.source = where + (model.name.empty() ? "" : " (" + model.name + ")");
  const std::vector<std::string_view>& known = ModelSettingNames();
  std::string unknown;
  for (const auto& item : entry) {
    const std::string key = item.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      unknown += (unknown.empty() ? "" : ", ") + Quote(key);
    }
  }
  if (!unknown.empty()) {
    return InvalidArgumentError(model.source + ": unknown keys " + unknown +
                                " (known: " + Join(known) + ")");
  }
  std::map<std::string, std::vector<std::string>> binding_values;  // cpus, numa_node, gpu
  std::optional<double> release;                                   // fallback_release, when given
  int mps_thread_percentage = 0;
  uint64_t mps_memory_limit = 0;
  for (const auto& item : entry) {
    const std::string key = item.first.Scalar();
    const std::string at = model.source + ": " + key;
    if (key == "cpus" || key == "numa_node" || key == "gpu") {
      PIER_ASSIGN_OR_RETURN(binding_values[key], BindingValues(item.second, key, at));
      continue;
    }
    if (serving::FindModelSettingKey(key) != nullptr) {
      // A per-model setting: checked now with its own parser, applied over the server's
      // values when the model's spec is built.
      nlohmann::json value = YamlToJson(item.second);
      serving::ModelSettings scratch;
      PIER_RETURN_IF_ERROR(serving::ApplyModelSetting(&scratch, key, value, at));
      model.settings[key] = std::move(value);
      continue;
    }
    if (key == "aliases") {
      if (item.second.IsSequence()) {
        for (const YAML::Node& alias : item.second) {
          PIER_ASSIGN_OR_RETURN(std::string a, Scalar(alias, at));
          model.aliases.push_back(std::move(a));
        }
      } else {
        PIER_ASSIGN_OR_RETURN(std::string a, Scalar(item.second, at));
        model.aliases.push_back(std::move(a));
      }
      continue;
    }
    PIER_ASSIGN_OR_RETURN(std::string value, Scalar(item.second, at));
    if (key == "name") {
      model.name = value;
    } else if (key == "path") {
      model.path = value;
      if (!model.path.empty() && std::filesystem::path(model.path).is_relative() &&
          !folder.empty()) {
        model.path = (folder / model.path).string();
      }
    } else if (key == "fallback") {
      model.fallback = value;
    } else if (key == "fallback_load" || key == "fallback_release") {
      double share = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), share);
      if (ec != std::errc() || end != value.data() + value.size() || !(share >= 0) || share > 100) {
        return InvalidArgumentError(at +
                                    ": expected a load 0..100 ((running + waiting) / "
                                    "max_seqs), got " +
                                    Quote(value));
      }
      if (key == "fallback_load") {
        model.fallback_when.load_above = share;
      } else {
        release = share;
      }
    } else if (key == "fallback_queue_ms") {
      int64_t ms = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (ec != std::errc() || end != value.data() + value.size() || ms < 0 || ms > 3'600'000) {
        return InvalidArgumentError(at + ": expected 0..3600000 milliseconds, got " + Quote(value));
      }
      model.fallback_when.queue_ms_above = ms;
    } else if (key == "fallback_max_class") {
      Result<engine::Priority> cls = engine::ParsePriority(value);
      if (!cls.ok()) return InvalidArgumentError(at + ": " + cls.status().message());
      model.fallback_when.max_class = *cls;
    } else if (key == "labels") {
      model.labels = value;
      if (!value.empty() && !value.starts_with("metadata") &&
          std::filesystem::path(value).is_relative() && !folder.empty()) {
        model.labels = (folder / value).string();
      }
    } else if (key == "chat_template") {
      model.chat_template = value;
      if (!value.empty() && std::filesystem::path(value).is_relative() && !folder.empty()) {
        model.chat_template = (folder / value).string();
      }
    } else if (key == "priority") {
      PIER_ASSIGN_OR_RETURN(model.priority, SmallInteger(value, at, -100, 100));
    } else if (key == "instances") {
      PIER_ASSIGN_OR_RETURN(model.instances, SmallInteger(value, at, 1, 16));
    } else if (key == "mps_thread_percentage") {
      PIER_ASSIGN_OR_RETURN(mps_thread_percentage, SmallInteger(value, at, 1, 100));
    } else if (key == "mps_memory_limit") {
      PIER_ASSIGN_OR_RETURN(mps_memory_limit, ParseByteSize(value, at));
      if (mps_memory_limit < (uint64_t{1} << 20)) {
        return InvalidArgumentError(at + ": at least 1MiB, got " + Quote(value));
      }
    } else if (key == "load") {
      if (value != "on_start" && value != "on_demand") {
        return InvalidArgumentError(at + ": expected on_start or on_demand, got " + Quote(value));
      }
      model.on_demand = value == "on_demand";
    } else if (key == "idle_unload_after") {
      double seconds = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc() || end != value.data() + value.size() || !(seconds >= 0) ||
          seconds > 1e9) {
        return InvalidArgumentError(at + ": expected seconds (0 or more), got " + Quote(value));
      }
      model.idle_unload_after_seconds = seconds;
    } else if (key == "device") {
      // Whether that GPU is usable is known when the model loads.
      PIER_RETURN_IF_ERROR(CheckDeviceName(value, at));
      model.device = value;
    }
  }
  PIER_ASSIGN_OR_RETURN(model.bindings,
                        BuildBindings(binding_values, model.instances, mps_thread_percentage,
                                      mps_memory_limit, model.source));
  if (model.name.empty()) return InvalidArgumentError(model.source + ": name is required");
  if (!IsValidModelName(model.name)) {
    return InvalidArgumentError(model.source + ": name " + Quote(model.name) +
                                " may use only letters, digits and . _ : - (at most 128)");
  }
  for (const std::string& alias : model.aliases) {
    if (!IsValidModelName(alias)) {
      return InvalidArgumentError(model.source + ": alias " + Quote(alias) +
                                  " may use only letters, digits and . _ : - (at most 128)");
    }
  }
  if (model.path.empty()) return InvalidArgumentError(model.source + ": path is required");
  const bool tuned = release.has_value() || entry["fallback_load"] || entry["fallback_queue_ms"] ||
                     entry["fallback_max_class"];
  if (tuned && model.fallback.empty()) {
    return InvalidArgumentError(model.source +
                                ": fallback_load, fallback_release, fallback_queue_ms and "
                                "fallback_max_class need a fallback model (fallback: NAME)");
  }
  model.fallback_when.load_below =
      release.value_or(std::max(0.0, model.fallback_when.load_above - 0.2));
  if (model.fallback_when.load_below >= model.fallback_when.load_above) {
    return InvalidArgumentError(
        model.source + ": fallback_release " + std::to_string(model.fallback_when.load_below) +
        " must be below fallback_load " + std::to_string(model.fallback_when.load_above) +
        " (the gap keeps the switch from flapping)");
  }
  if (model.idle_unload_after_seconds > 0 && !model.on_demand) {
    return InvalidArgumentError(model.source +
                                ": idle_unload_after needs load: on_demand (a model loaded at "
                                "startup is not unloaded when idle)");
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model.path, ec)) {
    return NotFoundError(model.source + ": path: no such file " + model.path);
  }
  if (!model.chat_template.empty() && !std::filesystem::is_regular_file(model.chat_template, ec)) {
    return NotFoundError(model.source + ": chat_template: no such file " + model.chat_template);
  }
  if (!model.labels.empty() && !model.labels.starts_with("metadata") &&
      !std::filesystem::is_regular_file(model.labels, ec)) {
    return NotFoundError(model.source + ": labels: no such file " + model.labels);
  }
  return model;
}

// Names and aliases unique across the repository; fallbacks name a model and never lead back.
Status CheckRepository(const std::vector<ModelConfig>& models) {
  std::map<std::string, size_t> owner;  // name or alias -> model index
  for (size_t i = 0; i < models.size(); ++i) {
    std::vector<std::string> names = {models[i].name};
    names.insert(names.end(), models[i].aliases.begin(), models[i].aliases.end());
    for (const std::string& n : names) {
      auto [it, fresh] = owner.emplace(n, i);
      if (!fresh) {
        const bool same = it->second == i;
        return InvalidArgumentError(
            models[i].source + ": " + Quote(n) +
            (same ? " is listed twice"
                  : " is already the name or an alias of " + models[it->second].source));
      }
    }
  }
  std::vector<int64_t> fallback(models.size(), -1);  // model index, or -1
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].fallback.empty()) continue;
    auto target = owner.find(models[i].fallback);
    if (target == owner.end()) {
      return InvalidArgumentError(models[i].source + ": fallback " + Quote(models[i].fallback) +
                                  " names no model of this file");
    }
    fallback[i] = static_cast<int64_t>(target->second);
  }
  // Follow each chain; coming back to a model already on it is a cycle.
  for (size_t i = 0; i < models.size(); ++i) {
    std::vector<size_t> chain = {i};
    for (int64_t next = fallback[i]; next >= 0; next = fallback[static_cast<size_t>(next)]) {
      const auto n = static_cast<size_t>(next);
      if (std::find(chain.begin(), chain.end(), n) != chain.end()) {
        std::string path;
        for (size_t c : chain) path += models[c].name + " -> ";
        return InvalidArgumentError(models[i].source + ": fallback cycle " + path + models[n].name);
      }
      chain.push_back(n);
    }
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string_view>& ModelSettingNames() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names = {
        "name",
        "path",
        "aliases",
        "fallback",
        "fallback_load",
        "fallback_release",
        "fallback_queue_ms",
        "fallback_max_class",
        "chat_template",
        "labels",
        "priority",
        "instances",
        "load",
        "idle_unload_after",
        "device",
        "cpus",
        "numa_node",
        "gpu",
        "mps_thread_percentage",
        "mps_memory_limit",
    };
    for (const serving::ModelSettingKey& key : serving::ModelSettingKeys()) {
      names.push_back(key.name);
    }
    return names;
  }();
  return kNames;
}

Result<std::vector<ModelConfig>> ParseModelRepository(std::string_view yaml_text,
                                                      std::string_view source_name,
                                                      std::string_view folder) {
  const std::string source(source_name);
  PIER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, source));
  std::vector<ModelConfig> models;
  if (!root.IsMap() || !root["models"]) return models;
  const YAML::Node list = root["models"];
  if (!list.IsSequence() || list.size() == 0) {
    return InvalidArgumentError(source +
                                ": models must be a list of models (- name: ..., path: ...)");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    PIER_ASSIGN_OR_RETURN(ModelConfig model,
                          ParseEntry(list[i], source + ": models[" + std::to_string(i) + "]",
                                     std::filesystem::path(folder)));
    models.push_back(std::move(model));
  }
  PIER_RETURN_IF_ERROR(CheckRepository(models));
  return models;
}

}  // namespace pier::cli
