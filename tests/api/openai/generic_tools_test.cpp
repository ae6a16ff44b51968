// Generic tool calling (generic_tools.h): the grammar admits only the form's two answers (a
// tool_calls object of allowed calls, or a response), every answer it admits reads back, a
// streamed response is unwrapped piece by piece into the same text as the whole, and the
// conversation's tool turns render in the form.
#include "api/openai/generic_tools.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../../grammar/grammar_test_util.h"
#include "grammar/constraint.h"

namespace pier::api {
namespace {

using nlohmann::json;

std::vector<FunctionTool> Tools() {
  return {{"get_weather", "Weather in a city",
           R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},)"
           R"("unit":{"enum":["celsius","fahrenheit"]}},"required":["city","unit"],)"
           R"("$defs":{"unused":{"type":"string"}}})"},
          {"add", "",
           R"({"type":"object","properties":{"a":{"$ref":"#/$defs/n"},"b":{"$ref":"#/$defs/n"}},)"
           R"("required":["a","b"],"$defs":{"n":{"type":"integer"}}})"},
          {"ping", "", ""}};
}

grammar::testing::Language LanguageOf(const grammar::OutputConstraint& c) {
  EXPECT_TRUE(grammar::CheckConstraint(c).ok()) << grammar::CheckConstraint(c).ToString();
  return grammar::testing::Language(grammar::ConstraintExpr(c).value());
}

// Pushes `text` in pieces of 1..4 bytes; returns the released content and the final parse.
ParsedToolCalls Stream(std::string_view text, std::mt19937_64* rng, std::string* released) {
  ToolCallSplitter splitter(ToolCallFormat::kGeneric);
  released->clear();
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + (*rng)() % 4);
    *released += splitter.Push(text.substr(at, n));
    at += n;
  }
  return splitter.Finish(Tools());
}

TEST(GenericToolsTest, AutoAdmitsOnlyCallsOrAResponseAndEveryAnswerReadsBack) {
  std::mt19937_64 rng(11);
  for (bool parallel : {true, false}) {
    SCOPED_TRACE(parallel ? "parallel" : "one call");
    grammar::testing::Language language =
        LanguageOf(GenericToolConstraint(Tools(), ToolChoice{ToolChoiceKind::kAuto, ""}, parallel));
    EXPECT_TRUE(language.Matches(R"({"response":"Hi \"you\"\n"})"));
    EXPECT_FALSE(language.Matches(R"({ "response":"x"})")) << "no whitespace in the frame";
    EXPECT_FALSE(language.Matches("{\"tool_calls\":[\n{\"name\":\"ping\",\"arguments\":{}}]}"));
    EXPECT_TRUE(language.Matches(R"({"tool_calls":[{"name":"ping","arguments":{}}]})"));
    EXPECT_EQ(language.Matches(R"({"tool_calls":[{"name":"ping","arguments":{}},)"
                               R"({"name":"add","arguments":{"a":1,"b":2}}]})"),
              parallel);
    for (const char* refused :
         {"Hello", R"({"answer":"x"})", R"({"tool_calls":[]})", R"({"response":"x","n":1})",
          R"({"tool_calls":[{"name":"rm_rf","arguments":{}}]})",
          R"({"tool_calls":[{"name":"add","arguments":{"a":"one","b":2}}]})", R"(["x"])"}) {
      EXPECT_FALSE(language.Matches(refused)) << refused;
    }
    int calls = 0;
    int responses = 0;
    for (int i = 0; i < 80; ++i) {
      std::string out;
      if (!language.Sample(&rng, &out, 0.3)) continue;
      const ParsedToolCalls whole = ParseGenericToolOutput(out, Tools());
      if (whole.calls.empty()) {
        ++responses;
        EXPECT_EQ(json::parse(out).at("response"), whole.content) << out;
      } else {
        ++calls;
        EXPECT_TRUE(whole.content.empty()) << out;
        if (!parallel) {
          EXPECT_EQ(whole.calls.size(), 1u) << out;
        }
      }
      // Streamed in pieces: the same calls, the same text.
      std::string released;
      const ParsedToolCalls streamed = Stream(out, &rng, &released);
      EXPECT_EQ(released + streamed.content, whole.content) << out;
      ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << out;
      for (size_t k = 0; k < whole.calls.size(); ++k) {
        EXPECT_EQ(streamed.calls[k].name, whole.calls[k].name);
        EXPECT_EQ(streamed.calls[k].arguments, whole.calls[k].arguments);
      }
    }
    EXPECT_GT(calls, 10);
    EXPECT_GT(responses, 10);
  }
}

TEST(GenericToolsTest, RequiredAndNamedAdmitOneCallInACompactFrame) {
  std::mt19937_64 rng(5);
  grammar::testing::Language named =
      LanguageOf(GenericToolConstraint(Tools(), ToolChoice{ToolChoiceKind::kNamed, "add"}, true));
  EXPECT_TRUE(named.Matches(R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":-2}}]})"));
  EXPECT_FALSE(named.Matches(R"({ "tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})"))
      << "no whitespace in the frame";
  EXPECT_FALSE(named.Matches(R"({"tool_calls":[{"name":"ping","arguments":{}}]})"));
  EXPECT_FALSE(named.Matches(R"({"response":"no"})"));
  grammar::testing::Language required =
      LanguageOf(GenericToolConstraint(Tools(), ToolChoice{ToolChoiceKind::kRequired, ""}, true));
  EXPECT_FALSE(required.Matches(R"({"response":"no"})"));
  EXPECT_FALSE(required.Matches(R"({"tool_calls":[{"name":"ping","arguments":{}},)"
                                R"({"name":"ping","arguments":{}}]})"));
  for (grammar::testing::Language* language : {&named, &required}) {
    int sampled = 0;
    for (int i = 0; i < 40; ++i) {
      std::string out;
      if (!language->Sample(&rng, &out, 0.3)) continue;
      ++sampled;
      const ParsedToolCalls p = ParseGenericToolOutput(out, Tools());
      ASSERT_EQ(p.calls.size(), 1u) << out;
      if (language == &named) {
        EXPECT_EQ(p.calls[0].name, "add");
      }
    }
    EXPECT_GT(sampled, 20);
  }
}

