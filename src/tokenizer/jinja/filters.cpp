// Jinja filters and tests (see builtins.h).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {
namespace {

const std::unordered_set<std::string_view>& TestNames() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "boolean", "callable",  "defined", "divisibleby", "eq",     "equalto",     "escaped",
      "even",    "false",     "float",   "ge",          "gt",     "greaterthan", "in",
      "integer", "iterable",  "le",      "lower",       "lt",     "lessthan",    "mapping",
      "ne",      "none",      "number",  "odd",         "sameas", "sequence",    "string",
      "true",    "undefined", "upper",   "==",          "!=",     "<",           "<=",
      ">",       ">="};
  return *names;
}

Status TypeError(const std::string& message) { return InvalidArgumentError(message); }

// Jinja's make_attrgetter: "a.b.0" looks up each part as an item (digits as indices).
Value AttrPath(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_undefined()) return current;
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    Value key = digits ? Value::Int(std::stoll(part)) : Value::String(part);
    current = GetItem(current, key);
    if (current.is_undefined() && !digits) current = GetAttribute(item, part);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

Result<std::string> RequireString(const Value* v, std::string_view what) {
  if (v == nullptr || !v->is_string()) {
    return TypeError(std::string(what) + " must be a string");
  }
  return v->string_value();
}

Result<int64_t> RequireInt(const Value* v, std::string_view what) {
  if (v == nullptr || !(v->is_int() || v->is_bool())) {
    return TypeError(std::string(what) + " must be an integer");
  }
  return v->int_value();
}

// Sort key: strings lowercased unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.string_value()));
  return v;
}

Status SortValues(std::vector<Value>* items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    Result<int> c = reverse ? Compare(keys[b], keys[a]) : Compare(keys[a], keys[b]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  PIER_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(items->size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return Status::Ok();
}

// Python int(str, base) with Jinja's fallback through float; nullopt if unparseable.
std::optional<int64_t> ParseIntLike(const std::string& text, int64_t base) {
  std::string s = PyStrip(text, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (*end == '\0' && errno == 0) return v;
  char* fend = nullptr;
  double d = std::strtod(s.c_str(), &fend);
  if (*fend == '\0' && std::isfinite(d) && std::abs(d) < 9.2e18) return static_cast<int64_t>(d);
  return std::nullopt;
}

// Jinja's do_title: capitalize each word split at whitespace, '-', '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  std::vector<size_t> offsets = CodepointOffsets(s);
  bool word_start = true;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    std::string cp = s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    bool separator = cp == "-" || cp == "(" || cp == "{" || cp == "[" || cp == "<" || PyIsSpace(cp);
    if (separator) {
      out += cp;
      word_start = true;
    } else {
      out += word_start ? PyUpper(cp) : PyLower(cp);
      word_start = false;
    }
  }
  return out;
}

std::string EnsureAscii(const std::string& json) {
  std::string out;
  std::vector<size_t> offsets = CodepointOffsets(json);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    size_t len = offsets[i + 1] - offsets[i];
    if (len == 1) {
      out.push_back(json[offsets[i]]);
      continue;
    }
    // Decode the multi-byte sequence.
    const auto* b = reinterpret_cast<const unsigned char*>(json.data() + offsets[i]);
    uint32_t cp = len == 2   ? ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu)
                  : len == 3 ? ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu)
                             : ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) |
                                   ((b[2] & 0x3Fu) << 6) | (b[3] & 0x3Fu);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    out += buf;
  }
  return out;
}

