// OutputConstraint: what a request asks its output to be, as plain data that crosses the HTTP
// layer, the engine and the worker IPC (constraint.h compiles it).
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace pier::grammar {

struct OutputConstraint {
  enum class Kind : uint8_t {
    kNone = 0,
    kJsonObject = 1,  // any JSON object (response_format json_object)
    kJsonSchema = 2,  // a JSON value valid against `schema` (response_format json_schema)
  };
  Kind kind = Kind::kNone;
  std::string schema;  // kJsonSchema: the schema as JSON text, properties in their order
  // Literal text before and after the JSON value: the output is prefix + value + suffix
  // (a tool call's wrapper, e.g. "<tool_call>\n" and "\n</tool_call>"). Empty for
  // response_format.
  std::string prefix;
  std::string suffix;

  static OutputConstraint JsonObject() { return {Kind::kJsonObject, "", "", ""}; }
  static OutputConstraint JsonSchema(std::string schema) {
    return {Kind::kJsonSchema, std::move(schema), "", ""};
  }

  bool active() const { return kind != Kind::kNone; }
  bool operator==(const OutputConstraint&) const = default;
};

}  // namespace pier::grammar
