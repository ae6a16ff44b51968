// ParseYaml: a YAML document from text, or INVALID_ARGUMENT naming where it came from, for
// the configuration files (serve config, model list, API keys). Header-only; whoever
// includes it links yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

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

}  // namespace pier