Result<Value> SelectOrReject(std::string_view filter, const Value& input, const CallArgs& args,
                             bool select, bool by_attribute) {
  // Jinja yields nothing for a falsy input (None, "", []), without iterating it.
  if (!Truthy(input)) return Value::Generator({});
  PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  size_t first_test_arg = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) return TypeError(std::string(filter) + ": missing attribute name");
    PIER_ASSIGN_OR_RETURN(attribute, RequireString(&args.positional[0], "attribute"));
    first_test_arg = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first_test_arg) {
    PIER_ASSIGN_OR_RETURN(test, RequireString(&args.positional[first_test_arg], "test name"));
    if (!IsKnownTest(test))
      return UnsupportedError(std::string(filter) + ": unsupported test '" + test + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first_test_arg) + 1,
                                args.positional.end());
  }
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = by_attribute ? AttrPath(item, attribute) : item;
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      PIER_ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Result<Value> MapFilter(const Value& input, const CallArgs& args) {
  if (!Truthy(input)) return Value::Generator({});
  PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [key, value] : args.keyword) {
    if (key == "attribute") {
      attribute = &value;
    } else if (key == "default") {
      dflt = &value;
    } else {
      return TypeError("map: unexpected keyword argument '" + key + "'");
    }
  }
  if (attribute != nullptr) {
    PIER_ASSIGN_OR_RETURN(std::string path, RequireString(attribute, "map attribute"));
    for (const Value& item : items) {
      Value v = AttrPath(item, path);
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::Generator(std::move(out));
  }
  if (args.positional.empty()) return TypeError("map: missing filter name or attribute");
  PIER_ASSIGN_OR_RETURN(std::string filter, RequireString(&args.positional[0], "filter name"));
  if (!IsKnownFilter(filter)) return UnsupportedError("map: unsupported filter '" + filter + "'");
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  for (const Value& item : items) {
    PIER_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, filter_args));
    out.push_back(std::move(v));
  }
  return Value::Generator(std::move(out));
}

