#include "grammar/json_lexical.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "grammar_test_util.h"

namespace pier::grammar {
namespace {

using testing::Language;

std::string Utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

TEST(DigitsInRangeTest, EveryRangeUpTo150MatchesExactlyItsNumbers) {
  for (uint64_t lo = 0; lo <= 150; lo += 7) {
    for (uint64_t hi = lo; hi <= 150; hi += 11) {
      Language lang(DigitsInRange(lo, hi));
      for (uint64_t x = 0; x <= 200; ++x) {
        EXPECT_EQ(lang.Matches(std::to_string(x)), x >= lo && x <= hi)
            << x << " in " << lo << ".." << hi;
      }
      EXPECT_FALSE(lang.Matches("0" + std::to_string(lo)));  // no leading zeros
    }
  }
}

TEST(DigitsInRangeTest, RandomWideRangesAgreeWithComparison) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    uint64_t a = rng() % 10'000'000;
    uint64_t b = rng() % 10'000'000'000ULL;
    if (a > b) std::swap(a, b);
    Language lang(DigitsInRange(a, b));
    for (int i = 0; i < 300; ++i) {
      const uint64_t x = i % 3 == 0   ? a + (rng() % 3) - 1
                         : i % 3 == 1 ? b + (rng() % 3) - 1
                                      : rng() % (2 * b + 2);
      EXPECT_EQ(lang.Matches(std::to_string(x)), x >= a && x <= b) << x << " in " << a << ".." << b;
    }
  }
}

