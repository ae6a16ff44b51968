#include "tokenizer/jinja/operators.h"

#include <cmath>

#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {
namespace {

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return InvalidArgumentError("unsupported operand type(s) for " + std::string(op) + ": '" +
                              std::string(TypeName(a)) + "' and '" + std::string(TypeName(b)) +
                              "'");
}

Status Overflow() {
  return InvalidArgumentError("integer overflow: the result does not fit in 64 bits");
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

Result<Value> Repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.string_value();
    if (!s.empty() && static_cast<uint64_t>(times) > max_bytes / s.size()) {
      return ResourceExhaustedError("chat template built a string larger than the render limit");
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<uint64_t>(times) > max_bytes / (items.size() * 16)) {
    return ResourceExhaustedError("chat template built a list larger than the render limit");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.list().is_tuple);
}

double FloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return InvalidArgumentError(hint.empty() ? "undefined value used" : hint);
}

Result<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    std::string out = ToStr(a) + ToStr(b);
    if (out.size() > max_bytes) {
      return ResourceExhaustedError("chat template built a string larger than the render limit");
    }
    return Value::String(std::move(out));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);

  if (op == "+") {
    if (a.is_string() && b.is_string() && (a.is_markup() || b.is_markup())) {
      std::string out = (a.is_markup() ? a.string_value() : HtmlEscape(a.string_value())) +
                        (b.is_markup() ? b.string_value() : HtmlEscape(b.string_value()));
      if (out.size() > max_bytes) {
        return ResourceExhaustedError("chat template built a string larger than the render limit");
      }
      return Value::Markup(std::move(out));
    }
    if (a.is_string() && b.is_string()) {
      if (a.string_value().size() + b.string_value().size() > max_bytes) {
        return ResourceExhaustedError("chat template built a string larger than the render limit");
      }
      return Value::String(a.string_value() + b.string_value());
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple && !a.is_generator() &&
        !b.is_generator()) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::List(std::move(items), a.list().is_tuple);
    }
    if (a.is_string() && !b.is_string()) {
      return InvalidArgumentError("can only concatenate str (not \"" + std::string(TypeName(b)) +
                                  "\") to str");
    }
    if (a.is_list() && !b.is_list()) {
      return InvalidArgumentError("can only concatenate list (not \"" + std::string(TypeName(b)) +
                                  "\") to list");
    }
  }
  if (op == "*" && !a.is_generator() && !b.is_generator()) {
    if ((a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(a, b.int_value(), max_bytes);
    if ((b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(b, a.int_value(), max_bytes);
  }
  if (!a.is_number() || !b.is_number()) {
    if (op == "%" && a.is_string()) {
      return UnsupportedError("printf-style string formatting ('%') is not supported");
    }
    return Unsupported(op, a, b);
  }

  bool both_int = IsIntLike(a) && IsIntLike(b);
  if (op == "/") {
    if (b.float_value() == 0.0) return InvalidArgumentError("division by zero");
    return Value::Float(a.float_value() / b.float_value());
  }
  if (both_int) {
    int64_t x = a.int_value();
    int64_t y = b.int_value();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "//" || op == "%") {
      if (y == 0) {
        return InvalidArgumentError(op == "//" ? "integer division or modulo by zero"
                                               : "integer modulo by zero");
      }
      if (x == INT64_MIN && y == -1) return op == "%" ? Value::Int(0) : Result<Value>(Overflow());
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t result = 1;
      int64_t base = x;
      while (y > 0) {
        if (y & 1) {
          if (__builtin_mul_overflow(result, base, &result)) return Overflow();
        }
        y >>= 1;
        if (y > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
      }
      return Value::Int(result);
    }
  } else {
    double x = a.float_value();
    double y = b.float_value();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "//") {
      if (y == 0) return InvalidArgumentError("float floor division by zero");
      return Value::Float(std::floor(x / y));
    }
    if (op == "%") {
      if (y == 0) return InvalidArgumentError("float modulo");
      return Value::Float(FloorMod(x, y));
    }
    if (op == "**") {
      if (x == 0 && y < 0) return InvalidArgumentError("0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(x, y));
    }
  }
  return Unsupported(op, a, b);
}

Result<Value> Negate(const Value& a, bool minus) {
  if (a.is_undefined()) return UndefinedError(a);
  if (a.is_float()) return Value::Float(minus ? -a.float_value() : a.float_value());
  if (IsIntLike(a)) {
    int64_t v = a.int_value();
    if (!minus) return Value::Int(v);
    if (v == INT64_MIN) return Overflow();
    return Value::Int(-v);
  }
  return InvalidArgumentError("bad operand type for unary " + std::string(minus ? "-" : "+") +
                              ": '" + std::string(TypeName(a)) + "'");
}

Result<bool> Contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case ValueKind::kString:
      if (!needle.is_string()) {
        return InvalidArgumentError("'in <string>' requires string as left operand, not " +
                                    std::string(TypeName(needle)));
      }
      return haystack.string_value().find(needle.string_value()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& item : haystack.list().items) {
        if (Equals(item, needle)) return true;
      }
      return false;
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      std::optional<std::string> key = EncodeKey(needle);
      return key && haystack.dict().Find(*key) != nullptr;
    }
    case ValueKind::kUndefined:
      return false;
    default:
      return InvalidArgumentError("argument of type '" + std::string(TypeName(haystack)) +
                                  "' is not iterable");
  }
}

}  // namespace pier::tokenizer::jinja