Result<Value> MinMax(const Value& input, const CallArgs& args, bool want_max) {
  PIER_ASSIGN_OR_RETURN(auto bound,
                        BindArgs(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  bool case_sensitive = bound[0] != nullptr && Truthy(*bound[0]);
  PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  std::string attribute =
      bound[1] != nullptr && bound[1]->is_string() ? bound[1]->string_value() : "";
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value a = SortKey(attribute.empty() ? items[i] : AttrPath(items[i], attribute), case_sensitive);
    Value b =
        SortKey(attribute.empty() ? items[best] : AttrPath(items[best], attribute), case_sensitive);
    PIER_ASSIGN_OR_RETURN(int c, Compare(a, b));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

// Every filter: its names (aliases share one implementation) and what it does. ApplyFilter
// runs them and the parser accepts exactly these names.
struct FilterCall {
  std::string_view name;  // as written, for filters whose aliases differ (first / last)
  const std::string& fn;  // the same, for messages
  const Value& input;
  const CallArgs& args;
};
using FilterFn = Result<Value> (*)(const FilterCall& call);

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string_view, FilterFn>;
    const auto add = [t](std::initializer_list<std::string_view> names, FilterFn fn) {
      for (std::string_view name : names) t->emplace(name, fn);
    };
    add({"trim"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"chars"}));
      std::optional<std::string> chars;
      if (a[0] != nullptr && !a[0]->is_none()) chars = ToStr(*a[0]);
      return Value::String(PyStrip(ToStr(input), chars, true, true));
    });
    add({"tojson"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(
          auto a, BindArgs(fn, args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
      int indent = -1;
      if (a[1] != nullptr && !a[1]->is_none()) {
        PIER_ASSIGN_OR_RETURN(int64_t n, RequireInt(a[1], "tojson indent"));
        indent = static_cast<int>(std::clamp<int64_t>(n, 0, 64));
      }
      if (a[2] != nullptr && !a[2]->is_none())
        return UnsupportedError("tojson: separators are not supported");
      PIER_ASSIGN_OR_RETURN(std::string json,
                            ToJson(input, indent, a[3] != nullptr && Truthy(*a[3])));
      if (a[0] != nullptr && Truthy(*a[0])) json = EnsureAscii(json);
      return Value::String(std::move(json));
    });
    add({"length", "count"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      switch (input.kind()) {
        case ValueKind::kUndefined:
          return Value::Int(0);
        case ValueKind::kString:
          return Value::Int(static_cast<int64_t>(CodepointCount(input.string_value())));
        case ValueKind::kList:
          if (input.is_generator()) return TypeError("object of type 'generator' has no len()");
          return Value::Int(static_cast<int64_t>(input.list().items.size()));
        case ValueKind::kDict:
          return Value::Int(static_cast<int64_t>(input.dict().size()));
        default:
          return TypeError("object of type '" + std::string(TypeName(input)) + "' has no len()");
      }
    });
    add({"default", "d"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"default_value", "boolean"}));
      bool boolean = a[1] != nullptr && Truthy(*a[1]);
      if (input.is_undefined() || (boolean && !Truthy(input))) {
        return a[0] != nullptr ? *a[0] : Value::String("");
      }
      return input;
    });
    add({"join"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"d", "attribute"}));
      std::string sep = a[0] != nullptr ? ToStr(*a[0]) : "";
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += sep;
        out += ToStr(a[1] != nullptr ? AttrPath(items[i], ToStr(*a[1])) : items[i]);
      }
      return Value::String(std::move(out));
    });
    add({"first", "last"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      if (name == "last" && input.is_generator()) {
        return TypeError("'generator' object is not reversible");
      }
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      if (items.empty()) return Value::Undefined("No " + fn + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    });
    add({"upper"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return Value::String(PyUpper(ToStr(input)));
    });
    add({"lower"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return Value::String(PyLower(ToStr(input)));
    });
    add({"capitalize"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return Value::String(PyCapitalize(ToStr(input)));
    });
    add({"title"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return Value::String(JinjaTitle(ToStr(input)));
    });
    add({"string"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return Value::String(ToStr(input));
    });
    add({"safe"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return input.is_markup() ? input : Value::Markup(ToStr(input));
    });
    add({"escape", "e"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return input.is_markup() ? input : Value::Markup(HtmlEscape(ToStr(input)));
    });
    add({"replace"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"old", "new", "count"}));
      if (a[0] == nullptr || a[1] == nullptr)
        return TypeError("replace() needs old and new strings");
      int64_t count = -1;
      if (a[2] != nullptr && !a[2]->is_none()) {
        PIER_ASSIGN_OR_RETURN(count, RequireInt(a[2], "replace count"));
      }
      return Value::String(PyReplace(ToStr(input), ToStr(*a[0]), ToStr(*a[1]), count));
    });
    add({"int"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"default", "base"}));
      Value dflt = a[0] != nullptr ? *a[0] : Value::Int(0);
      int64_t base = 10;
      if (a[1] != nullptr) {
        PIER_ASSIGN_OR_RETURN(base, RequireInt(a[1], "int base"));
      }
      if (input.is_int() || input.is_bool()) return Value::Int(input.int_value());
      if (input.is_float()) {
        double d = input.float_value();
        if (!std::isfinite(d) || std::abs(d) >= 9.2e18) return dflt;
        return Value::Int(static_cast<int64_t>(d));
      }
      if (input.is_string()) {
        std::optional<int64_t> v = ParseIntLike(input.string_value(), base);
        return v ? Value::Int(*v) : dflt;
      }
      return dflt;
    });
    add({"float"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"default"}));
      Value dflt = a[0] != nullptr ? *a[0] : Value::Float(0.0);
      if (input.is_number()) return Value::Float(input.float_value());
      if (input.is_string()) {
        std::string s = PyStrip(input.string_value(), std::nullopt, true, true);
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0') return Value::Float(d);
      }
      return dflt;
    });
    add({"list"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      return Value::List(std::move(items));
    });
    add({"items"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      if (input.is_undefined()) return Value::List({});
      if (!input.is_dict()) return TypeError("Can only get item pairs from a mapping.");
      std::vector<Value> pairs;
      for (const auto& [key, value] : input.dict().entries()) {
        pairs.push_back(Value::List({DecodeKey(key), value}, /*is_tuple=*/true));
      }
      return Value::Generator(std::move(pairs));
    });
    add({"dictsort"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"case_sensitive", "by", "reverse"}));
      if (!input.is_dict()) return TypeError("dictsort: expected a mapping");
      bool case_sensitive = a[0] != nullptr && Truthy(*a[0]);
      bool by_value = a[1] != nullptr && ToStr(*a[1]) == "value";
      std::vector<Value> pairs;
      std::vector<Value> keys;
      for (const auto& [key, value] : input.dict().entries()) {
        pairs.push_back(Value::List({DecodeKey(key), value}, true));
        keys.push_back(SortKey(by_value ? value : DecodeKey(key), case_sensitive));
      }
      PIER_RETURN_IF_ERROR(SortValues(&pairs, keys, a[2] != nullptr && Truthy(*a[2])));
      return Value::List(std::move(pairs));
    });
    add({"sort"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"reverse", "case_sensitive", "attribute"}));
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      bool case_sensitive = a[1] != nullptr && Truthy(*a[1]);
      std::vector<Value> keys;
      for (const Value& item : items) {
        keys.push_back(
            SortKey(a[2] != nullptr ? AttrPath(item, ToStr(*a[2])) : item, case_sensitive));
      }
      PIER_RETURN_IF_ERROR(SortValues(&items, keys, a[0] != nullptr && Truthy(*a[0])));
      return Value::List(std::move(items));
    });
    add({"unique"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"case_sensitive", "attribute"}));
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      bool case_sensitive = a[0] != nullptr && Truthy(*a[0]);
      std::vector<Value> out;
      std::vector<Value> seen;
      for (const Value& item : items) {
        Value key = SortKey(a[1] != nullptr ? AttrPath(item, ToStr(*a[1])) : item, case_sensitive);
        bool dup =
            std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); });
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::Generator(std::move(out));
    });
    add({"reverse"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      if (input.is_string()) {
        PIER_ASSIGN_OR_RETURN(std::vector<Value> chars, Iterate(input));
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->string_value();
        return Value::String(std::move(out));
      }
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      std::reverse(items.begin(), items.end());
      return Value::Generator(std::move(items));
    });
    add({"selectattr", "rejectattr"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return SelectOrReject(name, input, args, name == "selectattr", true);
    });
    add({"select", "reject"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return SelectOrReject(name, input, args, name == "select", false);
    });
    add({"map"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return MapFilter(input, args);
    });
    add({"abs"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      if (input.is_float()) return Value::Float(std::abs(input.float_value()));
      if (input.is_int() || input.is_bool()) {
        if (input.int_value() == INT64_MIN) return TypeError("integer overflow in abs");
        return Value::Int(std::abs(input.int_value()));
      }
      return TypeError("bad operand type for abs(): '" + std::string(TypeName(input)) + "'");
    });
    add({"round"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"precision", "method"}));
      if (!input.is_number()) return TypeError("round: expected a number");
      int64_t precision = 0;
      if (a[0] != nullptr) {
        PIER_ASSIGN_OR_RETURN(precision, RequireInt(a[0], "round precision"));
      }
      std::string method = a[1] != nullptr ? ToStr(*a[1]) : "common";
      double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
      double v = input.float_value();
      if (method == "floor") return Value::Float(std::floor(v * scale) / scale);
      if (method == "ceil") return Value::Float(std::ceil(v * scale) / scale);
      if (method != "common") return TypeError("method must be common, ceil or floor");
      // Python's round(): halves go to the even neighbour.
      double scaled = v * scale;
      double r = std::nearbyint(scaled);
      return Value::Float(precision == 0 ? r : r / scale);
    });
    add({"sum"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"attribute", "start"}));
      PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(input));
      Value total = a[1] != nullptr ? *a[1] : Value::Int(0);
      for (const Value& raw : items) {
        Value item = a[0] != nullptr ? AttrPath(raw, ToStr(*a[0])) : raw;
        if (!total.is_number() || !item.is_number())
          return TypeError("sum: unsupported operand types");
        if (total.is_float() || item.is_float()) {
          total = Value::Float(total.float_value() + item.float_value());
        } else {
          int64_t out = 0;
          if (__builtin_add_overflow(total.int_value(), item.int_value(), &out)) {
            return TypeError("integer overflow in sum");
          }
          total = Value::Int(out);
        }
      }
      return total;
    });
    add({"max", "min"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      return MinMax(input, args, name == "max");
    });
    add({"indent"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"width", "first", "blank"}));
      std::string indentation = "    ";
      if (a[0] != nullptr) {
        if (a[0]->is_string()) {
          indentation = a[0]->string_value();
        } else {
          PIER_ASSIGN_OR_RETURN(int64_t width, RequireInt(a[0], "indent width"));
          indentation.assign(static_cast<size_t>(std::clamp<int64_t>(width, 0, 256)), ' ');
        }
      }
      bool first = a[1] != nullptr && Truthy(*a[1]);
      bool blank = a[2] != nullptr && Truthy(*a[2]);
      std::string s = ToStr(input) + "\n";
      std::vector<std::string> lines = PySplit(s, std::string("\n"), -1, false);
      lines.pop_back();  // splitlines() drops the piece after the final newline
      std::string out = lines.empty() ? "" : lines[0];
      for (size_t i = 1; i < lines.size(); ++i) {
        out += "\n";
        if (blank || !lines[i].empty()) out += indentation;
        out += lines[i];
      }
      if (first) out = indentation + out;
      return Value::String(std::move(out));
    });
    add({"center"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"width"}));
      int64_t width = 80;
      if (a[0] != nullptr) {
        PIER_ASSIGN_OR_RETURN(width, RequireInt(a[0], "center width"));
      }
      std::string s = ToStr(input);
      int64_t len = static_cast<int64_t>(CodepointCount(s));
      width = std::min<int64_t>(width, 1 << 20);
      if (width <= len) return Value::String(s);
      int64_t pad = width - len;
      int64_t left = pad / 2 + (pad & width & 1);
      return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                           std::string(static_cast<size_t>(pad - left), ' '));
    });
    add({"wordcount"}, [](const FilterCall& call) -> Result<Value> {
      [[maybe_unused]] const auto& [name, fn, input, args] = call;
      std::string s = ToStr(input);
      std::vector<size_t> offsets = CodepointOffsets(s);
      int64_t words = 0;
      bool in_word = false;
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        std::string cp = s.substr(offsets[i], offsets[i + 1] - offsets[i]);
        bool word_char = cp == "_" || PyIsAlnum(cp);
        if (word_char && !in_word) ++words;
        in_word = word_char;
      }
      return Value::Int(words);
    });
    return t;
  }();
  return *table;
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return Filters().count(name) != 0; }
bool IsKnownTest(std::string_view name) { return TestNames().count(name) != 0; }

