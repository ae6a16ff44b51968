#include "api/kserve/classify_request.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "api/json_shape.h"
#include "common/base64.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

// "a=1&b=x" -> the value of `key` (no percent-decoding: model names are [A-Za-z0-9._:-]).
std::optional<std::string> QueryValue(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == key) {
      return std::string(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

Result<int64_t> TopK(const std::string& text, int64_t max) {
  char* end = nullptr;
  const long long k = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || k < 1 || k > max) {
    return InvalidArgumentError("top_k must be a whole number 1.." + std::to_string(max) +
                                ", got '" + text + "'");
  }
  return static_cast<int64_t>(k);
}

// The raw form: the body is the image, the rest in the query.
}  // namespace

Result<ClassifyRequest> ReadRawClassifyRequest(std::string_view query, std::string_view body,
                                               int64_t max_top_k) {
  ClassifyRequest r;
  std::optional<std::string> model = QueryValue(query, "model");
  if (!model.has_value() || model->empty()) {
    return InvalidArgumentError(
        "name the model: POST /v1/classify?model=NAME with the image "
        "as the body");
  }
  r.model = *model;
  if (std::optional<std::string> k = QueryValue(query, "top_k")) {
    PIER_ASSIGN_OR_RETURN(r.top_k, TopK(*k, max_top_k));
  }
  if (std::optional<std::string> output = QueryValue(query, "output")) r.output = *output;
  if (body.empty()) return InvalidArgumentError("the body holds no image");
  r.images.emplace_back(body);
  return r;
}

namespace {

Result<std::string> Base64Image(const Json& value, const std::string& at) {
  if (!value.is_string()) return InvalidArgumentError(at + " must be a base64 string");
  std::string_view text = value.get_ref<const std::string&>();
  // A data URL ("data:image/png;base64,....") as browsers make them.
  if (text.starts_with("data:")) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos ||
        text.substr(0, comma).find(";base64") == std::string_view::npos) {
      return InvalidArgumentError(at + " is a data URL without ';base64,'");
    }
    text.remove_prefix(comma + 1);
  }
  std::optional<std::string> bytes = DecodeBase64(text);
  if (!bytes.has_value()) return InvalidArgumentError(at + " is not base64");
  if (bytes->empty()) return InvalidArgumentError(at + " holds no bytes");
  return std::move(bytes).value();
}

}  // namespace

Result<ClassifyRequest> ReadJsonClassifyRequest(std::string_view text, int64_t max_top_k) {
  if (std::optional<std::string> shape = CheckJsonShape(text)) {
    return InvalidArgumentError(*shape);
  }
  Json body;
  try {
    body = Json::parse(text);
  } catch (const Json::exception& e) {
    return InvalidArgumentError("the body is not JSON (" + std::string(e.what()) +
                                "); send {\"model\", \"image\"} or an image with Content-Type "
                                "image/*");
  }
  if (!body.is_object()) return InvalidArgumentError("the body must be a JSON object");
  ClassifyRequest r;
  for (const auto& [key, value] : body.items()) {
    if (key == "model") {
      if (!value.is_string()) return InvalidArgumentError("model must be a string");
      r.model = value.get<std::string>();
    } else if (key == "image") {
      if (value.is_array()) {
        if (value.empty()) return InvalidArgumentError("image is an empty list");
        for (size_t i = 0; i < value.size(); ++i) {
          PIER_ASSIGN_OR_RETURN(std::string image,
                                Base64Image(value[i], "image[" + std::to_string(i) + "]"));
          r.images.push_back(std::move(image));
        }
      } else {
        PIER_ASSIGN_OR_RETURN(std::string image, Base64Image(value, "image"));
        r.images.push_back(std::move(image));
      }
    } else if (key == "top_k") {
      if (!value.is_number_integer()) return InvalidArgumentError("top_k must be a whole number");
      PIER_ASSIGN_OR_RETURN(r.top_k, TopK(std::to_string(value.get<int64_t>()), max_top_k));
    } else if (key == "output") {
      if (!value.is_string()) return InvalidArgumentError("output must be a string");
      r.output = value.get<std::string>();
    } else if (key == "priority") {
      if (!value.is_number_unsigned()) {
        return InvalidArgumentError("priority must be a whole number (Triton's: 1 the highest)");
      }
      r.priority = value.get<uint64_t>();
    } else {
      return InvalidArgumentError("unknown key \"" + key +
                                  "\" (known: model, image, top_k, output, priority)");
    }
  }
  if (r.model.empty()) return InvalidArgumentError("model is required");
  if (r.images.empty()) return InvalidArgumentError("image is required (base64)");
  return r;
}

}  // namespace pier::api
