// JsonSchemaExpr: the JSON texts valid against a JSON Schema, as an Expr that decoding can be
// constrained to. Every output such an Expr allows validates against the schema; some valid
// texts are not allowed (properties come in the schema's order, whitespace is bounded, numbers
// have at most 16 digits unless a bound needs more), which is how a constraint stays small and
// a small model stays on track.
//
// Supported (draft 2020-12 and the draft-07 spellings): type (a name or a list), enum, const,
// anyOf, allOf of one schema, $ref into the same document (#, #/$defs/..., #/definitions/...;
// recursion unrolled max_ref_depth times, a recursion without a base case is refused),
// objects (properties in order, required, additionalProperties false/true/a schema), arrays
// (items, minItems, maxItems), strings (minLength, maxLength, pattern, format date, time,
// date-time, uuid), integers with bounds of any size (compared as decimal digits; how a bound
// that arrived as a double is read: IntegerBoundOf in json_schema.cpp), numbers with
// whole-number bounds from 0 to below 1e15, booleans and null. A schema with no type allows any
// JSON value, nested at most max_free_depth deep. Annotations (title, description, default,
// examples, ...) are ignored; validation keywords Pier cannot enforce (oneOf, not, uniqueItems,
// multipleOf, patternProperties,
// ...) are refused with INVALID_ARGUMENT naming the keyword and where it is, never ignored.
//
// Thread-safety: free functions returning immutable Exprs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "grammar/expr.h"

namespace pier::grammar {

struct JsonSchemaOptions {
  int32_t max_free_depth = 5;     // nesting of objects and arrays inside a free-form value
  int32_t max_ref_depth = 3;      // how often one recursive $ref unrolls
  int32_t max_schema_depth = 64;  // nesting of the schema document itself
  // Subschemas compiled, counting each $ref expansion (a bound on compile time and size).
  int64_t max_compiled_subschemas = 10'000;
  // No whitespace between the schema's own tokens (objects and arrays it describes); free-form
  // values inside keep JSON's bounded whitespace. Also set by the root's kCompactKeyword.
  bool compact = false;
};

// A root keyword of Pier's own, `"x-pier-compact": true`: the output has no whitespace between
// the schema's tokens (a tool call's frame, where spaces and newlines only cost tokens).
inline constexpr const char* kCompactKeyword = "x-pier-compact";

// `schema` in document order (ordered_json keeps the properties' order).
[[nodiscard]] Result<ExprPtr> JsonSchemaExpr(const nlohmann::ordered_json& schema,
                                             const JsonSchemaOptions& options = {});

// Any JSON value, objects and arrays nested at most `depth` deep.
ExprPtr AnyJsonValue(int32_t depth);
// Any JSON object (OpenAI's json_object mode), values nested at most `depth` - 1 deeper.
ExprPtr AnyJsonObject(int32_t depth);

}  // namespace pier::grammar
