#include "grammar/decimal_integer.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/check.h"

namespace pier::grammar {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string StripLeadingZeros(std::string_view digits) {
  const size_t first = digits.find_first_not_of('0');
  return first == std::string_view::npos ? "0" : std::string(digits.substr(first));
}

// Magnitudes (no leading zeros) plus or minus one; `m` is not "0" for MinusOne.
std::string PlusOne(std::string m) {
  size_t i = m.size();
  while (i > 0 && m[i - 1] == '9') m[--i] = '0';
  if (i == 0) return "1" + m;
  ++m[i - 1];
  return m;
}

std::string MinusOne(std::string m) {
  size_t i = m.size();
  while (m[i - 1] == '0') m[--i] = '9';
  --m[i - 1];
  return StripLeadingZeros(m);
}

DecimalInteger Make(bool negative, std::string magnitude) {
  DecimalInteger d;
  d.magnitude = StripLeadingZeros(magnitude);
  d.negative = negative && d.magnitude != "0";
  return d;
}

// `text` split into its sign, its integer part and whether a non-zero fraction follows.
struct Split {
  bool negative = false;
  std::string integer;  // may be empty (0) or have leading zeros
  bool has_fraction = false;
};

// JSON's number syntax: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
std::optional<Split> SplitDecimal(std::string_view text, size_t max_digits) {
  Split out;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    out.negative = true;
    ++i;
  }
  std::string digits;  // integer and fraction digits together
  const size_t int_start = i;
  while (i < text.size() && IsDigit(text[i])) digits += text[i++];
  if (i == int_start) return std::nullopt;
  int64_t point = static_cast<int64_t>(digits.size());  // digits before the decimal point
  if (i < text.size() && text[i] == '.') {
    const size_t frac_start = ++i;
    while (i < text.size() && IsDigit(text[i])) digits += text[i++];
    if (i == frac_start) return std::nullopt;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) exp_negative = text[i++] == '-';
    const size_t exp_start = i;
    int64_t exponent = 0;
    while (i < text.size() && IsDigit(text[i])) {
      // Past the limit the exponent's size no longer matters: it only has to stay large.
      exponent = std::min<int64_t>(exponent * 10 + (text[i++] - '0'), int64_t{1} << 40);
    }
    if (i == exp_start) return std::nullopt;
    point += exp_negative ? -exponent : exponent;
  }
  if (i != text.size()) return std::nullopt;
  const auto size = static_cast<int64_t>(digits.size());
  if (point > size) {  // an exponent past the last digit: zeros follow
    const bool zero = digits.find_first_not_of('0') == std::string::npos;
    if (!zero && point - size > static_cast<int64_t>(max_digits)) return std::nullopt;
    if (!zero) digits.append(static_cast<size_t>(point - size), '0');
    point = static_cast<int64_t>(digits.size());
  }
  const size_t whole = static_cast<size_t>(std::max<int64_t>(point, 0));
  out.integer = digits.substr(0, whole);
  out.has_fraction = digits.find_first_not_of('0', whole) != std::string::npos;
  if (StripLeadingZeros(out.integer).size() > max_digits) return std::nullopt;
  return out;
}

// The exact decimal digits of a double that is an integer (`v` == floor(v)).
DecimalInteger OfIntegralDouble(double v) {
  // 309 digits for the largest double, a sign, and room to spare.
  char buf[400];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 0);
  PIER_CHECK(r.ec == std::errc());
  std::optional<DecimalInteger> d = DecimalInteger::Parse(std::string_view(buf, r.ptr - buf));
  PIER_CHECK(d.has_value());
  return *d;
}

}  // namespace

DecimalInteger DecimalInteger::Of(int64_t v) {
  // The magnitude through uint64: -INT64_MIN does not fit an int64.
  const uint64_t m = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return Make(v < 0, std::to_string(m));
}

DecimalInteger DecimalInteger::OfUnsigned(uint64_t v) { return Make(false, std::to_string(v)); }

std::optional<DecimalInteger> DecimalInteger::Parse(std::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = text.substr(negative ? 1 : 0);
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (!IsDigit(c)) return std::nullopt;
  }
  return Make(negative, std::string(digits));
}

std::string DecimalInteger::ToString() const { return (negative ? "-" : "") + magnitude; }

DecimalInteger DecimalInteger::Next() const {
  return negative ? Make(true, MinusOne(magnitude)) : Make(false, PlusOne(magnitude));
}

DecimalInteger DecimalInteger::Previous() const {
  if (negative || magnitude == "0") return Make(true, PlusOne(magnitude));
  return Make(false, MinusOne(magnitude));
}

std::strong_ordering operator<=>(const DecimalInteger& a, const DecimalInteger& b) {
  if (a.negative != b.negative)
    return a.negative ? std::strong_ordering::less : std::strong_ordering::greater;
  // Magnitudes: the longer is larger; of equal length, the digits compare as text.
  std::strong_ordering m = a.magnitude.size() <=> b.magnitude.size();
  if (m == std::strong_ordering::equal) m = a.magnitude.compare(b.magnitude) <=> 0;
  return a.negative ? 0 <=> m : m;
}

DecimalInteger CeilOf(double v) {
  PIER_CHECK(std::isfinite(v));
  return OfIntegralDouble(std::ceil(v));
}

DecimalInteger FloorOf(double v) {
  PIER_CHECK(std::isfinite(v));
  return OfIntegralDouble(std::floor(v));
}

std::optional<DecimalInteger> CeilOfDecimal(std::string_view text, size_t max_digits) {
  const std::optional<Split> s = SplitDecimal(text, max_digits);
  if (!s.has_value()) return std::nullopt;
  const DecimalInteger whole = Make(s->negative, s->integer);  // truncated toward zero
  return s->has_fraction && !s->negative ? whole.Next() : whole;
}

std::optional<DecimalInteger> FloorOfDecimal(std::string_view text, size_t max_digits) {
  const std::optional<Split> s = SplitDecimal(text, max_digits);
  if (!s.has_value()) return std::nullopt;
  const DecimalInteger whole = Make(s->negative, s->integer);
  return s->has_fraction && s->negative ? whole.Previous() : whole;
}

}  // namespace pier::grammar
