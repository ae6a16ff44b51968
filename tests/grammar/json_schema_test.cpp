#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <random>
#include <string>

#include "grammar/constraint.h"
#include "grammar/decimal_integer.h"
#include "grammar_test_util.h"

namespace pier::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::Language;

ExprPtr Schema(const char* text) {
  Result<ExprPtr> e = JsonSchemaExpr(Json::parse(text));
  EXPECT_TRUE(e.ok()) << text << ": " << e.status().ToString();
  return e.ok() ? *e : Nothing();
}

Status SchemaError(const char* text) { return JsonSchemaExpr(Json::parse(text)).status(); }

TEST(JsonSchemaTest, ObjectsKeepOrderRequiredAndBounds) {
  Language lang(Schema(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
      "email":{"type":"string"}},"required":["name","age"],"additionalProperties":false})"));
  EXPECT_TRUE(lang.Matches(R"({"name":"Ada","age":36})"));
  EXPECT_TRUE(lang.Matches(R"({ "name": "Ada", "age": 36, "email": "a@b.c" })"));
  EXPECT_TRUE(lang.Matches("{\n  \"name\": \"Ada\",\n  \"age\": 0\n}"));
  EXPECT_FALSE(lang.Matches(R"({"age":36,"name":"Ada"})"));  // the schema's order
  EXPECT_FALSE(lang.Matches(R"({"name":"Ada"})"));
  EXPECT_FALSE(lang.Matches(R"({"name":"Ada","age":151})"));
  EXPECT_FALSE(lang.Matches(R"({"name":"Ada","age":-1})"));
  EXPECT_FALSE(lang.Matches(R"({"name":"Ada","age":3,})"));
  EXPECT_FALSE(lang.Matches(R"({"name":"Ada","age":3,"x":1})"));
}

// "x-pier-compact": true at the root: no whitespace between the schema's own tokens, nested
// objects and arrays included; a free-form value inside keeps JSON's.
TEST(JsonSchemaTest, TheCompactKeywordLeavesNoWhitespaceInTheFrame) {
  const std::string properties =
      R"("type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},)"
      R"("b":{"type":"object","properties":{"c":{"type":"string"}},"required":["c"]},"free":{}},)"
      R"("required":["a","b"])";
  Language spaced(Schema(("{" + properties + "}").c_str()));
  Language compact(Schema(("{" + properties + R"(,"x-pier-compact":true})").c_str()));
  for (const char* text :
       {R"({"a":[1,2],"b":{"c":"x"}})", R"({"a":[],"b":{"c":""},"free":{ "k": 1 }})"}) {
    EXPECT_TRUE(spaced.Matches(text)) << text;
    EXPECT_TRUE(compact.Matches(text)) << text;
  }
  for (const char* text : {R"({ "a":[1,2],"b":{"c":"x"}})", R"({"a": [1,2],"b":{"c":"x"}})",
                           R"({"a":[1, 2],"b":{"c":"x"}})", R"({"a":[1,2],"b":{"c":"x"} })",
                           "{\"a\":[1,2],\n\"b\":{\"c\":\"x\"}}"}) {
    EXPECT_TRUE(spaced.Matches(text)) << text;
    EXPECT_FALSE(compact.Matches(text)) << text;
  }
}

TEST(JsonSchemaTest, EveryOrderedSubsetOfOptionalPropertiesWithCorrectCommas) {
  Language lang(Schema(R"({"type":"object","properties":{
      "a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}}})"));
  const char* names[] = {"a", "b", "c"};
  for (int subset = 0; subset < 8; ++subset) {
    std::string s = "{";
    bool first = true;
    for (int i = 0; i < 3; ++i) {
      if ((subset >> i & 1) == 0) continue;
      s += std::string(first ? "" : ",") + "\"" + names[i] + "\":1";
      first = false;
    }
    s += "}";
    EXPECT_TRUE(lang.Matches(s)) << s;
  }
  EXPECT_FALSE(lang.Matches(R"({,"a":1})"));
  EXPECT_FALSE(lang.Matches(R"({"a":1,,"b":1})"));
  EXPECT_FALSE(lang.Matches(R"({"a":1"b":1})"));
}

