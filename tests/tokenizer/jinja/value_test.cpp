// Python value semantics of Pier's Jinja engine (expected strings are CPython's outputs).
#include "tokenizer/jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tokenizer/jinja/strings.h"

namespace pier::tokenizer::jinja {
namespace {

TEST(JinjaValueTest, FormatFloatMatchesPythonRepr) {
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(0.1), "0.1");
  EXPECT_EQ(FormatFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatFloat(1e-5), "1e-05");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(FormatFloat(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatFloat(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatFloat(-0.0), "-0.0");
  EXPECT_EQ(FormatFloat(INFINITY), "inf");
  EXPECT_EQ(FormatFloat(NAN), "nan");
}

TEST(JinjaValueTest, ReprChoosesQuotesAndEscapesLikePython) {
  EXPECT_EQ(Repr(Value::String("it's")), "\"it's\"");
  EXPECT_EQ(Repr(Value::String("say \"hi\"")), "'say \"hi\"'");
  EXPECT_EQ(Repr(Value::String("both ' \"")), "'both \\' \"'");
  EXPECT_EQ(Repr(Value::String("tab\tnl\n\x01 é 👋")), "'tab\\tnl\\n\\x01 é 👋'");
  EXPECT_EQ(Repr(Value::String("nbsp\xC2\xA0")), "'nbsp\\xa0'");
  EXPECT_EQ(Repr(Value::List({Value::Int(1)}, /*is_tuple=*/true)), "(1,)");
}

TEST(JinjaValueTest, ToJsonMatchesJsonDumps) {
  DictData d;
  d.Set("b", Value::List({Value::Float(1.0), Value::None(), Value::Bool(true)}));
  d.Set(*EncodeKey(Value::Int(2)), Value::String("é\x1f"));
  Value v = Value::Dict(std::move(d));
  EXPECT_EQ(*ToJson(v, -1, false), "{\"b\": [1.0, null, true], \"2\": \"é\\u001f\"}");
  EXPECT_EQ(*ToJson(v, 1, false),
            "{\n \"b\": [\n  1.0,\n  null,\n  true\n ],\n \"2\": \"é\\u001f\"\n}");
  EXPECT_FALSE(ToJson(Value::Undefined("x"), -1, false).ok());
}

TEST(JinjaValueTest, DictKeysRoundTripWithoutCollidingWithStrings) {
  EXPECT_EQ(Repr(DecodeKey(*EncodeKey(Value::Int(-3)))), "-3");
  EXPECT_EQ(Repr(DecodeKey(*EncodeKey(Value::Float(1.5)))), "1.5");
  EXPECT_EQ(*EncodeKey(Value::Float(2.0)), *EncodeKey(Value::Int(2)));  // 2.0 == 2 in Python
  std::string tricky(1, '\0');
  tricky += "i5";
  EXPECT_NE(*EncodeKey(Value::String(tricky)), *EncodeKey(Value::Int(5)));
  EXPECT_EQ(DecodeKey(*EncodeKey(Value::String(tricky))).string_value(), tricky);
  EXPECT_FALSE(EncodeKey(Value::List({})).has_value());
}

TEST(JinjaValueTest, EqualityAndOrderingFollowPython) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::List({}), Value::List({}, true)));
  EXPECT_FALSE(Equals(Value::String("1"), Value::Int(1)));
  EXPECT_EQ(*Compare(Value::String("a"), Value::String("b")), -1);
  EXPECT_FALSE(Compare(Value::Int(1), Value::String("a")).ok());
}

TEST(JinjaStringTest, StripAndSplitUseUnicodeWhitespace) {
  EXPECT_EQ(PyStrip("\u3000\t x \u00a0\n", std::nullopt, true, true), "x");
  EXPECT_EQ(PyStrip("xxaxx", std::string("x"), true, false), "axx");
  auto parts = PySplit(" a\u2003b  c ", std::nullopt, -1, false);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1], "b");
  parts = PySplit(" a  b c ", std::nullopt, 1, false);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1], "b c ");
  parts = PySplit("a-b-c", std::string("-"), 1, true);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], "a-b");
}

TEST(JinjaStringTest, CountsCodePointsNotBytes) {
  EXPECT_EQ(CodepointCount("h€llo👋"), 6u);
  EXPECT_EQ(PyFind("€a€b", "b", false), 3);
  EXPECT_EQ(PyUpper("straße é"), "STRASSE É");
  EXPECT_EQ(PyTitle("ßa"), "Ssa");
  EXPECT_EQ(PyTitle("hello wORLD-x y_z"), "Hello World-X Y_Z");
  EXPECT_EQ(PyReplace("abc", "", "-", -1), "-a-b-c-");
}

}  // namespace
}  // namespace pier::tokenizer::jinja
