// Attribute, item and slice access, and Python methods on values (see builtins.h).
#include <algorithm>
#include <unordered_set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {
namespace {

const std::unordered_set<std::string_view>& StrMethods() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "strip",   "lstrip",   "rstrip",  "split",        "rsplit",       "startswith", "endswith",
      "upper",   "lower",    "replace", "title",        "capitalize",   "find",       "rfind",
      "count",   "join",     "isspace", "isalnum",      "isdigit",      "isalpha",    "islower",
      "isupper", "swapcase", "zfill",   "removeprefix", "removesuffix", "splitlines", "format"};
  return *names;
}
const std::unordered_set<std::string_view>& DictMethods() {
  static const auto* names =
      new std::unordered_set<std::string_view>{"get", "items", "keys", "values", "copy"};
  return *names;
}
const std::unordered_set<std::string_view>& ListMethods() {
  static const auto* names = new std::unordered_set<std::string_view>{"index", "count", "copy"};
  return *names;
}
// Methods that mutate: present in Python, refused by the immutable sandbox when accessed.
const std::unordered_set<std::string_view>& DictMutators() {
  static const auto* names =
      new std::unordered_set<std::string_view>{"clear", "pop", "popitem", "setdefault", "update"};
  return *names;
}
const std::unordered_set<std::string_view>& ListMutators() {
  static const auto* names = new std::unordered_set<std::string_view>{
      "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  return *names;
}

std::string ObjectTypeRepr(const Value& obj) {
  if (obj.is_none()) return "None";
  return "'" + std::string(TypeName(obj)) + " object'";
}

Value MissingAttribute(const Value& obj, const std::string& name) {
  return Value::Undefined(ObjectTypeRepr(obj) + " has no attribute '" + name + "'");
}

Value BoundMethod(const Value& obj, const std::string& name) {
  return Value::Function(name,
                         [obj, name](CallArgs&& args) { return CallMethod(obj, name, args); });
}

Value Unsafe(const Value& obj, const std::string& name) {
  return Value::Undefined("access to attribute '" + name + "' of '" + std::string(TypeName(obj)) +
                          "' object is unsafe.");
}

// Python slice.indices(): clamps start/stop for `length` and `step`.
void SliceIndices(int64_t length, const Value& start_v, const Value& stop_v, int64_t step,
                  int64_t* start, int64_t* stop) {
  auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  auto clamp = [&](int64_t v, bool is_start) {
    if (v < 0) {
      v += length;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= length) {
      v = step < 0 ? length - 1 : length;
    }
    (void)is_start;
    return v;
  };
  *start = given(start_v) ? clamp(start_v.int_value(), true) : (step < 0 ? length - 1 : 0);
  *stop = given(stop_v) ? clamp(stop_v.int_value(), false) : (step < 0 ? -1 : length);
}

Result<std::string> StrArg(const Value* v, std::string_view method) {
  if (v == nullptr || !v->is_string()) {
    return InvalidArgumentError(std::string(method) + "() argument must be str");
  }
  return v->string_value();
}

// Optional chars / separator argument: null or none -> nullopt.
Result<std::optional<std::string>> OptStrArg(const Value* v, std::string_view method) {
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  PIER_ASSIGN_OR_RETURN(std::string s, StrArg(v, method));
  return std::optional<std::string>(std::move(s));
}

Result<int64_t> IntArg(const Value* v, int64_t dflt, std::string_view method) {
  if (v == nullptr) return dflt;
  if (!(v->is_int() || v->is_bool())) {
    return InvalidArgumentError(std::string(method) + "() argument must be an integer");
  }
  return v->int_value();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

// str.format with positional `{}`/`{0}` and keyword `{name}` fields (no format specs).
Result<Value> PyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return InvalidArgumentError("format(): single '{' encountered");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return UnsupportedError("format(): format specs and conversions are not supported");
    }
    const Value* value = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = field.empty() ? auto_index++ : std::stoul(field);
      if (index < args.positional.size()) value = &args.positional[index];
    } else {
      for (const auto& [key, v] : args.keyword) {
        if (key == field) value = &v;
      }
    }
    if (value == nullptr)
      return InvalidArgumentError("format(): missing argument for '{" + field + "}'");
    out += ToStr(*value);
    i = close;
  }
  return Value::String(std::move(out));
}