TEST(JsonSchemaTest, ExclusiveBoundsInBothDraftSpellings) {
  Language modern(Schema(R"({"type":"integer","exclusiveMinimum":0,"maximum":3})"));
  EXPECT_FALSE(modern.Matches("0"));
  EXPECT_TRUE(modern.Matches("1"));
  EXPECT_TRUE(modern.Matches("3"));
  EXPECT_FALSE(modern.Matches("4"));
  Language draft4(Schema(R"({"type":"integer","minimum":0,"exclusiveMinimum":true})"));
  EXPECT_FALSE(draft4.Matches("0"));
  EXPECT_TRUE(draft4.Matches("1"));
  Language number(Schema(R"({"type":"number","minimum":0,"exclusiveMaximum":2})"));
  EXPECT_TRUE(number.Matches("1.99"));
  EXPECT_TRUE(number.Matches("0"));
  EXPECT_FALSE(number.Matches("2"));
  EXPECT_FALSE(number.Matches("2.5"));
}

// Matches exactly the listed texts among `inside` and `outside`.
void ExpectMembers(const char* schema, std::initializer_list<const char*> inside,
                   std::initializer_list<const char*> outside) {
  Language lang(Schema(schema));
  for (const char* x : inside) EXPECT_TRUE(lang.Matches(x)) << x << " under " << schema;
  for (const char* x : outside) EXPECT_FALSE(lang.Matches(x)) << x << " under " << schema;
}

TEST(JsonSchemaTest, IntegerBoundsOfAnySizeAreHonouredExactly) {
  // Issue #41: a bound of 1e18 or more was dropped (any integer allowed), 1e16-1e17 refused.
  ExpectMembers(R"({"type":"integer","minimum":1000000000000000000})",
                {"1000000000000000000", "1000000000000000001", "9999999999999999999"},
                {"1234567890479678", "999999999999999999", "0", "-1000000000000000000"});
  ExpectMembers(R"({"type":"integer","minimum":1e18,"maximum":1000000000000000005})",
                {"1000000000000000000", "1000000000000000003", "1000000000000000005"},
                {"999999999999999999", "1000000000000000006", "1000000000000000010", "1"});
  ExpectMembers(R"({"type":"integer","minimum":1e16,"maximum":1e17})",
                {"10000000000000000", "55555555555555555", "100000000000000000"},
                {"9999999999999999", "100000000000000001"});
  // -1e20 is beyond 64 bits (a double, exactly 10^20).
  ExpectMembers(R"({"type":"integer","minimum":-100000000000000000000,"maximum":5})",
                {"-100000000000000000000", "-99999999999999999999", "-1", "0", "5"},
                {"-100000000000000000001", "6", "-0", "-1000000000000000000000"});
  ExpectMembers(R"({"type":"integer","maximum":-10000000000000000000})",
                {"-10000000000000000000", "-10000000000000000001", "-99999999999999999999"},
                {"-9999999999999999999", "-1", "0", "5", "10000000000000000000"});
  // 1e25 is no double: it reads as 10000000000000000905969664, which is above 10^25. The
  // tighter reading is the bound, so the output is valid whichever one a validator takes.
  ExpectMembers(R"({"type":"integer","minimum":1e25})",
                {"10000000000000000905969664", "99999999999999999999999999"},
                {"10000000000000000000000000", "10000000000000000905969663",
                 "9999999999999999999999999", "0"});
  // 1e24 reads as 999999999999999983222784, below 10^24: 10^24 is the bound. The maximum reads
  // as 1000000000000000117440512, above 10^24 + 10^8 as written.
  ExpectMembers(
      R"({"type":"integer","minimum":1e24,"maximum":1.0000000000000001e24})",
      {"1000000000000000000000000", "1000000000000000000000001", "1000000000000000100000000"},
      {"999999999999999983222784", "999999999999999999999999", "1000000000000000100000001",
       "1000000000000000117440512"});
  ExpectMembers(R"({"type":"integer","maximum":1e24})", {"999999999999999983222784", "-5"},
                {"999999999999999983222785", "1000000000000000000000000"});
}

