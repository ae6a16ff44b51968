#include "grammar/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/mutex.h"
#include "grammar/decimal_integer.h"
#include "grammar/json_lexical.h"
#include "grammar/string_pattern.h"

namespace pier::grammar {
namespace {

using Json = nlohmann::ordered_json;

ExprPtr Separator() { return Seq({JsonWhitespace(), Byte(','), JsonWhitespace()}); }

ExprPtr Member(ExprPtr key, ExprPtr value) {
  return Seq({std::move(key), JsonWhitespace(), Byte(':'), JsonWhitespace(), std::move(value)});
}

ExprPtr Braced(char open, ExprPtr inside, char close) {
  return Seq({Byte(static_cast<uint8_t>(open)), JsonWhitespace(), std::move(inside),
              JsonWhitespace(), Byte(static_cast<uint8_t>(close))});
}

// Validation keywords Pier cannot enforce with a regular constraint.
constexpr const char* kUnsupportedKeywords[] = {
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "additionalItems",
};

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), ws_(options.compact ? Empty() : JsonWhitespace()) {}

  Result<ExprPtr> Compile(const Json& s, const std::string& path, int32_t depth) {
    // $refs are expanded in place, so a small schema whose definitions each use the next one
    // twice would compile 2^N subschemas: stop at a fixed number.
    if (++compiled_ > options_.max_compiled_subschemas) {
      return Error(path, "the schema is too complex: more than " +
                             std::to_string(options_.max_compiled_subschemas) +
                             " subschemas once its $refs are expanded");
    }
    if (depth > options_.max_schema_depth) {
      return Error(path, "the schema nests deeper than " +
                             std::to_string(options_.max_schema_depth) + " levels");
    }
    if (s.is_boolean()) return s.get<bool>() ? AnyJsonValue(options_.max_free_depth) : Nothing();
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    for (const char* keyword : kUnsupportedKeywords) {
      if (s.contains(keyword))
        return Unsupported(path, std::string("'") + keyword + "' is not supported");
    }
    if (const auto it = s.find("uniqueItems"); it != s.end() && *it == true) {
      return Unsupported(path, "'uniqueItems' is not supported");
    }
    if (const auto it = s.find("$ref"); it != s.end()) return CompileRef(*it, path, depth);
    if (const auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) {
        return Unsupported(path, "'allOf' is supported only with exactly one schema");
      }
      if (HasValidation(s, {"allOf"})) {
        return Unsupported(path, "'allOf' next to other validation keywords is not supported");
      }
      return Compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    if (const auto it = s.find("const"); it != s.end()) return Literal(it->dump());
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Error(path, "'enum' must be a non-empty array");
      std::vector<ExprPtr> options;
      for (const Json& v : *it) options.push_back(Literal(v.dump()));
      return Alt(std::move(options));
    }
    if (const auto it = s.find("anyOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Error(path, "'anyOf' must be a non-empty array");
      if (HasValidation(s, {"anyOf", "$defs", "definitions"})) {
        return Unsupported(path, "'anyOf' next to other validation keywords is not supported");
      }
      std::vector<ExprPtr> options;
      for (size_t i = 0; i < it->size(); ++i) {
        PIER_ASSIGN_OR_RETURN(ExprPtr e,
                              Compile((*it)[i], path + "/anyOf/" + std::to_string(i), depth + 1));
        options.push_back(e);
      }
      return Alt(std::move(options));
    }
    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const Json& t : *it) {
          if (!t.is_string()) return Error(path, "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a string or an array of strings");
      }
    } else {
      types = InferTypes(s);
      if (types.empty()) return AnyJsonValue(options_.max_free_depth);
    }
    std::vector<ExprPtr> options;
    for (const std::string& t : types) {
      PIER_ASSIGN_OR_RETURN(ExprPtr e, CompileType(s, t, path, depth));
      options.push_back(e);
    }
    return Alt(std::move(options));
  }

 private:
  // A schema that is not valid JSON Schema (or admits nothing): INVALID_ARGUMENT.
  static Status Error(const std::string& path, const std::string& what) {
    return InvalidArgumentError(what + " (at " + path + ")");
  }
  // Valid JSON Schema that Pier cannot enforce: UNSUPPORTED (a caller that enforces nothing,
  // such as tool_choice auto, may accept it).
  static Status Unsupported(const std::string& path, const std::string& what) {
    return UnsupportedError(what + " (at " + path + ")");
  }
  // A part's error, with its code, placed at `path`.
  static Status Error(const std::string& path, const Status& inner) {
    return Status(inner.code(), inner.message() + " (at " + path + ")");
  }

  // Keywords other than `except` that constrain a value (not annotations).
  static bool HasValidation(const Json& s, std::initializer_list<const char*> except) {
    static constexpr const char* kValidation[] = {"type",
                                                  "properties",
                                                  "required",
                                                  "additionalProperties",
                                                  "items",
                                                  "minItems",
                                                  "maxItems",
                                                  "minLength",
                                                  "maxLength",
                                                  "pattern",
                                                  "format",
                                                  "minimum",
                                                  "maximum",
                                                  "exclusiveMinimum",
                                                  "exclusiveMaximum",
                                                  "enum",
                                                  "const",
                                                  "anyOf",
                                                  "allOf"};
    for (const char* k : kValidation) {
      if (!s.contains(k)) continue;
      if (std::none_of(except.begin(), except.end(),
                       [k](const char* e) { return std::string_view(e) == k; })) {
        return true;
      }
    }
    return false;
  }

  static std::vector<std::string> InferTypes(const Json& s) {
    for (const char* k : {"properties", "required", "additionalProperties"}) {
      if (s.contains(k)) return {"object"};
    }
    for (const char* k : {"items", "minItems", "maxItems"}) {
      if (s.contains(k)) return {"array"};
    }
    for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
      if (s.contains(k)) return {"string"};
    }
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k)) return {"number"};
    }
    return {};
  }

  Result<ExprPtr> CompileRef(const Json& ref, const std::string& path, int32_t depth) {
    if (!ref.is_string()) return Error(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return Unsupported(path, "'$ref' " + target +
                                   " is not supported: only references into the same "
                                   "schema (#, #/$defs/..., #/definitions/...)");
    }
    const Json* node = &root_;
    if (target.size() > 1) {
      try {
        node = &root_.at(Json::json_pointer(target.substr(1)));
      } catch (const Json::exception&) {
        return Error(path, "'$ref' " + target + " points at nothing in the schema");
      }
    }
    int32_t& unrolled = ref_depth_[target];
    if (unrolled >= options_.max_ref_depth) return Nothing();  // cut: a base case must exist
    ++unrolled;
    Result<ExprPtr> e = Compile(*node, target, depth + 1);
    --unrolled;
    return e;
  }

  struct Bound {
    std::optional<double> value;
    bool exclusive = false;
  };

  // The tighter of `inclusive` and `exclusive` (a number in draft 2020-12, a flag on the
  // inclusive bound in draft 4).
  Result<Bound> ReadBound(const Json& s, const char* inclusive, const char* exclusive, bool lower,
                          const std::string& path) {
    Bound bound;
    if (const auto it = s.find(inclusive); it != s.end()) {
      if (!it->is_number()) return Error(path, std::string("'") + inclusive + "' must be a number");
      bound.value = it->get<double>();
    }
    if (const auto it = s.find(exclusive); it != s.end()) {
      if (it->is_boolean()) {
        bound.exclusive = it->get<bool>();
      } else if (it->is_number()) {
        const double v = it->get<double>();
        if (!bound.value.has_value() || (lower ? v >= *bound.value : v <= *bound.value)) {
          bound = {v, true};
        }
      } else {
        return Error(path, std::string("'") + exclusive + "' must be a number");
      }
    }
    return bound;
  }

  // The bound `keyword` sets on integers: the least integer allowed (lower) or the greatest,
  // strictly beyond the number when `strict`; exact at any size.
  //
  // A JSON integer that fits 64 bits arrives exactly. Any other number (a fraction, an
  // exponent, or an integer beyond 64 bits) was read as a double, as most JSON parsers read it,
  // and two readings of that double are both fair: its exact value (1e24 is
  // 999999999999999983222784, what Python's jsonschema compares against) and the shortest
  // decimal that reads back as it (10^24, what the schema's author wrote). The bound is the
  // tighter of the two, so output is valid under either; only the integers between the two
  // readings (less than one part in 10^16 of the bound) are given up.
  Result<DecimalInteger> IntegerBoundOf(const Json& v, const char* keyword, bool lower, bool strict,
                                        const std::string& path) {
    // Strictly above x: floor(x) + 1; at least x: ceil(x); and their mirror images below.
    auto bound = [&](const DecimalInteger& floor, const DecimalInteger& ceil) {
      return lower ? (strict ? floor.Next() : ceil) : (strict ? ceil.Previous() : floor);
    };
    if (v.is_number_unsigned()) {
      const DecimalInteger x = DecimalInteger::OfUnsigned(v.get<uint64_t>());
      return bound(x, x);
    }
    if (v.is_number_integer()) {
      const DecimalInteger x = DecimalInteger::Of(v.get<int64_t>());
      return bound(x, x);
    }
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Error(path, std::string("'") + keyword + "' must be finite");
    const DecimalInteger exact = bound(FloorOf(d), CeilOf(d));
    char buf[64];  // the longest shortest form is 24 characters ("-2.2250738585072014e-308")
    const std::to_chars_result r =
        std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    PIER_CHECK(r.ec == std::errc());
    const std::string_view text(buf, static_cast<size_t>(r.ptr - buf));
    const std::optional<DecimalInteger> floor = FloorOfDecimal(text);
    const std::optional<DecimalInteger> ceil = CeilOfDecimal(text);
    PIER_CHECK(floor.has_value() && ceil.has_value());
    const DecimalInteger written = bound(*floor, *ceil);
    return lower ? std::max(exact, written) : std::min(exact, written);
  }

  // The tighter of `inclusive` and `exclusive` as an integer bound (the exclusive keyword is a
  // number in draft 2020-12, a flag on the inclusive one in draft 4).
  Result<std::optional<DecimalInteger>> IntegerBound(const Json& s, const char* inclusive,
                                                     const char* exclusive, bool lower,
                                                     const std::string& path) {
    std::optional<DecimalInteger> bound;
    auto tighten = [&](const DecimalInteger& b) {
      if (!bound.has_value() || (lower ? b > *bound : b < *bound)) bound = b;
    };
    bool inclusive_is_strict = false;
    if (const auto it = s.find(exclusive); it != s.end()) {
      if (it->is_boolean()) {
        inclusive_is_strict = it->get<bool>();
      } else if (it->is_number()) {
        PIER_ASSIGN_OR_RETURN(DecimalInteger b, IntegerBoundOf(*it, exclusive, lower, true, path));
        tighten(b);
      } else {
        return Error(path, std::string("'") + exclusive + "' must be a number");
      }
    }
    if (const auto it = s.find(inclusive); it != s.end()) {
      if (!it->is_number()) return Error(path, std::string("'") + inclusive + "' must be a number");
      PIER_ASSIGN_OR_RETURN(DecimalInteger b,
                            IntegerBoundOf(*it, inclusive, lower, inclusive_is_strict, path));
      tighten(b);
    }
    return bound;
  }

  Result<NumberBounds> NumberBoundsOf(const Json& s, const std::string& path) {
    PIER_ASSIGN_OR_RETURN(Bound lo, ReadBound(s, "minimum", "exclusiveMinimum", true, path));
    PIER_ASSIGN_OR_RETURN(Bound hi, ReadBound(s, "maximum", "exclusiveMaximum", false, path));
    return NumberBounds{lo.value, hi.value, lo.exclusive, hi.exclusive};
  }

  Result<int32_t> Count(const Json& s, const char* name, int32_t fallback,
                        const std::string& path) {
    const auto it = s.find(name);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Error(path, std::string("'") + name + "' must be a non-negative integer");
    }
    return static_cast<int32_t>(std::min<int64_t>(it->get<int64_t>(), 1 << 20));
  }

  Result<ExprPtr> CompileType(const Json& s, const std::string& type, const std::string& path,
                              int32_t depth) {
    if (type == "null") return Literal("null");
    if (type == "boolean") return Alt({Literal("true"), Literal("false")});
    if (type == "integer") {
      PIER_ASSIGN_OR_RETURN(std::optional<DecimalInteger> lo,
                            IntegerBound(s, "minimum", "exclusiveMinimum", true, path));
      PIER_ASSIGN_OR_RETURN(std::optional<DecimalInteger> hi,
                            IntegerBound(s, "maximum", "exclusiveMaximum", false, path));
      Result<ExprPtr> e = JsonInteger(lo, hi);
      if (!e.ok()) return Error(path, e.status());
      return e;
    }
    if (type == "number") {
      PIER_ASSIGN_OR_RETURN(NumberBounds bounds, NumberBoundsOf(s, path));
      Result<ExprPtr> e = JsonNumber(bounds);
      if (!e.ok()) return Error(path, e.status());
      return e;
    }
    if (type == "string") return CompileString(s, path);
    if (type == "array") return CompileArray(s, path, depth);
    if (type == "object") return CompileObject(s, path, depth);
    return Error(path, "unknown type '" + type +
                           "' (expected string, number, integer, boolean, null, object or array)");
  }

  Result<ExprPtr> CompileString(const Json& s, const std::string& path) {
    PIER_ASSIGN_OR_RETURN(int32_t min_length, Count(s, "minLength", 0, path));
    PIER_ASSIGN_OR_RETURN(int32_t max_length, Count(s, "maxLength", kUnbounded, path));
    const bool has_length = s.contains("minLength") || s.contains("maxLength");
    if (const auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'pattern' must be a string");
      if (has_length)
        return Unsupported(path, "'pattern' together with minLength/maxLength is not supported");
      if (s.contains("format"))
        return Unsupported(path, "'pattern' together with 'format' is not supported");
      Result<ExprPtr> content = PatternContent(it->get<std::string>());
      if (!content.ok()) return Error(path, content.status());
      return Seq({Byte('"'), *content, Byte('"')});
    }
    if (const auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) return Error(path, "'format' must be a string");
      if (has_length)
        return Unsupported(path, "'format' together with minLength/maxLength is not supported");
      Result<ExprPtr> content = StringFormatContent(it->get<std::string>());
      if (!content.ok()) return Error(path, content.status());
      return Seq({Byte('"'), *content, Byte('"')});
    }
    if (max_length != kUnbounded && max_length < min_length) {
      return Error(path, "maxLength is below minLength");
    }
    return JsonString(min_length, max_length);
  }

  Result<ExprPtr> CompileArray(const Json& s, const std::string& path, int32_t depth) {
    PIER_ASSIGN_OR_RETURN(int32_t min_items, Count(s, "minItems", 0, path));
    PIER_ASSIGN_OR_RETURN(int32_t max_items, Count(s, "maxItems", kUnbounded, path));
    if (max_items != kUnbounded && max_items < min_items) {
      return Error(path, "maxItems is below minItems");
    }
    ExprPtr item = AnyJsonValue(options_.max_free_depth - 1);
    if (const auto it = s.find("items"); it != s.end()) {
      PIER_ASSIGN_OR_RETURN(item, Compile(*it, path + "/items", depth + 1));
    }
    ExprPtr list = SeparatedList(item, Sep(), min_items, max_items);
    return Brace('[', list, ']');
  }

  Result<ExprPtr> CompileObject(const Json& s, const std::string& path, int32_t depth) {
    struct Property {
      std::string name;
      ExprPtr value;
      bool required = false;
    };
    std::vector<Property> properties;
    if (const auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Error(path, "'properties' must be an object");
      for (const auto& [name, sub] : it->items()) {
        PIER_ASSIGN_OR_RETURN(ExprPtr value, Compile(sub, path + "/properties/" + name, depth + 1));
        properties.push_back({name, value, false});
      }
    }
    bool additional_allowed = true;
    std::optional<ExprPtr> additional_schema;
    if (const auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        additional_allowed = it->get<bool>();
      } else {
        PIER_ASSIGN_OR_RETURN(ExprPtr value,
                              Compile(*it, path + "/additionalProperties", depth + 1));
        additional_schema = value;
      }
    }
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Error(path, "'required' must be an array of strings");
      for (const Json& r : *it) {
        if (!r.is_string()) return Error(path, "'required' must be an array of strings");
        const std::string name = r.get<std::string>();
        auto p = std::find_if(properties.begin(), properties.end(),
                              [&](const Property& q) { return q.name == name; });
        if (p != properties.end()) {
          p->required = true;
          continue;
        }
        if (!additional_allowed) {
          return Error(path, "required property '" + name +
                                 "' is not in 'properties' and additionalProperties is false");
        }
        properties.push_back(
            {name, additional_schema.value_or(AnyJsonValue(options_.max_free_depth - 1)), true});
      }
    }
    if (properties.empty()) {
      if (!additional_allowed) return Literal("{}");
      if (additional_schema.has_value()) {
        const ExprPtr member = Mem(JsonString(), *additional_schema);
        return Brace('{', SeparatedList(member, Sep(), 0, kUnbounded), '}');
      }
      return AnyJsonObject(options_.max_free_depth);
    }
    // Properties in the schema's order. rest_after_one[i]: properties i.. once one has been
    // written (each optional one independently there or not, after a comma); rest_first[i]:
    // properties i.. with none written yet.
    const size_t k = properties.size();
    std::vector<ExprPtr> members(k);
    for (size_t i = 0; i < k; ++i) {
      members[i] = Mem(JsonStringLiteral(properties[i].name), properties[i].value);
    }
    std::vector<ExprPtr> rest_after_one(k + 1, Empty());
    std::vector<ExprPtr> rest_first(k + 1, Empty());
    for (size_t i = k; i-- > 0;) {
      const ExprPtr with_comma = Seq({Sep(), members[i]});
      rest_after_one[i] =
          Seq({properties[i].required ? with_comma : Optional(with_comma), rest_after_one[i + 1]});
      const ExprPtr first_here = Seq({members[i], rest_after_one[i + 1]});
      rest_first[i] = properties[i].required ? first_here : Alt({first_here, rest_first[i + 1]});
    }
    return Brace('{', rest_first[0], '}');
  }

  // The JSON punctuation between the schema's own tokens, with whitespace or (compact) none.
  ExprPtr Sep() const { return Seq({ws_, Byte(','), ws_}); }
  ExprPtr Mem(ExprPtr key, ExprPtr value) const {
    return Seq({std::move(key), ws_, Byte(':'), ws_, std::move(value)});
  }
  ExprPtr Brace(char open, ExprPtr inside, char close) const {
    return Seq({Byte(static_cast<uint8_t>(open)), ws_, std::move(inside), ws_,
                Byte(static_cast<uint8_t>(close))});
  }

  const Json& root_;
  JsonSchemaOptions options_;
  ExprPtr ws_;
  int64_t compiled_ = 0;  // subschemas compiled so far (each $ref expansion counts again)
  std::map<std::string, int32_t> ref_depth_;
};

}  // namespace