Result<Value> StringMethod(const std::string& s, std::string_view name, const CallArgs& args) {
  const std::string fn(name);
  if (name == "format") return PyFormat(s, args);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"chars"}));
    PIER_ASSIGN_OR_RETURN(auto chars, OptStrArg(a[0], name));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"sep", "maxsplit"}));
    PIER_ASSIGN_OR_RETURN(auto sep, OptStrArg(a[0], name));
    if (sep && sep->empty()) return InvalidArgumentError("empty separator");
    PIER_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(a[1], -1, name));
    return StringList(PySplit(s, sep, maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = PySplit(s, std::string("\n"), -1, false);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return StringList(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"prefix"}));
    if (a[0] == nullptr) return InvalidArgumentError(fn + "() takes at least 1 argument");
    std::vector<Value> candidates;
    if (a[0]->is_list() && a[0]->list().is_tuple) {
      candidates = a[0]->list().items;
    } else {
      candidates.push_back(*a[0]);
    }
    for (const Value& c : candidates) {
      PIER_ASSIGN_OR_RETURN(std::string affix, StrArg(&c, name));
      bool hit = name == "startswith"
                     ? s.compare(0, affix.size(), affix) == 0
                     : s.size() >= affix.size() &&
                           s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "swapcase") return Value::String(PySwapCase(s));
  if (name == "isspace") return Value::Bool(PyIsSpace(s));
  if (name == "isalnum") return Value::Bool(PyIsAlnum(s));
  if (name == "isdigit") return Value::Bool(PyIsDigit(s));
  if (name == "isalpha") return Value::Bool(PyIsAlpha(s));
  if (name == "islower") return Value::Bool(PyIsLower(s));
  if (name == "isupper") return Value::Bool(PyIsUpper(s));
  if (name == "replace") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"old", "new", "count"}));
    PIER_ASSIGN_OR_RETURN(std::string old_text, StrArg(a[0], name));
    PIER_ASSIGN_OR_RETURN(std::string new_text, StrArg(a[1], name));
    PIER_ASSIGN_OR_RETURN(int64_t count, IntArg(a[2], -1, name));
    return Value::String(PyReplace(s, old_text, new_text, count));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"sub"}));
    PIER_ASSIGN_OR_RETURN(std::string sub, StrArg(a[0], name));
    if (name == "count") return Value::Int(PyCount(s, sub));
    return Value::Int(PyFind(s, sub, name == "rfind"));
  }
  if (name == "join") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"iterable"}));
    if (a[0] == nullptr) return InvalidArgumentError("join() takes exactly one argument");
    PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return InvalidArgumentError("sequence item " + std::to_string(i) +
                                    ": expected str instance, " + std::string(TypeName(items[i])) +
                                    " found");
      }
      if (i > 0) out += s;
      out += items[i].string_value();
    }
    return Value::String(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"affix"}));
    PIER_ASSIGN_OR_RETURN(std::string affix, StrArg(a[0], name));
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) {
      return Value::String(s.substr(affix.size()));
    }
    if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::String(s.substr(0, s.size() - affix.size()));
    }
    return Value::String(s);
  }
  if (name == "zfill") {
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"width"}));
    PIER_ASSIGN_OR_RETURN(int64_t width, IntArg(a[0], 0, name));
    int64_t len = static_cast<int64_t>(CodepointCount(s));
    width = std::min<int64_t>(width, 1 << 20);
    if (width <= len) return Value::String(s);
    size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value::String(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') +
                         s.substr(sign));
  }
  return InvalidArgumentError("'str' object has no attribute '" + fn + "'");
}

}  // namespace

bool IsKnownMethod(std::string_view name) {
  return name == "cycle" || StrMethods().count(name) || DictMethods().count(name) ||
         ListMethods().count(name) || DictMutators().count(name) || ListMutators().count(name);
}

