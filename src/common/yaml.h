// ParseYaml: a YAML document from text, or INVALID_ARGUMENT naming where it came from, for
// the configuration files (serve config, model list, API keys); YamlToJson: a node as JSON
// (scalars as strings: YAML's text, typed by whoever reads it). Header-only; whoever includes
// it links yaml-cpp and nlohmann_json.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier {

inline Result<YAML::Node> ParseYaml(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source) + ": not valid YAML: " + e.what());
  }
}

// Null for an empty value, a string for a scalar, an array for a list, an object for a map
// (keys as their text).
inline nlohmann::json YamlToJson(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsSequence()) {
    nlohmann::json list = nlohmann::json::array();
    for (const YAML::Node& item : node) list.push_back(YamlToJson(item));
    return list;
  }
  if (node.IsMap()) {
    nlohmann::json map = nlohmann::json::object();
    for (const auto& item : node) map[item.first.Scalar()] = YamlToJson(item.second);
    return map;
  }
  return nullptr;
}

}  // namespace pier