TEST(JsonIntegerTest, SignedRanges) {
  Language lang(JsonInteger(-12, 7).value());
  for (int x = -30; x <= 30; ++x)
    EXPECT_EQ(lang.Matches(std::to_string(x)), x >= -12 && x <= 7) << x;
  EXPECT_FALSE(lang.Matches("-0"));
  Language negative(JsonInteger(-500, -20).value());
  for (int x = -600; x <= 0; ++x)
    EXPECT_EQ(negative.Matches(std::to_string(x)), x >= -500 && x <= -20) << x;
  Language unbounded(JsonInteger(std::nullopt, std::nullopt).value());
  EXPECT_TRUE(unbounded.Matches("-1234567890123456"));
  EXPECT_FALSE(unbounded.Matches("12345678901234567"));  // 17 digits
  EXPECT_FALSE(unbounded.Matches("1.5"));
  EXPECT_EQ(JsonInteger(5, 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(JsonNumberTest, UnboundedNumbersAreJsonNumbers) {
  Language lang(JsonNumber({}).value());
  for (const char* ok : {"0", "-0", "12.5", "-3.25e+10", "1E5", "0.000"})
    EXPECT_TRUE(lang.Matches(ok)) << ok;
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "--1", "NaN"})
    EXPECT_FALSE(lang.Matches(bad)) << bad;
}

TEST(JsonNumberTest, WholeNumberBoundsHoldForEveryMatch) {
  struct Case {
    NumberBounds b;
    double lo, hi;
  };
  const Case cases[] = {
      {{0.0, 10.0, false, false}, 0, 10}, {{0.0, 10.0, true, false}, 0, 10},
      {{0.0, 10.0, false, true}, 0, 10},  {{3.0, std::nullopt, true, false}, 3, 1e300},
      {{5.0, 5.0, false, false}, 5, 5},
  };
  std::mt19937_64 rng(11);
  for (const Case& c : cases) {
    Language lang(JsonNumber(c.b).value());
    for (int i = 0; i < 300; ++i) {
      std::string s;
      if (!lang.Sample(&rng, &s, 0.3)) continue;
      const double v = std::stod(s);
      EXPECT_TRUE(c.b.exclusive_minimum ? v > c.lo : v >= c.lo) << s;
      EXPECT_TRUE(c.b.exclusive_maximum ? v < c.hi : v <= c.hi) << s;
    }
    EXPECT_EQ(lang.Matches("5"), true) << "5 is inside every case";
  }
  EXPECT_FALSE(JsonNumber({0.5, std::nullopt, false, false}).ok());
  EXPECT_FALSE(JsonNumber({-1.0, 4.0, false, false}).ok());
  EXPECT_FALSE(JsonNumber({2.0, 1.0, false, false}).ok());
}

TEST(JsonCharTest, EveryCodePointOfARangeAndNoOther) {
  const CodePointRanges ranges = {{'0', '9'}, {0xE9, 0x3A9}, {0xD700, 0xE100}, {0x1F600, 0x1F64F}};
  Language lang(JsonCharFrom(ranges));
  for (uint32_t c = 0x20; c <= kMaxCodePoint; ++c) {
    if ((c >= 0xD800 && c <= 0xDFFF) || c == '"' || c == '\\') continue;
    bool inside = false;
    for (auto [lo, hi] : ranges) inside = inside || (c >= lo && c <= hi);
    if (inside != lang.Matches(Utf8(c))) {
      ADD_FAILURE() << "code point " << std::hex << c;
      break;
    }
  }
}

TEST(JsonCharTest, EscapesAreCanonical) {
  Language lang(JsonCharFrom({{0, 0x7F}}));
  EXPECT_TRUE(lang.Matches("\\\""));
  EXPECT_TRUE(lang.Matches("\\\\"));
  EXPECT_TRUE(lang.Matches("\\n"));
  EXPECT_TRUE(lang.Matches("\\u0001"));
  EXPECT_FALSE(lang.Matches("\""));
  EXPECT_FALSE(lang.Matches("\n"));
  EXPECT_FALSE(lang.Matches("\\u000a"));  // \n has a short escape
}

TEST(JsonStringTest, AnyValidUtf8AndEscapesButNothingInvalid) {
  Language lang(JsonString());
  for (uint32_t c = 0x20; c <= kMaxCodePoint; c += 97) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    if (c == '"' || c == '\\') continue;
    ASSERT_TRUE(lang.Matches("\"" + Utf8(c) + "\"")) << std::hex << c;
  }
  EXPECT_TRUE(lang.Matches(R"("a\"b\\c\/\b\f\n\r\t\u00e9")"));
  for (const char* bad : {"\"\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF5\x80\x80\x80\"", "\"\x80\"",
                          "\"\n\"", "\"\\x\"", "\"\\u12\""}) {
    EXPECT_FALSE(lang.Matches(bad)) << bad;
  }
  Language bounded(JsonString(2, 3));
  EXPECT_FALSE(bounded.Matches("\"a\""));
  EXPECT_TRUE(bounded.Matches("\"a\\n\""));
  EXPECT_TRUE(bounded.Matches("\"\xC3\xA9\xC3\xA9\xC3\xA9\""));  // three characters, six bytes
  EXPECT_FALSE(bounded.Matches("\"abcd\""));
  EXPECT_TRUE(Language(JsonStringLiteral("say \"hi\"\n")).Matches(R"("say \"hi\"\n")"));
}

TEST(StringFormatTest, DatesTimesAndUuids) {
  Language date(StringFormatContent("date").value());
  EXPECT_TRUE(date.Matches("2026-12-02"));
  EXPECT_FALSE(date.Matches("2026-13-02"));
  EXPECT_FALSE(date.Matches("2026-12-32"));
  Language dt(StringFormatContent("date-time").value());
  EXPECT_TRUE(dt.Matches("2026-12-02T18:59:40Z"));
  EXPECT_TRUE(dt.Matches("2026-12-02T18:59:40.123+01:00"));
  EXPECT_FALSE(dt.Matches("2026-12-02T24:00:00Z"));
  Language uuid(StringFormatContent("uuid").value());
  EXPECT_TRUE(uuid.Matches("123e4567-e89b-12d3-a456-426614174000"));
  EXPECT_FALSE(uuid.Matches("123e4567e89b12d3a456426614174000"));
  const Result<ExprPtr> email = StringFormatContent("email");
  ASSERT_FALSE(email.ok());
  EXPECT_NE(email.status().message().find("'email' is not supported"), std::string::npos);
}

}  // namespace
}  // namespace pier::grammar
