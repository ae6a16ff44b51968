// jinja::Value: the dynamically typed value of Pier's Jinja engine (chat templates).
//
// Values follow Python's data model as Jinja2 exposes it to templates: undefined, None,
// bool, int (64-bit; overflow is an error, not a bigint), float, str (UTF-8, indexed by code
// point), list, dict (insertion-ordered, string keys), namespace (the only mutable object) and
// callables (built-in functions, macros, bound methods). Lists and dicts are immutable, as in
// transformers' ImmutableSandboxedEnvironment, so copies share storage.
//
// Ownership: a Value owns what it holds (shared, immutable payloads). Thread-safety: Values are
// created and used by one render at a time; sharing one between threads is not supported
// (namespaces are mutable and reference counts are not the point of this class).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace pier::tokenizer::jinja {

class Value;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (1, 2)
  // The lazy iterator a filter such as select/map returns in Jinja: iterable, always truthy,
  // but without len(), indexing or JSON form. Materialized here; the flag keeps those rules.
  bool is_generator = false;
};

// Insertion-ordered map with Python dict semantics. Keys are stored encoded as strings:
// a str key as itself, other hashable keys (int, float, bool, None) in a tagged form that no
// str key has (see EncodeKey / DecodeKey). Names (attributes, variables) are plain strings.
class DictData {
 public:
  const Value* Find(std::string_view key) const;
  // Replaces the value of an existing key in place, or appends a new key.
  void Set(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  size_t Position(std::string_view key) const;  // entries_.size() when absent

  // Small dicts (messages, loop) are searched linearly; larger ones get a hash index.
  static constexpr size_t kLinearSearchMax = 8;
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> entries_ position, when indexed
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Result<Value>(CallArgs&&)> fn;
};

struct UndefinedData {
  std::string hint;  // the error message if the value is used: "'x' is undefined"
};
struct NoneData {};

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable,
};

class Value {
 public:
  Value() : data_(UndefinedData{}) {}

  static Value Undefined(std::string hint) { return Make<0>(UndefinedData{std::move(hint)}); }
  static Value None() { return Make<1>(NoneData{}); }
  static Value Bool(bool b) { return Make<2>(b); }
  static Value Int(int64_t i) { return Make<3>(i); }
  static Value Float(double d) { return Make<4>(d); }
  static Value String(std::string s) { return Make<5>(std::move(s)); }
  // A string marked safe (markupsafe.Markup, from |safe or |escape): `+` with a plain string
  // HTML-escapes the plain side, as in Jinja2.
  static Value Markup(std::string s) {
    Value v = Make<5>(std::move(s));
    v.markup_ = true;
    return v;
  }
  bool is_markup() const { return markup_; }
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Generator(std::vector<Value> items);
  bool is_generator() const { return is_list() && list().is_generator; }
  static Value Dict(DictData dict);
  static Value Namespace(DictData attributes);
  static Value Function(std::string name, std::function<Result<Value>(CallArgs&&)> fn);

  ValueKind kind() const { return static_cast<ValueKind>(data_.index()); }
  bool is_undefined() const { return kind() == ValueKind::kUndefined; }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_bool() const { return kind() == ValueKind::kBool; }
  bool is_int() const { return kind() == ValueKind::kInt; }
  bool is_float() const { return kind() == ValueKind::kFloat; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind() == ValueKind::kString; }
  bool is_list() const { return kind() == ValueKind::kList; }
  bool is_dict() const { return kind() == ValueKind::kDict; }
  bool is_namespace() const { return kind() == ValueKind::kNamespace; }
  bool is_callable() const { return kind() == ValueKind::kCallable; }

  // Accessors; calling the wrong one is a bug (PIER_CHECK).
  bool bool_value() const;
  int64_t int_value() const;   // also accepts bool (Python: bool is an int)
  double float_value() const;  // any number
  const std::string& string_value() const;
  const ListData& list() const;
  const DictData& dict() const;  // dict or namespace attributes
  DictData& mutable_namespace() const;
  const Callable& callable() const;
  const std::string& undefined_hint() const;

 private:
  using Data = std::variant<UndefinedData, NoneData, bool, int64_t, double, std::string,
                            std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                            std::shared_ptr<DictData>, std::shared_ptr<const Callable>>;
  // Builds the alternative at `kIndex` (the ValueKind order) without implicit conversions.
  template <size_t kIndex, typename T>
  static Value Make(T&& v) {
    Value value;
    value.data_.template emplace<kIndex>(std::forward<T>(v));
    return value;
  }

  Data data_;
  bool markup_ = false;
};

// Dict key encoding. EncodeKey: nullopt for unhashable values (list, dict, undefined...).
std::optional<std::string> EncodeKey(const Value& key);
std::string EncodeStringKey(std::string key);
Value DecodeKey(const std::string& encoded);

// Python type names, as they appear in error messages: 'str', 'int', 'list', 'dict'...
std::string_view TypeName(const Value& value);

// Python truthiness (undefined is false).
bool Truthy(const Value& value);

// Python str(): strings as-is, containers as their repr, None -> "None", undefined -> "".
std::string ToStr(const Value& value);
// Python repr(): strings quoted the way Python chooses.
std::string Repr(const Value& value);
// Python's float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string FormatFloat(double d);

// Python ==. Numbers compare across int/float/bool; containers deeply; undefined == undefined.
bool Equals(const Value& a, const Value& b);
// Python ordering for < <= > >=: -1, 0 or 1. INVALID_ARGUMENT for unorderable types.
Result<int> Compare(const Value& a, const Value& b);

// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys), which is what
// transformers' tojson filter does. indent < 0 means None (one line, ", " and ": ").
// INVALID_ARGUMENT for values JSON cannot hold (undefined, namespace, callable).
Result<std::string> ToJson(const Value& value, int indent, bool sort_keys);

// JSON -> Value: objects keep their key order, integers that fit int64 stay ints.
// INVALID_ARGUMENT when nested deeper than kMaxJsonDepth.
inline constexpr int kMaxJsonDepth = 256;
Result<Value> FromJson(const nlohmann::ordered_json& json);

}  // namespace pier::tokenizer::jinja