Result<std::vector<const Value*>> BindArgs(std::string_view function, const CallArgs& args,
                                           const std::vector<std::string_view>& params) {
  std::vector<const Value*> bound(params.size(), nullptr);
  if (args.positional.size() > params.size()) {
    return TypeError(std::string(function) + "() takes at most " + std::to_string(params.size()) +
                     " arguments (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return TypeError(std::string(function) + "() got an unexpected keyword argument '" + key +
                       "'");
    }
    size_t i = static_cast<size_t>(it - params.begin());
    if (bound[i] != nullptr) {
      return TypeError(std::string(function) + "() got multiple values for argument '" + key + "'");
    }
    bound[i] = &value;
  }
  return bound;
}

Result<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return std::vector<Value>{};
    case ValueKind::kList:
      return value.list().items;
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      std::vector<Value> keys;
      for (const auto& entry : value.dict().entries()) keys.push_back(DecodeKey(entry.first));
      return keys;
    }
    case ValueKind::kString: {
      const std::string& s = value.string_value();
      std::vector<size_t> offsets = CodepointOffsets(s);
      std::vector<Value> chars;
      chars.reserve(offsets.size());
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::String(s.substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return chars;
    }
    default:
      return TypeError("'" + std::string(TypeName(value)) + "' object is not iterable");
  }
}