TEST(JsonSchemaTest, ExclusiveAndFractionalIntegerBoundsOfAnySize) {
  ExpectMembers(
      R"({"type":"integer","exclusiveMinimum":1e18,"exclusiveMaximum":18446744073709551615})",
      {"1000000000000000001", "18446744073709551614"},
      {"1000000000000000000", "18446744073709551615"});
  ExpectMembers(R"({"type":"integer","minimum":1e18,"exclusiveMinimum":true})",
                {"1000000000000000001"}, {"1000000000000000000"});
  ExpectMembers(R"({"type":"integer","exclusiveMaximum":-1e19})", {"-10000000000000000001"},
                {"-10000000000000000000", "-9999999999999999999"});
  // Both spellings at once: the tighter one holds.
  ExpectMembers(R"({"type":"integer","minimum":-9223372036854775808,"exclusiveMinimum":-1e19,
                    "maximum":100,"exclusiveMaximum":7})",
                {"-9223372036854775808", "6"}, {"-9223372036854775809", "7"});
  ExpectMembers(R"({"type":"integer","minimum":1.5,"maximum":4.5})", {"2", "4"}, {"1", "5"});
  ExpectMembers(R"({"type":"integer","exclusiveMinimum":-2.5,"exclusiveMaximum":2.0})", {"-2", "1"},
                {"-3", "2"});
  ExpectMembers(R"({"type":"integer","minimum":-0.5,"maximum":0.5})", {"0"}, {"-0", "1", "-1"});
  // 1.7976931348623157e308 is the largest double: all 309 of its digits hold.
  Language huge(Schema(R"({"type":"integer","minimum":1.7976931348623157e308})"));
  const std::string max_double = CeilOf(1.7976931348623157e308).ToString();
  EXPECT_TRUE(huge.Matches(max_double));
  EXPECT_FALSE(huge.Matches(max_double.substr(0, 308) + "7"));  // one less
  EXPECT_FALSE(huge.Matches("1" + std::string(307, '0')));
}

TEST(JsonSchemaTest, AnEmptyIntegerRangeIsRefusedNamingIt) {
  const Status s = SchemaError(R"({"type":"integer","minimum":1e18,"maximum":999999999999999999})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[1000000000000000000, 999999999999999999] is empty"),
            std::string::npos)
      << s.message();
  EXPECT_NE(SchemaError(R"({"type":"integer","exclusiveMinimum":"1"})")
                .message()
                .find("'exclusiveMinimum' must be a number"),
            std::string::npos);
}

TEST(JsonSchemaTest, EnumConstAnyOfAndNullableTypes) {
  Language e(Schema(R"({"enum":["red","green",3,null,{"k":[1]}]})"));
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"})
    EXPECT_TRUE(e.Matches(ok)) << ok;
  EXPECT_FALSE(e.Matches(R"("blue")"));
  Language c(Schema(R"({"const":"fixed"})"));
  EXPECT_TRUE(c.Matches(R"("fixed")"));
  EXPECT_FALSE(c.Matches(R"("other")"));
  Language any_of(Schema(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"null"}]})"));
  EXPECT_TRUE(any_of.Matches("null"));
  EXPECT_TRUE(any_of.Matches(R"("ab")"));
  EXPECT_FALSE(any_of.Matches(R"("abc")"));
  Language types(Schema(R"({"type":["boolean","null"]})"));
  EXPECT_TRUE(types.Matches("true"));
  EXPECT_TRUE(types.Matches("null"));
  EXPECT_FALSE(types.Matches("0"));
}

TEST(JsonSchemaTest, ArraysCountTheirItems) {
  Language lang(Schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})"));
  EXPECT_FALSE(lang.Matches("[]"));
  EXPECT_TRUE(lang.Matches("[1]"));
  EXPECT_TRUE(lang.Matches("[1, 2, 3]"));
  EXPECT_FALSE(lang.Matches("[1,2,3,4]"));
  EXPECT_FALSE(lang.Matches(R"(["a"])"));
}

