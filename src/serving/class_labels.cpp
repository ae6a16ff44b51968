#include "serving/class_labels.h"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace pier::serving {
namespace {

constexpr std::string_view kMetadata = "metadata";

// One name per line; "\r\n" read as "\n"; trailing empty lines dropped.
std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    start = end + 1;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "{0: 'person', 1: \"bicycle\"}" -> names by index; nullopt when it is not that form.
std::optional<std::map<int64_t, std::string>> PythonMap(std::string_view text) {
  text = Trim(text);
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  std::map<int64_t, std::string> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  while (true) {
    skip();
    if (i >= text.size()) break;
    size_t digits = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (digits == i || i - digits > 9) return std::nullopt;
    const int64_t index = std::stoll(std::string(text.substr(digits, i - digits)));
    skip();
    if (i >= text.size() || text[i] != ':') return std::nullopt;
    ++i;
    skip();
    if (i >= text.size() || (text[i] != '\'' && text[i] != '"')) return std::nullopt;
    const char quote = text[i++];
    std::string name;
    while (i < text.size() && text[i] != quote) {
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      name.push_back(text[i++]);
    }
    if (i >= text.size()) return std::nullopt;
    ++i;
    out[index] = std::move(name);
    skip();
    if (i < text.size() && text[i] == ',') ++i;
  }
  return out;
}

Result<std::vector<std::string>> ParseMetadataLabels(const std::string& key,
                                                     const std::string& value) {
  const std::string_view trimmed = Trim(value);
  if (!trimmed.empty() && trimmed.front() == '[') {
    try {
      return nlohmann::json::parse(trimmed).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      return InvalidArgumentError("labels: metadata entry '" + key +
                                  "' starts with '[' but is not a JSON list of strings");
    }
  }
  if (std::optional<std::map<int64_t, std::string>> map = PythonMap(trimmed)) {
    std::vector<std::string> out;
    for (const auto& [index, name] : *map) {
      if (index != static_cast<int64_t>(out.size())) {
        return InvalidArgumentError("labels: metadata entry '" + key + "' has no name for class " +
                                    std::to_string(out.size()));
      }
      out.push_back(name);
    }
    return out;
  }
  return Lines(value);
}

}  // namespace

Result<std::vector<std::string>> ReadClassLabels(
    std::string_view spec, const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> labels;
  if (spec == kMetadata || spec.starts_with(std::string(kMetadata) + ":")) {
    const std::string key =
        spec == kMetadata ? "labels" : std::string(spec.substr(kMetadata.size() + 1));
    auto it = metadata.find(key);
    if (it == metadata.end()) {
      std::string keys;
      for (const auto& [k, unused] : metadata) keys += (keys.empty() ? "" : ", ") + k;
      return NotFoundError("labels: the model's metadata has no entry '" + key +
                           "' (it has: " + (keys.empty() ? "none" : keys) + ")");
    }
    PIER_ASSIGN_OR_RETURN(labels, ParseMetadataLabels(key, it->second));
  } else {
    std::ifstream file{std::string(spec), std::ios::binary};
    if (!file) return NotFoundError("labels: cannot read " + std::string(spec));
    std::ostringstream text;
    text << file.rdbuf();
    labels = Lines(text.str());
  }
  if (labels.empty()) {
    return InvalidArgumentError("labels: " + std::string(spec) + " holds no names");
  }
  return labels;
}

Result<std::map<std::string, std::vector<std::string>>> AssignClassLabels(
    std::vector<std::string> labels, const tensor_models::TensorModelInfo& info,
    std::string_view model) {
  std::map<std::string, std::vector<std::string>> out;
  std::string seen;
  for (const TensorSpec& output : info.outputs) {
    if (output.type == ElementType::kBytes || output.type == ElementType::kBool ||
        output.shape.empty()) {
      continue;
    }
    const int64_t classes = output.shape.back();
    if (classes == static_cast<int64_t>(labels.size()) || classes < 0) {
      out[output.name] = labels;
    } else {
      seen += (seen.empty() ? "" : ", ") +
              ("output '" + output.name + "' has " + std::to_string(classes) + " classes");
    }
  }
  if (out.empty()) {
    return InvalidArgumentError("model " + std::string(model) +
                                ": labels: " + std::to_string(labels.size()) + " names, but " +
                                (seen.empty() ? "no output holds numbers" : seen));
  }
  return out;
}

}  // namespace pier::serving