Value GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case ValueKind::kNamespace: {
      const Value* v = obj.dict().Find(name);
      return v != nullptr ? *v : MissingAttribute(obj, name);
    }
    case ValueKind::kDict: {
      if (DictMethods().count(name)) return BoundMethod(obj, name);
      if (DictMutators().count(name)) return Unsafe(obj, name);
      const Value* v = obj.dict().Find(name);
      return v != nullptr ? *v : MissingAttribute(obj, name);
    }
    case ValueKind::kString:
      if (StrMethods().count(name)) return BoundMethod(obj, name);
      return MissingAttribute(obj, name);
    case ValueKind::kList:
      if (obj.is_generator()) return MissingAttribute(obj, name);
      if (ListMethods().count(name)) return BoundMethod(obj, name);
      if (ListMutators().count(name)) return Unsafe(obj, name);
      return MissingAttribute(obj, name);
    default:
      return MissingAttribute(obj, name);
  }
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_generator()) return Value::Undefined("'generator' object is not subscriptable");
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.int_value();
    if (obj.is_list()) {
      const auto& items = obj.list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return items[static_cast<size_t>(index)];
    } else {
      std::vector<size_t> offsets = CodepointOffsets(obj.string_value());
      int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      if (index < 0) index += n;
      if (index >= 0 && index < n) {
        size_t i = static_cast<size_t>(index);
        return Value::String(obj.string_value().substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
    }
    return Value::Undefined(ObjectTypeRepr(obj) + " has no element " +
                            std::to_string(key.int_value()));
  }
  if (obj.is_dict()) {
    std::optional<std::string> encoded = EncodeKey(key);
    const Value* v = encoded ? obj.dict().Find(*encoded) : nullptr;
    if (v != nullptr) return *v;
    if (!key.is_string())
      return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + Repr(key));
  }
  // Jinja falls back to attribute lookup for string keys (e.g. ns['attr'], s['upper']).
  if (key.is_string()) return GetAttribute(obj, key.string_value());
  return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + Repr(key));
}

Result<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                       const Value& step_v) {
  for (const Value* bound : {&start, &stop, &step_v}) {
    if (!bound->is_none() && !bound->is_undefined() && !bound->is_int() && !bound->is_bool()) {
      return InvalidArgumentError("slice indices must be integers or None");
    }
  }
  int64_t step = (step_v.is_none() || step_v.is_undefined()) ? 1 : step_v.int_value();
  if (step == 0) return InvalidArgumentError("slice step cannot be zero");
  if ((!obj.is_list() && !obj.is_string()) || obj.is_generator()) {
    return Value::Undefined(ObjectTypeRepr(obj) + " cannot be sliced");
  }
  std::vector<size_t> offsets;
  int64_t length;
  if (obj.is_list()) {
    length = static_cast<int64_t>(obj.list().items.size());
  } else {
    offsets = CodepointOffsets(obj.string_value());
    length = static_cast<int64_t>(offsets.size()) - 1;
  }
  int64_t begin = 0;
  int64_t end = 0;
  SliceIndices(length, start, stop, step, &begin, &end);
  std::vector<int64_t> picks;
  for (int64_t i = begin; step > 0 ? i < end : i > end; i += step) picks.push_back(i);
  if (obj.is_list()) {
    std::vector<Value> items;
    items.reserve(picks.size());
    for (int64_t i : picks) items.push_back(obj.list().items[static_cast<size_t>(i)]);
    return Value::List(std::move(items), obj.list().is_tuple);
  }
  std::string out;
  const std::string& s = obj.string_value();
  for (int64_t i : picks) {
    size_t u = static_cast<size_t>(i);
    out.append(s, offsets[u], offsets[u + 1] - offsets[u]);
  }
  return Value::String(std::move(out));
}

Result<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args) {
  const std::string fn(name);
  if (obj.is_string()) return StringMethod(obj.string_value(), name, args);
  if (obj.is_dict()) {
    if (name == "get") {
      PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"key", "default"}));
      if (a[0] == nullptr) return InvalidArgumentError("get expected at least 1 argument, got 0");
      std::optional<std::string> key = EncodeKey(*a[0]);
      const Value* v = key ? obj.dict().Find(*key) : nullptr;
      if (v != nullptr) return *v;
      return a[1] != nullptr ? *a[1] : Value::None();
    }
    if (!args.positional.empty() || !args.keyword.empty()) {
      return InvalidArgumentError("dict." + fn + "() takes no arguments");
    }
    if (name == "copy") return obj;
    std::vector<Value> out;
    for (const auto& [key, value] : obj.dict().entries()) {
      if (name == "keys") {
        out.push_back(DecodeKey(key));
      } else if (name == "values") {
        out.push_back(value);
      } else {
        out.push_back(Value::List({DecodeKey(key), value}, /*is_tuple=*/true));
      }
    }
    return Value::List(std::move(out));
  }
  if (obj.is_list()) {
    if (name == "copy") return obj;
    PIER_ASSIGN_OR_RETURN(auto a, BindArgs(fn, args, {"value"}));
    if (a[0] == nullptr)
      return InvalidArgumentError("list." + fn + "() takes exactly one argument");
    const auto& items = obj.list().items;
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!Equals(items[i], *a[0])) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") return InvalidArgumentError(Repr(*a[0]) + " is not in list");
    return Value::Int(count);
  }
  return InvalidArgumentError("'" + std::string(TypeName(obj)) + "' object has no method '" + fn +
                              "'");
}

}  // namespace pier::tokenizer::jinja
