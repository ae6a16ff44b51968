// Helpers the OpenAI-compatible routes share for reading request bodies (JSON parsed as
// ordered_json, so objects keep the client's key order) and for writing JSON back: the 400s
// with `param`, a field read as "absent when null", a value shown shortened in a message, and
// a dump that never throws.
//
// Thread-safety: free functions over values.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "api/json_shape.h"
#include "api/openai/openai_request.h"

namespace pier::api::request_json {

using json = nlohmann::ordered_json;

inline OpenAiError Bad(std::string param, std::string message) {
  return OpenAiError{400, std::move(message), std::move(param), ""};
}

// "`what` is not supported", code unsupported_parameter: refused rather than ignored.
inline OpenAiError NotSupported(std::string param, std::string what) {
  return OpenAiError{400, std::move(what) + " is not supported", std::move(param),
                     "unsupported_parameter"};
}

// JSON text that never throws (text may hold partial UTF-8 from token pieces: replaced).
inline std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A value as JSON text for messages, shortened (client bytes are never trusted to be short).
inline std::string Show(const json& value) {
  std::string text = Dump(value);
  constexpr size_t kMax = 40;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

// The member's value when present and not null.
inline const json* Field(const json& object, std::string_view name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// The body as a JSON object (after CheckJsonShape's limits), or the 400 to answer.
inline std::variant<json, OpenAiError> ParseObjectBody(std::string_view body) {
  if (std::optional<std::string> shape = CheckJsonShape(body)) return Bad("", *shape);
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return Bad("", InvalidJsonMessage(e));
  }
  if (!parsed.is_object()) {
    return Bad("",
               "the request body must be a JSON object, got " + std::string(parsed.type_name()));
  }
  return parsed;
}

}  // namespace pier::api::request_json
