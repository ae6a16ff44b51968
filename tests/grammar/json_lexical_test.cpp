#include "grammar/json_lexical.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>

#include "grammar/nfa.h"
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

std::optional<DecimalInteger> Int(const char* text) { return DecimalInteger::Parse(text); }

TEST(JsonIntegerTest, SignedRanges) {
  Language lang(JsonInteger(Int("-12"), Int("7")).value());
  for (int x = -30; x <= 30; ++x)
    EXPECT_EQ(lang.Matches(std::to_string(x)), x >= -12 && x <= 7) << x;
  EXPECT_FALSE(lang.Matches("-0"));
  Language negative(JsonInteger(Int("-500"), Int("-20")).value());
  for (int x = -600; x <= 0; ++x)
    EXPECT_EQ(negative.Matches(std::to_string(x)), x >= -500 && x <= -20) << x;
  Language unbounded(JsonInteger(std::nullopt, std::nullopt).value());
  EXPECT_TRUE(unbounded.Matches("-1234567890123456"));
  EXPECT_FALSE(unbounded.Matches("12345678901234567"));  // 17 digits
  EXPECT_FALSE(unbounded.Matches("1.5"));
  const Status empty = JsonInteger(Int("5"), Int("4")).status();
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("[5, 4] is empty"), std::string::npos) << empty.message();
}

// The reference: signed decimal strings (no leading zeros, no "-0") compared as numbers, written
// apart from DecimalInteger so that the two can disagree.
int CompareDecimal(const std::string& a, const std::string& b) {
  const bool an = a[0] == '-';
  const bool bn = b[0] == '-';
  if (an != bn) return an ? -1 : 1;
  const std::string am = an ? a.substr(1) : a;
  const std::string bm = bn ? b.substr(1) : b;
  int c = am.size() != bm.size() ? (am.size() < bm.size() ? -1 : 1) : am.compare(bm);
  c = c < 0 ? -1 : c > 0 ? 1 : 0;
  return an ? -c : c;
}

std::string RandomDecimal(std::mt19937_64* rng, size_t max_digits, bool may_be_negative) {
  const size_t n = 1 + (*rng)() % max_digits;
  std::string s(1, static_cast<char>('1' + (*rng)() % 9));
  for (size_t i = 1; i < n; ++i) s += static_cast<char>('0' + (*rng)() % 10);
  if ((*rng)() % 8 == 0) s = "1" + std::string(n - 1, '0');  // round numbers: 10^k
  if ((*rng)() % 8 == 0) s = std::string(n, '9');            // and 10^k - 1
  if ((*rng)() % 20 == 0) s = "0";
  if (may_be_negative && s != "0" && (*rng)() % 2 == 0) s = "-" + s;
  return s;
}

// Near `x`: the number itself, one digit changed, one digit more or less, the sign flipped.
std::string Perturb(std::mt19937_64* rng, std::string x) {
  const bool negative = x[0] == '-';
  std::string m = negative ? x.substr(1) : x;
  switch ((*rng)() % 5) {
    case 0:
      break;
    case 1: {
      const size_t i = (*rng)() % m.size();
      m[i] = static_cast<char>('0' + (*rng)() % 10);
      if (m.size() > 1 && m[0] == '0') m[0] = '1';
      break;
    }
    case 2:
      if (m != "0") m += static_cast<char>('0' + (*rng)() % 10);
      break;
    case 3:
      if (m.size() > 1) m.pop_back();
      break;
    case 4:
      return m == "0" ? x : negative ? m : "-" + m;
  }
  return (negative && m != "0" ? "-" : "") + m;
}

TEST(JsonIntegerTest, RandomBoundsOfAnySizeAgreeWithDecimalComparison) {
  std::mt19937_64 rng(41);
  for (int round = 0; round < 120; ++round) {
    std::string a = RandomDecimal(&rng, 60, true);
    std::string b = RandomDecimal(&rng, 60, true);
    if (CompareDecimal(a, b) > 0) std::swap(a, b);
    const bool has_min = round % 5 != 1;
    const bool has_max = round % 5 != 2;
    Language lang(JsonInteger(has_min ? Int(a.c_str()) : std::nullopt,
                              has_max ? Int(b.c_str()) : std::nullopt)
                      .value());
    auto inside = [&](const std::string& x) {
      return (!has_min || CompareDecimal(x, a) >= 0) && (!has_max || CompareDecimal(x, b) <= 0);
    };
    for (int i = 0; i < 200; ++i) {
      const std::string x = Perturb(&rng, i % 3 == 0   ? a
                                          : i % 3 == 1 ? b
                                                       : RandomDecimal(&rng, 60, true));
      // Digits of the longer bound given, or 16 (a sign does not count).
      const size_t width = std::max({size_t{16}, has_min ? a.size() - (a[0] == '-') : 0,
                                     has_max ? b.size() - (b[0] == '-') : 0});
      const bool in_width = x.size() - (x[0] == '-' ? 1 : 0) <= width;
      // Beyond the bounds' width an unbounded end stops; within it, exactly the range.
      EXPECT_EQ(lang.Matches(x), in_width && inside(x)) << x << " in [" << a << ", " << b << "]";
    }
    // Members drawn from the automaton itself are inside.
    for (int i = 0; i < 30; ++i) {
      std::string x;
      ASSERT_TRUE(lang.Sample(&rng, &x, 0.1));
      EXPECT_TRUE(inside(x)) << x << " in [" << a << ", " << b << "]";
    }
  }
}

TEST(JsonIntegerTest, AHugeRangeCompilesToAFewStatesPerDigit) {
  // Bounds of d digits cost O(d log d) states, not one tail per digit (O(d^2)) and never
  // anything in the size of the range: 300 digits fit easily within the default NFA limit.
  std::mt19937_64 rng(3);
  auto states = [&](size_t digits) {
    std::string lo(1, '-');
    std::string hi(1, '1');
    for (size_t i = 0; i < digits; ++i) lo += static_cast<char>('1' + rng() % 9);
    for (size_t i = 1; i < digits; ++i) hi += static_cast<char>('0' + rng() % 10);
    return CompileNfa(*JsonInteger(Int(lo.c_str()), Int(hi.c_str())).value()).value().states.size();
  };
  const size_t small = states(30);
  const size_t large = states(300);
  EXPECT_LT(large, 40'000u);
  EXPECT_LT(large, 20 * small) << small << " states for 30 digits, " << large << " for 300";
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
