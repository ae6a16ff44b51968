#include "grammar/decimal_integer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace pier::grammar {
namespace {

std::string Str(const std::optional<DecimalInteger>& d) {
  return d.has_value() ? d->ToString() : "nullopt";
}

TEST(DecimalIntegerTest, SixtyFourBitEndsAndSteps) {
  EXPECT_EQ(DecimalInteger::Of(std::numeric_limits<int64_t>::min()).ToString(),
            "-9223372036854775808");
  EXPECT_EQ(DecimalInteger::OfUnsigned(std::numeric_limits<uint64_t>::max()).Next().ToString(),
            "18446744073709551616");
  EXPECT_EQ(DecimalInteger::Of(0).Previous().ToString(), "-1");
  EXPECT_EQ(DecimalInteger::Of(-1).Next().ToString(), "0");
  EXPECT_FALSE(DecimalInteger::Of(-1).Next().negative);  // no "-0"
  EXPECT_EQ(DecimalInteger::Of(-999).Previous().ToString(), "-1000");
  EXPECT_EQ(DecimalInteger::Of(1000).Previous().ToString(), "999");
  EXPECT_EQ(DecimalInteger::Parse("-000120")->ToString(), "-120");
  EXPECT_EQ(DecimalInteger::Parse("-0")->ToString(), "0");
  EXPECT_FALSE(DecimalInteger::Parse("").has_value());
  EXPECT_FALSE(DecimalInteger::Parse("-").has_value());
  EXPECT_FALSE(DecimalInteger::Parse("1e3").has_value());
}

TEST(DecimalIntegerTest, OrderIsNumericAtAnyLength) {
  const char* ascending[] = {
      "-100000000000000000000000", "-99999999999999999999",   "-10", "-9", "0", "9", "10",
      "99999999999999999999",      "100000000000000000000000"};
  for (size_t i = 0; i < std::size(ascending); ++i) {
    for (size_t j = 0; j < std::size(ascending); ++j) {
      const DecimalInteger a = *DecimalInteger::Parse(ascending[i]);
      const DecimalInteger b = *DecimalInteger::Parse(ascending[j]);
      EXPECT_EQ(a < b, i < j) << ascending[i] << " < " << ascending[j];
      EXPECT_EQ(a == b, i == j) << ascending[i] << " == " << ascending[j];
    }
  }
}

TEST(DecimalIntegerTest, DoublesAreReadExactly) {
  EXPECT_EQ(CeilOf(1e24).ToString(), "999999999999999983222784");
  EXPECT_EQ(FloorOf(-1e19).ToString(), "-10000000000000000000");
  EXPECT_EQ(CeilOf(1.5).ToString(), "2");
  EXPECT_EQ(FloorOf(1.5).ToString(), "1");
  EXPECT_EQ(CeilOf(-1.5).ToString(), "-1");
  EXPECT_EQ(FloorOf(-1.5).ToString(), "-2");
  EXPECT_EQ(CeilOf(-0.25).ToString(), "0");
  EXPECT_EQ(CeilOf(std::numeric_limits<double>::max()).magnitude.size(), 309u);
  EXPECT_EQ(CeilOf(std::numeric_limits<double>::max()).ToString().substr(0, 17),
            "17976931348623157");
}

TEST(DecimalIntegerTest, DecimalTextsRoundUpAndDown) {
  EXPECT_EQ(Str(CeilOfDecimal("1e+24")), "1000000000000000000000000");
  EXPECT_EQ(Str(CeilOfDecimal("1.8446744073709552e+19")), "18446744073709552000");
  EXPECT_EQ(Str(CeilOfDecimal("12.5")), "13");
  EXPECT_EQ(Str(FloorOfDecimal("12.5")), "12");
  EXPECT_EQ(Str(CeilOfDecimal("-12.5")), "-12");
  EXPECT_EQ(Str(FloorOfDecimal("-12.5")), "-13");
  EXPECT_EQ(Str(FloorOfDecimal("-0.5")), "-1");
  EXPECT_EQ(Str(CeilOfDecimal("-0.5")), "0");
  EXPECT_EQ(Str(CeilOfDecimal("1.25e1")), "13");
  EXPECT_EQ(Str(CeilOfDecimal("125e-1")), "13");
  EXPECT_EQ(Str(FloorOfDecimal("125E-3")), "0");
  EXPECT_EQ(Str(CeilOfDecimal("125E-3")), "1");
  EXPECT_EQ(Str(CeilOfDecimal("2.000")), "2");
  EXPECT_EQ(Str(CeilOfDecimal("0e999999999999")), "0");
  EXPECT_EQ(Str(CeilOfDecimal("1e-99999999999999")), "1");
  EXPECT_EQ(Str(CeilOfDecimal("1e2000")), "nullopt");  // more digits than allowed
  for (const char* bad : {"", "-", "1.", ".5", "1e", "1e+", "+1", "1x", "--1"}) {
    EXPECT_FALSE(CeilOfDecimal(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace pier::grammar
