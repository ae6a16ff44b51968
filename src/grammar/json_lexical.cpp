#include "grammar/json_lexical.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

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

// Exactly n digits.
ExprPtr Digits(size_t n) {
  static const ExprPtr digit = Digit();
  return Repeat(digit, static_cast<int32_t>(n), static_cast<int32_t>(n));
}

// Digit strings as long as `a` (leading zeros allowed: these are the tails of longer numbers)
// that are at least `a` (above) or at most `a`, strictly when `strict`.
//
// Split in halves, a = head tail: a string beats `a` when its head beats `head` strictly (any
// tail then), or equals `head` and its tail beats `tail`. Each level adds O(|a|) and there are
// log |a| levels, so a bound of d digits costs O(d log d) automaton states (about 16,000 for
// 300 digits). Cutting one digit at a time would need a tail of every length, O(d^2).
ExprPtr SameLengthBound(std::string_view a, bool above, bool strict) {
  if (a.empty()) return strict ? Nothing() : Empty();
  if (!strict && a.find_first_not_of(above ? '0' : '9') == std::string_view::npos) {
    return Digits(a.size());  // every string of this length
  }
  if (a.size() == 1) {
    const auto d = static_cast<uint8_t>(a[0]);
    const int32_t step = strict ? 1 : 0;
    return above ? Bytes({{static_cast<uint8_t>(d + step), '9'}})
                 : Bytes({{'0', static_cast<uint8_t>(d - step)}});  // lo > hi: Nothing
  }
  const std::string_view head = a.substr(0, a.size() / 2);
  const std::string_view tail = a.substr(a.size() / 2);
  return Alt({Seq({SameLengthBound(head, above, true), Digits(tail.size())}),
              Seq({Literal(head), SameLengthBound(tail, above, strict)})});
}

// Digit strings as long as `a` and `b` from `a` to `b` (a <= b).
ExprPtr SameLengthRange(std::string_view a, std::string_view b) {
  size_t p = 0;
  while (p < a.size() && a[p] == b[p]) ++p;
  if (p == a.size()) return Literal(a);
  // At the first digit where they differ: a's digit and then at least a's rest, a digit
  // strictly between and then anything, or b's digit and then at most b's rest.
  const auto lo = static_cast<uint8_t>(a[p]);
  const auto hi = static_cast<uint8_t>(b[p]);
  const size_t rest = a.size() - p - 1;
  return Seq({Literal(a.substr(0, p)),
              Alt({Seq({Byte(lo), SameLengthBound(a.substr(p + 1), true, false)}),
                   Seq({Bytes({{static_cast<uint8_t>(lo + 1), static_cast<uint8_t>(hi - 1)}}),
                        Digits(rest)}),
                   Seq({Byte(hi), SameLengthBound(b.substr(p + 1), false, false)})})});
}

// Magnitudes (digits without leading zeros) compare by length first, then as text.
bool MagnitudeLess(std::string_view a, std::string_view b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
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

ExprPtr DigitsInRange(std::string_view lo, std::string_view hi) {
  if (MagnitudeLess(hi, lo)) return Nothing();
  if (lo == "0") return Alt({Byte('0'), hi == "0" ? Nothing() : DigitsInRange("1", hi)});
  if (lo.size() == hi.size()) return SameLengthRange(lo, hi);
  // lo's length from lo up; every length strictly between; hi's length up to hi.
  std::vector<ExprPtr> options;
  options.push_back(SameLengthRange(lo, std::string(lo.size(), '9')));
  if (hi.size() - lo.size() >= 2) {
    options.push_back(Seq({NonZeroDigit(), Repeat(Digit(), static_cast<int32_t>(lo.size()),
                                                  static_cast<int32_t>(hi.size() - 2))}));
  }
  options.push_back(SameLengthRange("1" + std::string(hi.size() - 1, '0'), hi));
  return Alt(std::move(options));
}

ExprPtr DigitsInRange(uint64_t lo, uint64_t hi) {
  return DigitsInRange(std::to_string(lo), std::to_string(hi));
}

Result<ExprPtr> JsonInteger(const std::optional<DecimalInteger>& min,
                            const std::optional<DecimalInteger>& max) {
  // An end without a bound stops at kMaxIntegerDigits digits, or at as many digits as the
  // longer bound has, so that a bound of any size leaves room above or below it.
  size_t width = kMaxIntegerDigits;
  for (const std::optional<DecimalInteger>& b : {min, max}) {
    if (b.has_value()) width = std::max(width, b->magnitude.size());
  }
  DecimalInteger largest;
  largest.magnitude = std::string(width, '9');
  DecimalInteger smallest = largest;
  smallest.negative = true;
  const DecimalInteger lo = min.value_or(smallest);
  const DecimalInteger hi = max.value_or(largest);
  if (lo > hi) {
    return InvalidArgumentError("the integer range [" + lo.ToString() + ", " + hi.ToString() +
                                "] is empty");
  }
  std::vector<ExprPtr> options;
  if (lo.negative) {
    // -|hi| down to -|lo|, or -1 down to -|lo| when hi is not negative ("-0" is not written).
    const std::string nearest = hi.negative ? hi.magnitude : "1";
    options.push_back(Seq({Byte('-'), DigitsInRange(nearest, lo.magnitude)}));
  }
  if (!hi.negative) {
    options.push_back(DigitsInRange(lo.negative ? "0" : lo.magnitude, hi.magnitude));
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