ExprPtr AnyJsonValue(int32_t depth) {
  // Built once per depth and shared: the Exprs are immutable.
  static Mutex mutex;
  static std::vector<ExprPtr> values PIER_GUARDED_BY(mutex);
  MutexLock lock(mutex);
  if (values.empty()) {
    values.push_back(Alt({JsonString(), JsonNumber({}).value(), Literal("true"), Literal("false"),
                          Literal("null")}));
  }
  depth = std::max(depth, 0);
  while (static_cast<int32_t>(values.size()) <= depth) {
    const ExprPtr inner = values.back();
    const ExprPtr object =
        Braced('{', SeparatedList(Member(JsonString(), inner), Separator(), 0, kUnbounded), '}');
    const ExprPtr array = Braced('[', SeparatedList(inner, Separator(), 0, kUnbounded), ']');
    values.push_back(Alt({values[0], object, array}));
  }
  return values[static_cast<size_t>(depth)];
}

ExprPtr AnyJsonObject(int32_t depth) {
  const ExprPtr inner = AnyJsonValue(depth - 1);
  return Braced('{', SeparatedList(Member(JsonString(), inner), Separator(), 0, kUnbounded), '}');
}

Result<ExprPtr> JsonSchemaExpr(const nlohmann::ordered_json& schema,
                               const JsonSchemaOptions& options) {
  JsonSchemaOptions effective = options;
  if (schema.is_object()) {
    const auto compact = schema.find(kCompactKeyword);
    if (compact != schema.end() && compact->is_boolean() && compact->get<bool>()) {
      effective.compact = true;
    }
  }
  SchemaCompiler compiler(schema, effective);
  PIER_ASSIGN_OR_RETURN(ExprPtr e, compiler.Compile(schema, "#", 0));
  if (IsNothing(e)) {
    return InvalidArgumentError(
        "the schema admits no value: a recursive $ref without a base case, or keywords that "
        "contradict each other");
  }
  return e;
}

}  // namespace pier::grammar