TEST(JsonSchemaTest, RecursiveRefsUnrollAndNeedABaseCase) {
  Language tree(Schema(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v","kids"]}},"$ref":"#/$defs/node"})"));
  EXPECT_TRUE(tree.Matches(R"({"v":1,"kids":[]})"));
  EXPECT_TRUE(tree.Matches(R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[]}]})"));
  const Status no_base = SchemaError(R"({"$defs":{"n":{"type":"object","properties":{
      "next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"})");
  ASSERT_FALSE(no_base.ok());
  EXPECT_NE(no_base.message().find("without a base case"), std::string::npos) << no_base.message();
  const Status dangling = SchemaError(R"({"$ref":"#/$defs/missing"})");
  EXPECT_NE(dangling.message().find("points at nothing"), std::string::npos) << dangling.message();
  const Status remote = SchemaError(R"({"$ref":"https://example.com/s.json"})");
  EXPECT_NE(remote.message().find("only references into the same schema"), std::string::npos);
}

TEST(JsonSchemaTest, WhatCannotBeEnforcedIsRefusedWithKeywordAndPlace) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"x":{"oneOf":[{"type":"string"}]}}})",
       "'oneOf' is not supported (at #/properties/x)"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems' is not supported (at #)"},
      {R"({"type":"number","multipleOf":3})", "'multipleOf' is not supported"},
      {R"({"not":{"type":"string"}})", "'not' is not supported"},
      {R"({"type":"string","format":"email"})", "string format 'email' is not supported"},
      {R"({"type":"strin"})", "unknown type 'strin'"},
      {R"({"type":"number","minimum":0.5})", "must be a whole number"},
      {R"({"type":"number","minimum":0,"exclusiveMaximum":1e18})", "whole number below 1e15"},
      {R"js({"type":"string","pattern":"(?=x)"})js", "lookaround"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "maxItems is below minItems"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})",
       "required property 'x' is not in 'properties'"},
      {R"(7)", "a schema must be an object or a boolean"},
  };
  for (const auto& [schema, reason] : cases) {
    const Status s = SchemaError(schema);
    ASSERT_FALSE(s.ok()) << schema;
    // Valid JSON Schema that Pier cannot enforce is UNSUPPORTED; a schema that is not valid
    // (or admits nothing) is INVALID_ARGUMENT.
    const std::string why = reason;
    const bool unsupported = why.find("not supported") != std::string::npos ||
                             why == "lookaround" || why.find("whole number") != std::string::npos;
    EXPECT_EQ(s.code(), unsupported ? StatusCode::kUnsupported : StatusCode::kInvalidArgument)
        << schema << ": " << s.ToString();
    EXPECT_NE(s.message().find(reason), std::string::npos) << schema << ": " << s.message();
  }
  // Annotations are not validation: they are ignored.
  EXPECT_TRUE(
      JsonSchemaExpr(
          Json::parse(
              R"({"title":"T","description":"d","type":"string","default":"x","examples":["y"]})"))
          .ok());
}

