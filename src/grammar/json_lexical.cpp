#include "grammar/json_lexical.h"

#include <cmath>
#include <string>

namespace pier::grammar {
namespace {

ExprPtr Digit() { return Bytes({{'0', '9'}}); }
ExprPtr NonZeroDigit() { return Bytes({{'1', '9'}}); }
ExprPtr HexDigit() { return Bytes({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }

// Four hex digits that do not name a surrogate (D800-DFFF): a lone surrogate escape is not a
// character, and strict JSON parsers refuse it.
ExprPtr NonSurrogateHex4() {
  const ExprPtr not_d = Bytes({{'0', '9'}, {'a', 'c'}, {'e', 'f'}, {'A', 'C'}, {'E', 'F'}});
  const ExprPtr low_half = Bytes({{'0', '7'}});
  return Alt({Seq({not_d, HexDigit(), HexDigit(), HexDigit()}),
              Seq({Bytes({{'d', 'd'}, {'D', 'D'}}), low_half, HexDigit(), HexDigit()})});
}

// Every code point in [lo, hi] as UTF-8, appended to `out` as alternatives.
void AppendUtf8(uint32_t lo, uint32_t hi, std::vector<ExprPtr>* out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not characters
    if (lo < 0xD800) AppendUtf8(lo, 0xD7FF, out);
    if (hi > 0xDFFF) AppendUtf8(0xE000, hi, out);
    return;
  }
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {  // one encoded length at a time
    if (lo <= limit && hi > limit) {
      AppendUtf8(lo, limit, out);
      AppendUtf8(limit + 1, hi, out);
      return;
    }
  }
  const int n = hi <= 0x7F ? 1 : hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  if (n == 1) {
    out->push_back(Bytes({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}}));
    return;
  }
  // Split until each continuation byte ranges over a full block or the two ends agree.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        AppendUtf8(lo, lo | m, out);
        AppendUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        AppendUtf8(lo, (hi & ~m) - 1, out);
        AppendUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [n](uint32_t c, uint8_t* b) {
    static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
      b[i] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      c >>= 6;
    }
    b[0] = static_cast<uint8_t>(kLead[n] | c);
  };
  uint8_t a[4];
  uint8_t b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<ExprPtr> bytes;
  for (int i = 0; i < n; ++i) bytes.push_back(Bytes({{a[i], b[i]}}));
  out->push_back(Seq(std::move(bytes)));
}

// The canonical JSON escape of a character that may not appear unescaped.
std::string EscapeOf(uint32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
    }
  }
}

ExprPtr SameLengthDigits(std::string_view a, std::string_view b) {
  if (a.empty()) return Empty();
  if (a[0] == b[0])
    return Seq({Byte(static_cast<uint8_t>(a[0])), SameLengthDigits(a.substr(1), b.substr(1))});
  const size_t rest = a.size() - 1;
  std::vector<ExprPtr> options;
  char first = a[0];
  char last = b[0];
  if (a.substr(1).find_first_not_of('0') != std::string_view::npos) {
    options.push_back(Seq(
        {Byte(static_cast<uint8_t>(a[0])), SameLengthDigits(a.substr(1), std::string(rest, '9'))}));
    ++first;
  }
  ExprPtr upper;
  if (b.substr(1).find_first_not_of('9') != std::string_view::npos) {
    upper = Seq(
        {Byte(static_cast<uint8_t>(b[0])), SameLengthDigits(std::string(rest, '0'), b.substr(1))});
    --last;
  }
  if (first <= last) {
    options.push_back(
        Seq({Bytes({{static_cast<uint8_t>(first), static_cast<uint8_t>(last)}}),
             Repeat(Digit(), static_cast<int32_t>(rest), static_cast<int32_t>(rest))}));
  }
  if (upper != nullptr) options.push_back(upper);
  return Alt(std::move(options));
}

uint64_t PowerOfTen(int n) {
  uint64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

ExprPtr Fraction() { return Seq({Byte('.'), Repeat(Digit(), 1, 16)}); }

}  // namespace

ExprPtr JsonWhitespace() {
  static const ExprPtr ws = Optional(Alt({Byte(' '), Seq({Byte('\n'), Repeat(Byte(' '), 0, 20)})}));
  return ws;
}

