// The lexical pieces of JSON as Exprs: whitespace, strings (from any set of code points, in
// canonical escaped form), integers and numbers with bounds, and the string formats Pier can
// constrain. json_schema.cpp and string_pattern.cpp assemble schemas from these.
//
// Bounded on purpose where an unbounded run would let a small model loop: whitespace is at
// most one newline and an indent of 20 spaces, integers at most 16 digits (more only where a
// bound needs them), fractions and exponents at most 16 and 2. Output written under these is
// valid JSON; it is only never longer than that.
//
// Thread-safety: free functions returning immutable Exprs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "grammar/decimal_integer.h"
#include "grammar/expr.h"

namespace pier::grammar {

// Inclusive code point ranges; surrogates (D800-DFFF) are never characters.
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr int32_t kMaxIntegerDigits = 16;

// Optional whitespace between JSON tokens.
ExprPtr JsonWhitespace();
// One character of a JSON string as it may be written: any unescaped character allowed there,
// or any escape (\" \\ \/ \b \f \n \r \t \uXXXX, no lone surrogate).
ExprPtr JsonStringChar();
// One character from `ranges`, written as JSON writes it canonically: unescaped when allowed,
// \" \\ \b \f \n \r \t for those, \u00XX for other control characters.
ExprPtr JsonCharFrom(const CodePointRanges& ranges);
// A whole JSON string ("..." with quotes) of min..max characters (max may be kUnbounded).
ExprPtr JsonString(int32_t min_length = 0, int32_t max_length = kUnbounded);
// A JSON string literal for exactly `text` (its UTF-8 bytes), escaped canonically.
ExprPtr JsonStringLiteral(std::string_view text);

// An integer in [min, max] (either may be unset), bounds of any size. An end without a bound
// stops at kMaxIntegerDigits digits or at the longer bound's number of digits, whichever is
// more. INVALID_ARGUMENT naming the range when it is empty.
[[nodiscard]] Result<ExprPtr> JsonInteger(const std::optional<DecimalInteger>& min,
                                          const std::optional<DecimalInteger>& max);
// The decimal digits of every integer in [lo, hi], 0 <= lo <= hi (no sign, no leading zeros).
// `lo` and `hi` are digit strings of any length, without leading zeros; the Expr has
// O(d log d) parts for d digits, whatever the size of the range. Nothing() when lo > hi.
ExprPtr DigitsInRange(std::string_view lo, std::string_view hi);
ExprPtr DigitsInRange(uint64_t lo, uint64_t hi);

struct NumberBounds {
  std::optional<double> minimum;
  std::optional<double> maximum;
  bool exclusive_minimum = false;
  bool exclusive_maximum = false;
};
// A JSON number within `bounds`. Bounds must be whole numbers and a lower bound at least 0
// (INVALID_ARGUMENT naming what is not supported); without bounds, any number.
[[nodiscard]] Result<ExprPtr> JsonNumber(const NumberBounds& bounds);

// The content (without quotes) of a string in `format`: date, time, date-time, uuid;
// INVALID_ARGUMENT naming any other format.
[[nodiscard]] Result<ExprPtr> StringFormatContent(std::string_view format);

}  // namespace pier::grammar