TEST(JsonSchemaTest, FreeFormObjectsAreJsonAndBoundedInDepth) {
  Language lang(AnyJsonObject(3));
  EXPECT_TRUE(lang.Matches(R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(lang.Matches(R"([1])"));
  EXPECT_FALSE(lang.Matches(R"({"a":[[[1]]]})"));  // deeper than 3
  std::mt19937_64 rng(5);
  int parsed = 0;
  for (int i = 0; i < 300; ++i) {
    std::string s;
    if (!lang.Sample(&rng, &s, 0.15)) continue;
    const Json j = Json::parse(s, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << s;
    ASSERT_TRUE(j.is_object()) << s;
    ++parsed;
  }
  EXPECT_GT(parsed, 100);
}

TEST(JsonSchemaTest, SampledOutputsOfASchemaParseAndHoldItsConstraints) {
  Language lang(Schema(R"({"type":"object","properties":{
      "id":{"type":"string","format":"uuid"},
      "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
      "score":{"type":"number","minimum":0,"maximum":1},
      "kind":{"anyOf":[{"const":"x"},{"type":"integer","exclusiveMinimum":5}]}},
      "required":["id","tags","score","kind"]})"));
  std::mt19937_64 rng(9);
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    if (!lang.Sample(&rng, &s, 0.3)) continue;
    const Json j = Json::parse(s, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << s;
    ASSERT_EQ(j.size(), 4u) << s;
    EXPECT_EQ(j["id"].get<std::string>().size(), 36u);
    EXPECT_LE(j["tags"].size(), 3u);
    EXPECT_GE(j["score"].get<double>(), 0.0);
    EXPECT_LE(j["score"].get<double>(), 1.0);
    EXPECT_TRUE(j["kind"] == "x" || j["kind"].get<int64_t>() > 5) << s;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(ConstraintTest, BadSchemasAreRefusedBeforeCompiling) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kJsonSchema;
  c.schema = "{not json";
  EXPECT_NE(ConstraintExpr(c).status().message().find("not valid JSON"), std::string::npos);
  c.schema = std::string(kMaxSchemaBytes + 1, ' ');
  EXPECT_NE(ConstraintExpr(c).status().message().find("at most"), std::string::npos);
  c.kind = OutputConstraint::Kind::kJsonObject;
  EXPECT_TRUE(ConstraintExpr(c).ok());
  EXPECT_TRUE(CheckConstraint(c).ok());
  // Past the automaton's state limit: refused as the request's fault, not the server's.
  const Status too_large = CheckConstraint(OutputConstraint::JsonSchema(
      R"({"type":"array","items":{"type":"string","maxLength":200},"minItems":2000})"));
  EXPECT_EQ(too_large.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_large.message().find("too large"), std::string::npos) << too_large.ToString();
}

TEST(ConstraintTest, RefsThatDoubleAtEveryLevelAreRefusedQuickly) {
  // d0 .. d29, each with two properties referring to the next: 2^30 subschemas once expanded.
  nlohmann::ordered_json defs = nlohmann::ordered_json::object();
  for (int i = 0; i < 30; ++i) {
    const std::string next = "#/$defs/d" + std::to_string(i + 1);
    defs["d" + std::to_string(i)] = {
        {"type", "object"}, {"properties", {{"a", {{"$ref", next}}}, {"b", {{"$ref", next}}}}}};
  }
  defs["d30"] = {{"type", "integer"}};
  const nlohmann::ordered_json schema = {{"$ref", "#/$defs/d0"}, {"$defs", defs}};
  const Status s = CheckConstraint(OutputConstraint::JsonSchema(schema.dump()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("too complex"), std::string::npos) << s.ToString();
}

TEST(ConstraintTest, HugeIntegerBoundsSurviveTheRequestsParseAndDump) {
  // The HTTP layer parses the body and passes the schema on as its dump: a bound read as a
  // double (1e+20 for 100000000000000000000) must come back as the same double.
  const Json body = Json::parse(
      R"({"schema":{"type":"integer","minimum":100000000000000000000,"maximum":1e20}})");
  const OutputConstraint c = OutputConstraint::JsonSchema(body["schema"].dump());
  testing::Language l(ConstraintExpr(c).value());
  EXPECT_TRUE(l.Matches("100000000000000000000"));
  EXPECT_FALSE(l.Matches("99999999999999999999"));
  EXPECT_FALSE(l.Matches("100000000000000000001"));
  EXPECT_FALSE(l.Matches("1234567890479678"));
}

TEST(ConstraintTest, PrefixAndSuffixWrapTheValue) {
  OutputConstraint c = OutputConstraint::JsonSchema(R"({"type":"integer","maximum":99})");
  c.prefix = "<tool_call>\n";
  c.suffix = "\n</tool_call>";
  testing::Language l(ConstraintExpr(c).value());
  EXPECT_TRUE(l.Matches("<tool_call>\n42\n</tool_call>"));
  EXPECT_FALSE(l.Matches("42"));
  EXPECT_FALSE(l.Matches("<tool_call>\n42"));
  EXPECT_FALSE(l.Matches("<tool_call>\n420\n</tool_call>"));
}

}  // namespace
}  // namespace pier::grammar
