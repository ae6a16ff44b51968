#include "tokenizer/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {

size_t DictData::Position(std::string_view key) const {
  if (index_.empty()) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].first == key) return i;
    }
    return entries_.size();
  }
  auto it = index_.find(std::string(key));
  return it == index_.end() ? entries_.size() : it->second;
}

const Value* DictData::Find(std::string_view key) const {
  size_t i = Position(key);
  return i < entries_.size() ? &entries_[i].second : nullptr;
}

void DictData::Set(std::string key, Value value) {
  size_t i = Position(key);
  if (i < entries_.size()) {
    entries_[i].second = std::move(value);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (entries_.size() > kLinearSearchMax) {
    if (index_.empty()) {
      for (size_t j = 0; j < entries_.size(); ++j) index_.emplace(entries_[j].first, j);
    } else {
      index_.emplace(entries_.back().first, entries_.size() - 1);
    }
  }
}

// Tagged keys start with '\0' and a type letter; a str key starting with '\0' gets one more.
namespace {
std::string KeyTag(char type) { return std::string(1, '\0') + type; }
}  // namespace

std::string EncodeStringKey(std::string key) {
  if (!key.empty() && key[0] == '\0') key.insert(key.begin(), '\0');
  return key;
}

std::optional<std::string> EncodeKey(const Value& key) {
  switch (key.kind()) {
    case ValueKind::kString:
      return EncodeStringKey(key.string_value());
    case ValueKind::kBool:
    case ValueKind::kInt:
      return KeyTag('i') + std::to_string(key.int_value());
    case ValueKind::kFloat: {
      double d = key.float_value();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e18) {
        return KeyTag('i') + std::to_string(static_cast<int64_t>(d));
      }
      return KeyTag('f') + FormatFloat(d);
    }
    case ValueKind::kNone:
      return KeyTag('n');
    default:
      return std::nullopt;
  }
}

Value DecodeKey(const std::string& encoded) {
  if (encoded.empty() || encoded[0] != '\0') return Value::String(encoded);
  if (encoded.size() >= 2 && encoded[1] == '\0') return Value::String(encoded.substr(1));
  if (encoded.size() >= 2 && encoded[1] == 'i') return Value::Int(std::stoll(encoded.substr(2)));
  if (encoded.size() >= 2 && encoded[1] == 'f')
    return Value::Float(std::strtod(encoded.c_str() + 2, nullptr));
  return Value::None();
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Make<6>(std::shared_ptr<const ListData>(std::move(data)));
}

Value Value::Generator(std::vector<Value> items) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->is_generator = true;
  return Make<6>(std::shared_ptr<const ListData>(std::move(data)));
}

Value Value::Dict(DictData dict) {
  return Make<7>(std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(dict))));
}

Value Value::Namespace(DictData attributes) {
  return Make<8>(std::make_shared<DictData>(std::move(attributes)));
}

Value Value::Function(std::string name, std::function<Result<Value>(CallArgs&&)> fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = std::move(name);
  callable->fn = std::move(fn);
  return Make<9>(std::shared_ptr<const Callable>(std::move(callable)));
}

bool Value::bool_value() const {
  PIER_CHECK(is_bool(), "jinja Value is not a bool");
  return std::get<2>(data_);
}

int64_t Value::int_value() const {
  if (is_bool()) return std::get<2>(data_) ? 1 : 0;
  PIER_CHECK(is_int(), "jinja Value is not an int");
  return std::get<3>(data_);
}

double Value::float_value() const {
  if (is_float()) return std::get<4>(data_);
  return static_cast<double>(int_value());
}

const std::string& Value::string_value() const {
  PIER_CHECK(is_string(), "jinja Value is not a string");
  return std::get<5>(data_);
}

const ListData& Value::list() const {
  PIER_CHECK(is_list(), "jinja Value is not a list");
  return *std::get<6>(data_);
}

const DictData& Value::dict() const {
  if (is_namespace()) return *std::get<8>(data_);
  PIER_CHECK(is_dict(), "jinja Value is not a dict");
  return *std::get<7>(data_);
}

DictData& Value::mutable_namespace() const {
  PIER_CHECK(is_namespace(), "jinja Value is not a namespace");
  return *std::get<8>(data_);
}

const Callable& Value::callable() const {
  PIER_CHECK(is_callable(), "jinja Value is not callable");
  return *std::get<9>(data_);
}

const std::string& Value::undefined_hint() const {
  PIER_CHECK(is_undefined(), "jinja Value is not undefined");
  return std::get<0>(data_).hint;
}

