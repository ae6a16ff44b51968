// StepKeys and ReadListSource (processors.h): reading a step's own keys.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipelines/processors/processors.h"

namespace pier::pipelines {

const nlohmann::ordered_json* StepKeys::Raw(const std::string& key) {
  read_.push_back(key);
  auto it = spec_.settings.find(key);
  return it == spec_.settings.end() ? nullptr : &*it;
}

Result<double> StepKeys::Number(const std::string& key, double fallback, double min, double max) {
  const nlohmann::ordered_json* v = Raw(key);
  if (v == nullptr) return fallback;
  if (!v->is_number() || v->get<double>() < min || v->get<double>() > max) {
    return InvalidArgumentError(spec_.source + "." + key + ": must be a number from " +
                                std::to_string(min) + " to " + std::to_string(max) + ", got " +
                                v->dump());
  }
  return v->get<double>();
}

Result<int64_t> StepKeys::Count(const std::string& key, int64_t fallback, int64_t min,
                                int64_t max) {
  const nlohmann::ordered_json* v = Raw(key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > max) {
    return InvalidArgumentError(spec_.source + "." + key + ": must be a whole number from " +
                                std::to_string(min) + " to " + std::to_string(max) + ", got " +
                                v->dump());
  }
  return v->get<int64_t>();
}

Result<bool> StepKeys::Flag(const std::string& key, bool fallback) {
  const nlohmann::ordered_json* v = Raw(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return InvalidArgumentError(spec_.source + "." + key + ": must be true or false, got " +
                                v->dump());
  }
  return v->get<bool>();
}

Result<std::string> StepKeys::Text(const std::string& key, const std::string& fallback) {
  const nlohmann::ordered_json* v = Raw(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) {
    return InvalidArgumentError(spec_.source + "." + key + ": must be text, got " + v->dump());
  }
  return v->get<std::string>();
}

Status StepKeys::Finish(const std::string& what) const {
  std::string unknown;
  for (const auto& [key, value] : spec_.settings.items()) {
    if (std::find(read_.begin(), read_.end(), key) == read_.end()) {
      unknown += (unknown.empty() ? "'" : ", '") + key + "'";
    }
  }
  if (unknown.empty()) return Status::Ok();
  std::string known;
  for (const std::string& k : read_) known += (known.empty() ? "" : ", ") + k;
  return InvalidArgumentError(spec_.source + ": " + what + " has no key " + unknown +
                              (known.empty() ? " (it takes none)" : " (its keys: " + known + ")"));
}

Result<std::string> ReadListSource(const std::string& where, const std::string& model,
                                   const ModelResolver& models, const std::string& source) {
  if (where.rfind("metadata:", 0) == 0) {
    const std::string key = where.substr(9);
    if (model.empty()) {
      return InvalidArgumentError(source + ": '" + where +
                                  "' reads a model's metadata; name the model too");
    }
    Result<ModelAccess> access = models ? models(model) : NotFoundError("no models");
    if (!access.ok()) return access.status().WithContext(source);
    if (access->kind != ModelAccess::Kind::kTensor || !access->metadata) {
      return InvalidArgumentError(source + ": model '" + model + "' is not an ONNX model");
    }
    return access->metadata(key).status().ok()
               ? access->metadata(key)
               : Result<std::string>(NotFoundError(source + ": model '" + model +
                                                   "' has no metadata entry '" + key + "'"));
  }
  std::ifstream file(where);
  if (!file) return NotFoundError(source + ": cannot read the file '" + where + "'");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace pier::pipelines
