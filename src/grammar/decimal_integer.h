// DecimalInteger: an integer of any size kept as its decimal digits, for the bounds a JSON
// Schema sets on integers. A bound may lie far beyond 64 bits ("minimum": 1e300), and the
// constraint is built over digit strings (json_lexical.h), so the bounds are compared as
// digit strings too, never through int64 or double. Only what bounds need is here: order,
// one step up or down, and the exact floor and ceiling of a double or a decimal text.
//
// Thread-safety: a value.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pier::grammar {

struct DecimalInteger {
  bool negative = false;
  std::string magnitude = "0";  // decimal digits without leading zeros; "0" is never negative

  static DecimalInteger Of(int64_t v);
  static DecimalInteger OfUnsigned(uint64_t v);
  // An optional '-' and decimal digits (leading zeros allowed); nullopt for anything else.
  static std::optional<DecimalInteger> Parse(std::string_view text);

  std::string ToString() const;     // "-123", "0"
  DecimalInteger Next() const;      // this + 1
  DecimalInteger Previous() const;  // this - 1

  friend std::strong_ordering operator<=>(const DecimalInteger& a, const DecimalInteger& b);
  friend bool operator==(const DecimalInteger& a, const DecimalInteger& b) = default;
};

// The least integer >= v and the greatest integer <= v, exactly (every double above 2^53 is
// an integer, and all of its digits are kept). v must be finite.
DecimalInteger CeilOf(double v);
DecimalInteger FloorOf(double v);

// The same for a number written in JSON's syntax ("-12.5", "1.8446744073709552e+19");
// nullopt when `text` is not one, or its integer part would have more than max_digits digits.
std::optional<DecimalInteger> CeilOfDecimal(std::string_view text, size_t max_digits = 1000);
std::optional<DecimalInteger> FloorOfDecimal(std::string_view text, size_t max_digits = 1000);

}  // namespace pier::grammar