std::string_view TypeName(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      return value.list().is_generator ? "generator" : (value.list().is_tuple ? "tuple" : "list");
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "Namespace";
    case ValueKind::kCallable:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return value.bool_value();
    case ValueKind::kInt:
      return value.int_value() != 0;
    case ValueKind::kFloat:
      return value.float_value() != 0.0;
    case ValueKind::kString:
      return !value.string_value().empty();
    case ValueKind::kList:
      return value.list().is_generator || !value.list().items.empty();
    case ValueKind::kDict:
      return value.dict().size() != 0;
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form: "-1.2345e+16".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  PIER_CHECK(ec == std::errc(), "to_chars failed");
  std::string sci(buf, end);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

bool IsPrintableForRepr(int32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x80) return true;
  if (cp == 0xA0 || cp == 0x85) return false;
  utf8proc_category_t cat = utf8proc_category(cp);
  switch (cat) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string ReprString(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos);
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n =
        utf8proc_iterate(bytes, static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
    if (n <= 0) {  // not valid UTF-8: Python would have had a surrogate escape here
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\x%02x", static_cast<unsigned char>(s[pos]));
      out += esc;
      ++pos;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == quote) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintableForRepr(cp)) {
      char esc[16];
      if (cp <= 0xFF) {
        std::snprintf(esc, sizeof(esc), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp <= 0xFFFF) {
        std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(esc, sizeof(esc), "\\U%08x", static_cast<unsigned>(cp));
      }
      out += esc;
    } else {
      out.append(s, pos, static_cast<size_t>(n));
    }
    pos += static_cast<size_t>(n);
  }
  out += quote;
  return out;
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(c));
          *out += esc;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

Status AppendJson(const Value& value, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > 512) return InvalidArgumentError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  switch (value.kind()) {
    case ValueKind::kNone:
      *out += "null";
      return Status::Ok();
    case ValueKind::kBool:
      *out += value.bool_value() ? "true" : "false";
      return Status::Ok();
    case ValueKind::kInt:
      *out += std::to_string(value.int_value());
      return Status::Ok();
    case ValueKind::kFloat: {
      double d = value.float_value();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(d);
      }
      return Status::Ok();
    }
    case ValueKind::kString:
      AppendJsonString(value.string_value(), out);
      return Status::Ok();
    case ValueKind::kList: {
      if (value.list().is_generator) break;
      const auto& items = value.list().items;
      if (items.empty()) {
        *out += "[]";
        return Status::Ok();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        PIER_RETURN_IF_ERROR(AppendJson(items[i], indent, sort_keys, depth + 1, out));
      }
      if (indent >= 0) newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case ValueKind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.dict().entries()) entries.push_back(&entry);
      if (entries.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        Value key = DecodeKey(entries[i]->first);
        if (key.is_string()) {
          AppendJsonString(key.string_value(), out);
        } else if (key.is_none()) {
          *out += "\"null\"";
        } else {
          AppendJsonString(ToStr(key), out);
        }
        *out += ": ";
        PIER_RETURN_IF_ERROR(AppendJson(entries[i]->second, indent, sort_keys, depth + 1, out));
      }
      if (indent >= 0) newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    case ValueKind::kUndefined:
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      break;
  }
  return InvalidArgumentError("Object of type " + std::string(TypeName(value)) +
                              " is not JSON serializable");
}

}  // namespace

std::string Repr(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kString:
      return ReprString(value.string_value());
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kList: {
      const ListData& list = value.list();
      if (list.is_generator) return "<generator object>";
      std::string out = list.is_tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += Repr(list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      out += list.is_tuple ? ")" : "]";
      return out;
    }
    case ValueKind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += Repr(DecodeKey(key)) + ": " + Repr(item);
      }
      return out + "}";
    }
    case ValueKind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [key, item] : value.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(key) + ": " + Repr(item);
      }
      return out + "}>";
    }
    default:
      return ToStr(value);
  }
}

std::string ToStr(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return value.bool_value() ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(value.int_value());
    case ValueKind::kFloat:
      return FormatFloat(value.float_value());
    case ValueKind::kString:
      return value.string_value();
    case ValueKind::kCallable:
      return "<function " + value.callable().name + ">";
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
      return Repr(value);
  }
  return "";
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.string_value() == b.string_value();
    case ValueKind::kList: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      if (x.is_generator || y.is_generator) return &x == &y;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x.entries()) {
        const Value* other = y.Find(key);
        if (other == nullptr || !Equals(item, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.mutable_namespace() == &b.mutable_namespace();
    case ValueKind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.float_value();
      double y = b.float_value();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.int_value();
    int64_t y = b.int_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.string_value().compare(b.string_value());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple && !a.is_generator() &&
      !b.is_generator()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return InvalidArgumentError("ordering not supported between instances of '" +
                              std::string(TypeName(a)) + "' and '" + std::string(TypeName(b)) +
                              "'");
}

Result<std::string> ToJson(const Value& value, int indent, bool sort_keys) {
  std::string out;
  PIER_RETURN_IF_ERROR(AppendJson(value, indent, sort_keys, 0, &out));
  return out;
}

namespace {

Result<Value> FromJsonAt(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxJsonDepth) {
    return InvalidArgumentError("JSON input nested deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels");
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::Int(static_cast<int64_t>(u));
      return Value::Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        PIER_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData dict;
      for (const auto& [key, item] : json.items()) {
        PIER_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, depth + 1));
        dict.Set(EncodeStringKey(key), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    default:
      return InvalidArgumentError("binary JSON values cannot be passed to a chat template");
  }
}

}  // namespace

Result<Value> FromJson(const nlohmann::ordered_json& json) { return FromJsonAt(json, 0); }

}  // namespace pier::tokenizer::jinja
