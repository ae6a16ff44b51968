#include "pipelines/pipeline_spec.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace pier::pipelines {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-' || c == '/';
  });
}

Status Bad(const std::string& where, const std::string& what) {
  return InvalidArgumentError(where + ": " + what);
}

Result<int64_t> ReadCount(const YAML::Node& node, const std::string& where, int64_t min,
                          int64_t max) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    return Bad(where, "must be a whole number from " + std::to_string(min) + " to " +
                          std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

Result<std::map<std::string, std::string>> ReadPorts(const YAML::Node& node,
                                                     const std::string& where) {
  std::map<std::string, std::string> ports;
  if (!node) return ports;
  if (!node.IsMap()) return Bad(where, "must be a map of port: value");
  for (const auto& item : node) {
    const std::string port = item.first.Scalar();
    if (!item.second.IsScalar() || !ValidName(item.second.Scalar())) {
      return Bad(
          where + "." + port,
          "must name a value (letters, digits and . _ : - /), got '" +
              (item.second.IsScalar() ? item.second.Scalar() : std::string("a list or map")) + "'");
    }
    ports[port] = item.second.Scalar();
  }
  return ports;
}

Result<std::vector<PipelineTensor>> ReadTensors(const YAML::Node& node, const std::string& where,
                                                bool required) {
  std::vector<PipelineTensor> tensors;
  if (!node) {
    if (required) return Bad(where, "is required (a list of {name, datatype})");
    return tensors;
  }
  if (!node.IsSequence() || node.size() == 0) {
    return Bad(where, "must be a non-empty list of {name, datatype, shape}");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const YAML::Node t = node[i];
    if (!t.IsMap()) return Bad(at, "must be a map {name, datatype, shape}");
    PipelineTensor tensor;
    for (const auto& item : t) {
      const std::string key = item.first.Scalar();
      if (key == "name") {
        tensor.name = item.second.Scalar();
      } else if (key == "datatype") {
        std::optional<ElementType> type = ParseElementType(item.second.Scalar());
        if (!type.has_value()) {
          return Bad(at + ".datatype", "'" + item.second.Scalar() + "' is not a KServe datatype");
        }
        tensor.type = *type;
      } else if (key == "shape") {
        if (!item.second.IsSequence()) return Bad(at + ".shape", "must be a list of dimensions");
        tensor.shape.clear();
        for (size_t d = 0; d < item.second.size(); ++d) {
          PIER_ASSIGN_OR_RETURN(int64_t dim,
                                ReadCount(item.second[d], at + ".shape", -1, int64_t{1} << 40));
          tensor.shape.push_back(dim);
        }
      } else {
        return Bad(at, "unknown key '" + key + "' (known: name, datatype, shape)");
      }
    }
    if (!ValidName(tensor.name)) return Bad(at + ".name", "is missing or not a valid name");
    if (!seen.insert(tensor.name).second) return Bad(at, "'" + tensor.name + "' is listed twice");
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

Result<StepSpec> ReadStep(const YAML::Node& node, const std::string& where, size_t index) {
  if (!node.IsMap()) return Bad(where, "must be a map (name, model or processor, inputs, outputs)");
  StepSpec step;
  step.name = node["name"] && node["name"].IsScalar() ? node["name"].Scalar() : "";
  step.source = where + " (" + (step.name.empty() ? "unnamed" : step.name) + ")";
  if (step.name.empty()) step.name = "step" + std::to_string(index);
  if (!ValidName(step.name)) {
    return Bad(step.source + ".name", "'" + step.name + "' is not a valid name");
  }
  for (const auto& item : node) {
    const std::string key = item.first.Scalar();
    if (key == "name") continue;
    if (key == "model" || key == "processor") {
      if (!item.second.IsScalar() || item.second.Scalar().empty()) {
        return Bad(step.source + "." + key, "must be a name");
      }
      (key == "model" ? step.model : step.processor) = item.second.Scalar();
    } else if (key == "inputs") {
      PIER_ASSIGN_OR_RETURN(step.inputs, ReadPorts(item.second, step.source + ".inputs"));
    } else if (key == "outputs") {
      PIER_ASSIGN_OR_RETURN(step.outputs, ReadPorts(item.second, step.source + ".outputs"));
    } else if (key == "max_inflight") {
      PIER_ASSIGN_OR_RETURN(step.max_inflight,
                            ReadCount(item.second, step.source + ".max_inflight", 1, 4096));
    } else {
      step.settings[key] = TypedYamlToJson(item.second);
    }
  }
  if (step.model.empty() == step.processor.empty()) {
    return Bad(step.source,
               "needs exactly one of model: (a served model) or processor: (a "
               "built-in processor)");
  }
  if (step.outputs.empty()) return Bad(step.source + ".outputs", "names no value");
  return step;
}

// Orders the steps so each runs after the producers of what it reads; INVALID_ARGUMENT naming
// a step on a cycle.
Status OrderSteps(PipelineSpec* spec) {
  std::map<std::string, size_t> producer;  // value -> step index
  for (size_t i = 0; i < spec->steps.size(); ++i) {
    for (const auto& [port, value] : spec->steps[i].outputs) {
      for (const PipelineTensor& in : spec->inputs) {
        if (in.name == value) {
          return Bad(spec->steps[i].source + ".outputs." + port,
                     "'" + value + "' is a pipeline input; a step may not produce it");
        }
      }
      if (auto [it, added] = producer.emplace(value, i); !added) {
        return Bad(spec->steps[i].source + ".outputs." + port,
                   "'" + value + "' is also produced by step '" + spec->steps[it->second].name +
                       "'; each value has one producer");
      }
    }
  }
  std::set<std::string> inputs;
  for (const PipelineTensor& in : spec->inputs) inputs.insert(in.name);
  for (const StepSpec& step : spec->steps) {
    for (const auto& [port, value] : step.inputs) {
      if (inputs.count(value) == 0 && producer.count(value) == 0) {
        return Bad(step.source + ".inputs." + port,
                   "'" + value + "' is neither a pipeline input nor produced by any step");
      }
    }
  }
  std::vector<StepSpec> ordered;
  std::vector<bool> placed(spec->steps.size(), false);
  std::set<std::string> available = inputs;
  while (ordered.size() < spec->steps.size()) {
    bool progress = false;
    for (size_t i = 0; i < spec->steps.size(); ++i) {
      if (placed[i]) continue;
      const bool ready =
          std::all_of(spec->steps[i].inputs.begin(), spec->steps[i].inputs.end(),
                      [&](const auto& port) { return available.count(port.second) > 0; });
      if (!ready) continue;
      placed[i] = true;
      progress = true;
      for (const auto& [port, value] : spec->steps[i].outputs) available.insert(value);
      ordered.push_back(spec->steps[i]);
    }
    if (!progress) {
      for (size_t i = 0; i < spec->steps.size(); ++i) {
        if (!placed[i]) {
          return Bad(spec->steps[i].source,
                     "is on a cycle: what it reads depends on what it produces");
        }
      }
    }
  }
  spec->steps = std::move(ordered);
  for (const PipelineTensor& out : spec->outputs) {
    if (available.count(out.name) == 0) {
      return Bad(spec->source + ".outputs",
                 "'" + out.name + "' is produced by no step (name a step's output value)");
    }
  }
  return Status::Ok();
}

Result<PipelineSpec> ReadPipeline(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return Bad(where, "must be a map (name, inputs, outputs, steps)");
  PipelineSpec spec;
  spec.name = node["name"] && node["name"].IsScalar() ? node["name"].Scalar() : "";
  spec.source = where + (spec.name.empty() ? "" : " (" + spec.name + ")");
  if (!ValidName(spec.name) || spec.name.find('/') != std::string::npos) {
    return Bad(spec.source + ".name", "is missing or not a valid name (letters, digits, . _ : -)");
  }
  static const std::set<std::string> kKnown = {"name",         "inputs",    "outputs", "steps",
                                               "max_inflight", "max_queue", "threads"};
  for (const auto& item : node) {
    if (kKnown.count(item.first.Scalar()) == 0) {
      return Bad(spec.source, "unknown key '" + item.first.Scalar() +
                                  "' (known: name, inputs, outputs, steps, max_inflight, "
                                  "max_queue, threads)");
    }
  }
  PIER_ASSIGN_OR_RETURN(spec.inputs, ReadTensors(node["inputs"], spec.source + ".inputs", true));
  PIER_ASSIGN_OR_RETURN(spec.outputs, ReadTensors(node["outputs"], spec.source + ".outputs", true));
  if (node["max_inflight"]) {
    PIER_ASSIGN_OR_RETURN(spec.max_inflight,
                          ReadCount(node["max_inflight"], spec.source + ".max_inflight", 1, 4096));
  }
  if (node["max_queue"]) {
    PIER_ASSIGN_OR_RETURN(spec.max_queue,
                          ReadCount(node["max_queue"], spec.source + ".max_queue", 0, 100000));
  }
  if (node["threads"]) {
    PIER_ASSIGN_OR_RETURN(spec.threads,
                          ReadCount(node["threads"], spec.source + ".threads", 1, 64));
  }
  const YAML::Node steps = node["steps"];
  if (!steps || !steps.IsSequence() || steps.size() == 0) {
    return Bad(spec.source + ".steps", "must be a non-empty list of steps");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < steps.size(); ++i) {
    PIER_ASSIGN_OR_RETURN(
        StepSpec step, ReadStep(steps[i], spec.source + ": steps[" + std::to_string(i) + "]", i));
    if (!names.insert(step.name).second) {
      return Bad(step.source, "another step is also called '" + step.name + "'");
    }
    spec.steps.push_back(std::move(step));
  }
  PIER_RETURN_IF_ERROR(OrderSteps(&spec));
  return spec;
}

}  // namespace

nlohmann::ordered_json TypedYamlToJson(const YAML::Node& node) {
  if (!node || node.IsNull()) return nullptr;
  if (node.IsSequence()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const YAML::Node& item : node) list.push_back(TypedYamlToJson(item));
    return list;
  }
  if (node.IsMap()) {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (const auto& item : node) map[item.first.Scalar()] = TypedYamlToJson(item.second);
    return map;
  }
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: a string whatever it reads as
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  if (text == "null" || text == "~") return nullptr;
  int64_t whole = 0;
  if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), whole);
      !text.empty() && ec == std::errc() && end == text.data() + text.size()) {
    return whole;
  }
  double real = 0;
  if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), real);
      !text.empty() && ec == std::errc() && end == text.data() + text.size()) {
    return real;
  }
  return text;
}

Result<std::vector<PipelineSpec>> ParsePipelines(const YAML::Node& list, std::string_view source,
                                                 std::string_view folder) {
  std::vector<PipelineSpec> pipelines;
  if (!list || list.IsNull()) return pipelines;
  const std::string where = std::string(source) + ": pipelines";
  if (!list.IsSequence())
    return Bad(where, "must be a list of pipelines (- name: ..., steps: ...)");
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    PIER_ASSIGN_OR_RETURN(PipelineSpec spec,
                          ReadPipeline(list[i], where + "[" + std::to_string(i) + "]"));
    if (!names.insert(spec.name).second) {
      return Bad(spec.source, "another pipeline is also called '" + spec.name + "'");
    }
    for (StepSpec& step : spec.steps) step.folder = std::string(folder);
    pipelines.push_back(std::move(spec));
  }
  return pipelines;
}

}  // namespace pier::pipelines