ExprPtr JsonStringChar() {
  static const ExprPtr any = [] {
    std::vector<ExprPtr> options;
    AppendUtf8(0x20, 0x21, &options);
    AppendUtf8(0x23, 0x5B, &options);
    AppendUtf8(0x5D, kMaxCodePoint, &options);
    options.push_back(Seq({Byte('\\'), Alt({Bytes({{'"', '"'},
                                                   {'\\', '\\'},
                                                   {'/', '/'},
                                                   {'b', 'b'},
                                                   {'f', 'f'},
                                                   {'n', 'n'},
                                                   {'r', 'r'},
                                                   {'t', 't'}}),
                                            Seq({Byte('u'), NonSurrogateHex4()})})}));
    return Alt(std::move(options));
  }();
  return any;
}

ExprPtr JsonCharFrom(const CodePointRanges& ranges) {
  std::vector<ExprPtr> options;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    // Split off the characters JSON escapes: controls, '"' and '\'.
    uint32_t c = lo;
    while (c <= hi) {
      if (c < 0x20 || c == '"' || c == '\\') {
        options.push_back(Literal(EscapeOf(c)));
        ++c;
        continue;
      }
      uint32_t end = hi;
      if (c < '"')
        end = std::min(end, uint32_t{'"' - 1});
      else if (c < '\\')
        end = std::min(end, uint32_t{'\\' - 1});
      AppendUtf8(c, end, &options);
      if (end == kMaxCodePoint) break;
      c = end + 1;
    }
  }
  return Alt(std::move(options));
}

ExprPtr JsonString(int32_t min_length, int32_t max_length) {
  return Seq({Byte('"'), Repeat(JsonStringChar(), min_length, max_length), Byte('"')});
}

ExprPtr JsonStringLiteral(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<uint8_t>(ch);
    if (c < 0x20 || c == '"' || c == '\\') {
      out += EscapeOf(c);
    } else {
      out += ch;
    }
  }
  out += '"';
  return Literal(out);
}

ExprPtr DigitsInRange(uint64_t lo, uint64_t hi) {
  if (lo > hi) return Nothing();
  if (lo == 0) return Alt({Byte('0'), hi >= 1 ? DigitsInRange(1, hi) : Nothing()});
  std::vector<ExprPtr> options;
  const int lo_digits = static_cast<int>(std::to_string(lo).size());
  const int hi_digits = static_cast<int>(std::to_string(hi).size());
  for (int d = lo_digits; d <= hi_digits; ++d) {
    const uint64_t a = std::max(lo, PowerOfTen(d - 1));
    const uint64_t b = std::min(hi, PowerOfTen(d) - 1);
    options.push_back(SameLengthDigits(std::to_string(a), std::to_string(b)));
  }
  return Alt(std::move(options));
}

Result<ExprPtr> JsonInteger(std::optional<int64_t> min, std::optional<int64_t> max) {
  const auto largest = static_cast<int64_t>(PowerOfTen(kMaxIntegerDigits) - 1);
  const int64_t lo = std::max(min.value_or(-largest), -largest);
  const int64_t hi = std::min(max.value_or(largest), largest);
  if (lo > hi) {
    return InvalidArgumentError("the integer range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "] is empty");
  }
  std::vector<ExprPtr> options;
  if (lo < 0) {
    const auto abs_lo = static_cast<uint64_t>(hi < 0 ? -hi : 1);
    options.push_back(Seq({Byte('-'), DigitsInRange(abs_lo, static_cast<uint64_t>(-lo))}));
  }
  if (hi >= 0) {
    options.push_back(
        DigitsInRange(static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi)));
  }
  return Alt(std::move(options));
}