Result<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args) {
  const std::string fn(name);
  const auto it = Filters().find(name);
  if (it == Filters().end()) return UnsupportedError("No filter named '" + fn + "' found.");
  return it->second(FilterCall{name, fn, input, args});
}

Result<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args) {
  if (!IsKnownTest(name))
    return UnsupportedError("No test named '" + std::string(name) + "' found.");
  auto arg = [&]() -> Result<const Value*> {
    if (args.positional.size() != 1 || !args.keyword.empty()) {
      return TypeError("test '" + std::string(name) + "' takes exactly one argument");
    }
    return &args.positional[0];
  };
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.bool_value();
  if (name == "false") return input.is_bool() && !input.bool_value();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_dict();
  if (name == "iterable") {
    return input.is_undefined() || input.is_string() || input.is_list() || input.is_dict();
  }
  if (name == "sequence") {
    return input.is_string() || (input.is_list() && !input.is_generator()) || input.is_dict();
  }
  if (name == "callable") return input.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return PyIsLower(ToStr(input));
  if (name == "upper") return PyIsUpper(ToStr(input));
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!(input.is_int() || input.is_bool()))
      return TypeError("test '" + std::string(name) + "' needs an integer");
    int64_t v = input.int_value();
    if (name == "odd") return (v % 2 + 2) % 2 == 1;
    if (name == "even") return v % 2 == 0;
    PIER_ASSIGN_OR_RETURN(const Value* d, arg());
    PIER_ASSIGN_OR_RETURN(int64_t divisor, RequireInt(d, "divisibleby argument"));
    if (divisor == 0) return TypeError("integer modulo by zero");
    if (divisor == -1) return true;
    return v % divisor == 0;
  }
  if (name == "sameas") {
    PIER_ASSIGN_OR_RETURN(const Value* other, arg());
    if (input.kind() != other->kind()) return false;
    if (input.is_list()) return &input.list() == &other->list();
    if (input.is_dict() || input.is_namespace()) return &input.dict() == &other->dict();
    return Equals(input, *other);
  }
  if (name == "in") {
    PIER_ASSIGN_OR_RETURN(const Value* container, arg());
    if (container->is_string()) {
      if (!input.is_string()) return TypeError("'in <string>' requires string as left operand");
      return container->string_value().find(input.string_value()) != std::string::npos;
    }
    if (container->is_dict()) {
      std::optional<std::string> key = EncodeKey(input);
      return key && container->dict().Find(*key) != nullptr;
    }
    if (container->is_list()) {
      for (const Value& item : container->list().items) {
        if (Equals(item, input)) return true;
      }
      return false;
    }
    if (container->is_undefined()) return false;
    return TypeError("argument of type '" + std::string(TypeName(*container)) +
                     "' is not iterable");
  }
  PIER_ASSIGN_OR_RETURN(const Value* other, arg());
  if (name == "eq" || name == "equalto" || name == "==") return Equals(input, *other);
  if (name == "ne" || name == "!=") return !Equals(input, *other);
  PIER_ASSIGN_OR_RETURN(int c, Compare(input, *other));
  if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
  if (name == "ge" || name == ">=") return c >= 0;
  return UnsupportedError("unsupported test '" + std::string(name) + "'");
}

}  // namespace pier::tokenizer::jinja
