// The body pre-scan: nesting and object sizes are bounded before any DOM is built; strings
// (with escapes) do not count; the request parsers answer 400 with its message.
#include "api/json_shape.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/openai/openai_request.h"
#include "api/responses/responses_request.h"

namespace pier::api {
namespace {

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string ObjectOf(int members) {
  std::string s = "{";
  for (int i = 0; i < members; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  return s + "}";
}

std::string ParseFailure(const std::string& text, std::string_view where = "") {
  try {
    if (nlohmann::json::parse(text).is_discarded()) return "discarded";
  } catch (const nlohmann::json::exception& e) {
    return InvalidJsonMessage(e, where);
  }
  return "parsed";
}

TEST(JsonShapeTest, InvalidJsonSaysWhatIsWrongAtWhichByte) {
  // Cut short: the offset is the text's length.
  EXPECT_EQ(ParseFailure(R"({"a": 1)", "the header"),
            "invalid JSON in the header at byte offset 7: syntax error while parsing object - "
            "unexpected end of input; expected '}'");
  // The offset of the byte the parser stopped at (the 1 where ':' belongs).
  EXPECT_EQ(ParseFailure(R"({"a" 1})").rfind("invalid JSON at byte offset 5: ", 0), 0u);
  // Not a syntax error (no offset): still without the library's prefix.
  EXPECT_EQ(ParseFailure("[1e999]"), "invalid JSON: number overflow parsing '1e999'");
}

TEST(JsonShapeTest, DepthAndObjectSizeAreBounded) {
  EXPECT_FALSE(CheckJsonShape(Nested(256)).has_value());
  EXPECT_NE(CheckJsonShape(Nested(257)).value_or("").find("deeper than 256"), std::string::npos);
  EXPECT_FALSE(CheckJsonShape(ObjectOf(4096)).has_value());
  EXPECT_NE(CheckJsonShape(ObjectOf(4097)).value_or("").find("more than 4096 members"),
            std::string::npos);
  // Arrays may be long (prompts of token ids); strings hide their brackets, escapes included.
  EXPECT_FALSE(CheckJsonShape("[" + std::string(100000, '1') + "]").has_value());
  EXPECT_FALSE(
      CheckJsonShape("{\"a\":\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}")
          .has_value());
}

TEST(JsonShapeTest, HostileBodiesAre400sNotCrashes) {
  // 100,000 levels in a schema: copying or dumping it would overflow the stack.
  const std::string deep = R"({"messages":[{"role":"user","content":"x"}],"response_format":)"
                           R"({"type":"json_schema","json_schema":{"schema":{"a":)" +
                           Nested(100000) + "}}}}";
  OpenAiParseResult r = ParseChatCompletionRequest(deep);
  ASSERT_TRUE(std::holds_alternative<OpenAiError>(r));
  EXPECT_EQ(std::get<OpenAiError>(r).status, 400);
  EXPECT_NE(std::get<OpenAiError>(r).message.find("nests deeper"), std::string::npos);
  r = ParseResponsesRequest(R"({"input":)" + Nested(100000) + "}");
  ASSERT_TRUE(std::holds_alternative<OpenAiError>(r));
  // 100,000 keys in one object: ordered parsing would take seconds.
  r = ParseChatCompletionRequest(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":)" +
                                 ObjectOf(100000) + "}");
  ASSERT_TRUE(std::holds_alternative<OpenAiError>(r));
  EXPECT_NE(std::get<OpenAiError>(r).message.find("members"), std::string::npos);
}

}  // namespace
}  // namespace pier::api