Result<ExprPtr> JsonNumber(const NumberBounds& bounds) {
  if (!bounds.minimum.has_value() && !bounds.maximum.has_value()) {
    static const ExprPtr any =
        Seq({Optional(Byte('-')), Alt({Byte('0'), Seq({NonZeroDigit(), Repeat(Digit(), 0, 15)})}),
             Optional(Fraction()),
             Optional(Seq({Bytes({{'e', 'e'}, {'E', 'E'}}),
                           Optional(Bytes({{'+', '+'}, {'-', '-'}})), Repeat(Digit(), 1, 2)}))});
    return any;
  }
  const double largest = static_cast<double>(PowerOfTen(15));
  for (const auto& [name, v] :
       {std::pair{"minimum", bounds.minimum}, std::pair{"maximum", bounds.maximum}}) {
    if (v.has_value() && (std::floor(*v) != *v || std::fabs(*v) >= largest)) {
      return UnsupportedError(std::string("a ") + name +
                              " on a number must be a whole number below 1e15 to be "
                              "constrained (use an integer type, or whole-number bounds)");
    }
  }
  if (!bounds.minimum.has_value() || *bounds.minimum < 0) {
    return UnsupportedError(
        "number bounds below 0 are not supported: give a minimum of at least 0, or use an "
        "integer type");
  }
  const auto lo = static_cast<uint64_t>(*bounds.minimum);
  const uint64_t limit = PowerOfTen(kMaxIntegerDigits) - 1;
  const std::optional<uint64_t> hi =
      bounds.maximum.has_value()
          ? std::optional<uint64_t>(static_cast<uint64_t>(std::max(0.0, *bounds.maximum)))
          : std::nullopt;
  if (bounds.maximum.has_value() && (*bounds.maximum < *bounds.minimum ||
                                     (*bounds.maximum == *bounds.minimum &&
                                      (bounds.exclusive_minimum || bounds.exclusive_maximum)))) {
    return InvalidArgumentError("the number range is empty");
  }
  std::vector<ExprPtr> options;
  // lo itself with a fraction that is not all zeros (exclusive minimum).
  if (bounds.exclusive_minimum && (!hi.has_value() || lo < *hi)) {
    options.push_back(
        Seq({DigitsInRange(lo, lo), Byte('.'), Repeat(Digit(), 0, 15), NonZeroDigit()}));
  }
  // Integer parts whose every fraction stays inside the bounds.
  const uint64_t any_lo = bounds.exclusive_minimum ? lo + 1 : lo;
  const uint64_t any_hi = hi.has_value() ? (*hi == 0 ? 0 : *hi - 1) : limit;
  if (any_lo <= any_hi && (!hi.has_value() || *hi > 0)) {
    options.push_back(Seq({DigitsInRange(any_lo, any_hi), Optional(Fraction())}));
  }
  // The maximum itself, with no fraction.
  if (hi.has_value() && !bounds.exclusive_maximum && (*hi > lo || !bounds.exclusive_minimum)) {
    options.push_back(DigitsInRange(*hi, *hi));
  }
  ExprPtr e = Alt(std::move(options));
  if (IsNothing(e)) return InvalidArgumentError("the number range is empty");
  return e;
}

Result<ExprPtr> StringFormatContent(std::string_view format) {
  auto two = [](char a_lo, char a_hi, char b_lo, char b_hi) {
    return Seq({Bytes({{static_cast<uint8_t>(a_lo), static_cast<uint8_t>(a_hi)}}),
                Bytes({{static_cast<uint8_t>(b_lo), static_cast<uint8_t>(b_hi)}})});
  };
  const ExprPtr date =
      Seq({Repeat(Digit(), 4, 4), Byte('-'),
           Alt({two('0', '0', '1', '9'), two('1', '1', '0', '2')}), Byte('-'),
           Alt({two('0', '0', '1', '9'), two('1', '2', '0', '9'), two('3', '3', '0', '1')})});
  const ExprPtr hour = Alt({two('0', '1', '0', '9'), two('2', '2', '0', '3')});
  const ExprPtr minute = two('0', '5', '0', '9');
  const ExprPtr time =
      Seq({hour, Byte(':'), minute, Byte(':'), minute,
           Optional(Seq({Byte('.'), Repeat(Digit(), 1, 9)})),
           Alt({Byte('Z'), Seq({Bytes({{'+', '+'}, {'-', '-'}}), hour, Byte(':'), minute})})});
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return Seq({date, Byte('T'), time});
  if (format == "uuid") {
    auto hex = [](int32_t n) { return Repeat(HexDigit(), n, n); };
    return Seq(
        {hex(8), Byte('-'), hex(4), Byte('-'), hex(4), Byte('-'), hex(4), Byte('-'), hex(12)});
  }
  return UnsupportedError("string format '" + std::string(format) +
                          "' is not supported (supported: date, time, date-time, uuid)");
}

}  // namespace pier::grammar