TEST(GenericToolsTest, AResponseIsUnwrappedAsItArrivesEscapesIncluded) {
  const std::string text = R"({ "response" : "caf\u00e9 \"x\"\\ \ud83d\ude00\n\/end"})";
  const std::string expected = "caf\xc3\xa9 \"x\"\\ \xf0\x9f\x98\x80\n/end";
  EXPECT_EQ(ParseGenericToolOutput(text, Tools()).content, expected);
  // One byte at a time: nothing is released before it is certain, all of it by the end.
  ToolCallSplitter splitter(ToolCallFormat::kGeneric);
  std::string released;
  for (char c : text) {
    released += splitter.Push(std::string(1, c));
    EXPECT_EQ(expected.substr(0, released.size()), released);
  }
  const ParsedToolCalls end = splitter.Finish(Tools());
  EXPECT_EQ(released + end.content, expected);
  EXPECT_TRUE(end.calls.empty());
}

TEST(GenericToolsTest, AnOutputCutShortHasNoCalls) {
  EXPECT_EQ(ParseGenericToolOutput(R"({"response":"Hel)", Tools()).content, "Hel");
  EXPECT_EQ(ParseGenericToolOutput(R"({"response":"a\u00)", Tools()).content, "a");
  const std::string cut = R"({"tool_calls":[{"name":"get_w)";
  const ParsedToolCalls p = ParseGenericToolOutput(cut, Tools());
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "") << "a call's JSON is the form's, not an answer";
  EXPECT_EQ(ParseGenericToolOutput("{\n  \"tool", Tools()).content, "");
  EXPECT_EQ(ParseGenericToolOutput("{", Tools()).content, "");
  // Another JSON object (the request's own response_format under auto) is content as written.
  EXPECT_EQ(ParseGenericToolOutput(R"({"city":"Oslo"})", Tools()).content, R"({"city":"Oslo"})");
  EXPECT_TRUE(ParseGenericToolOutput(R"({"tool_calls":[{"name":"nope","arguments":{}}]})", Tools())
                  .calls.empty());
}

TEST(GenericToolsTest, ToolTurnsRenderInTheForm) {
  std::vector<ChatMessage> messages(5);
  messages[0] = {"user", "Weather in Oslo and 2+3?", std::nullopt, {}, std::nullopt};
  messages[1].role = "assistant";
  messages[1].tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo","unit":"celsius"})"},
                            {"call_2", "add", R"({"a":2,"b":3})"}};
  messages[2] = {"tool", "4 degrees", std::nullopt, {}, "call_1"};
  messages[3] = {"tool", "5", std::nullopt, {}, "call_2"};
  messages[4] = {"user", "Thanks", std::nullopt, {}, std::nullopt};
  const ToolChoice automatic{ToolChoiceKind::kAuto, ""};
  const nlohmann::ordered_json out = GenericToolMessages(messages, Tools(), automatic);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(out[0]["content"], GenericToolsSystemText(Tools(), automatic));
  EXPECT_EQ(out[1]["content"], "Weather in Oslo and 2+3?");
  EXPECT_EQ(out[2]["role"], "assistant");
  EXPECT_EQ(out[2]["content"],
            R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}},)"
            R"({"name":"add","arguments":{"a":2,"b":3}}]})");
  EXPECT_FALSE(out[2].contains("tool_calls"));
  EXPECT_EQ(out[3]["role"], "user");
  EXPECT_EQ(
      out[3]["content"],
      R"({"tool_results":[{"tool_call_id":"call_1","name":"get_weather","content":"4 degrees"},)"
      R"({"tool_call_id":"call_2","name":"add","content":"5"}]})");
  EXPECT_EQ(out[4]["content"], "Thanks");

  // A system message of the client's keeps its text, the tools after it.
  messages.insert(messages.begin(), ChatMessage{"system", "Be brief.", std::nullopt, {}, {}});
  const nlohmann::ordered_json with_system = GenericToolMessages(messages, Tools(), automatic);
  ASSERT_EQ(with_system.size(), 5u);
  EXPECT_EQ(with_system[0]["content"],
            "Be brief.\n\n" + GenericToolsSystemText(Tools(), automatic));

  // Each tool once, as compact JSON; under a named choice only that tool, and no response.
  const std::string named = GenericToolsSystemText(Tools(), {ToolChoiceKind::kNamed, "add"});
  EXPECT_NE(named.find(R"({"name":"add","parameters":{"type":"object")"), std::string::npos);
  EXPECT_EQ(named.find("get_weather"), std::string::npos);
  EXPECT_EQ(named.find("\"response\""), std::string::npos);
  EXPECT_NE(GenericToolsSystemText(Tools(), automatic).find(R"({"name":"ping"})"),
            std::string::npos);
}

}  // namespace
}  // namespace pier::api
