// Tool calls: family detection, parsing of each family's form, the constraint of tool_choice
// required / named (every output it allows parses back to one call of an allowed tool, with
// arguments valid JSON), and the streaming splitter (same result as parsing the whole text,
// whatever the piece sizes).
#include "api/openai/tool_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../grammar/grammar_test_util.h"
#include "grammar/constraint.h"

namespace pier::api {
namespace {

using nlohmann::json;

std::vector<FunctionTool> Tools() {
  return {{"get_weather", "Weather in a city",
           R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},)"
           R"("unit":{"enum":["celsius","fahrenheit"]}},"required":["city","unit"]})"},
          {"add", "",
           R"({"type":"object","properties":{"a":{"type":"integer"},)"
           R"("b":{"type":"integer"}},"required":["a","b"]})"},
          {"ping", "", ""}};
}

TEST(ToolCallsTest, TheFamilyComesFromTheTemplate) {
  EXPECT_EQ(DetectToolCallFormat("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{- '[TOOL_CALLS]' + tool_calls | tojson }}"),
            ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{%- if message.role == 'ipython' %}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(DetectToolCallFormat("{{ tools | tojson }}"), ToolCallFormat::kJson);
}

TEST(ToolCallsTest, HermesBlocksAreReadWithTheTextAroundThem) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
      "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": "
      "\"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n</tool_call>";
  ParsedToolCalls p = ParseToolCalls(ToolCallFormat::kHermes, text, Tools());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me look.");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"city", "Oslo"}, {"unit", "celsius"}}));
  EXPECT_EQ(p.calls[1].name, "add");  // arguments given as JSON text are read the same
  EXPECT_EQ(json::parse(p.calls[1].arguments), json({{"a", 1}, {"b", 2}}));
  // A block cut off at the length limit still reads when its JSON is whole.
  p = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"ping\"}", Tools());
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(ToolCallsTest, AnythingThatIsNotACallOfAKnownToolIsContent) {
  const std::vector<std::string> texts = {
      "plain answer",
      "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",      // unknown tool
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1\n</tool_call>",  // broken JSON
      "<tool_call>\n{\"name\": \"add\", \"arguments\": [1, 2]}\n</tool_call>",    // not an object
      "<tool_call>\n[]\n</tool_call>",
  };
  for (const std::string& text : texts) {
    ParsedToolCalls p = ParseToolCalls(ToolCallFormat::kHermes, text, Tools());
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kJson, "{\"answer\": 4}", Tools()).calls.empty());
}

TEST(ToolCallsTest, Llama3MistralAndPlainJsonForms) {
  ParsedToolCalls p = ParseToolCalls(
      ToolCallFormat::kLlama3,
      "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}", Tools());
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"a", 3}, {"b", 4}}));

  p = ParseToolCalls(ToolCallFormat::kMistral,
                     "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}, "
                     "{\"name\": \"ping\", \"arguments\": {}}]",
                     Tools());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "ping");
  p = ParseToolCalls(ToolCallFormat::kMistral,
                     "ok [TOOL_CALLS]add[ARGS]{\"a\": 5, \"b\": 6}[TOOL_CALLS]ping[ARGS]{}",
                     Tools());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "ok");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"a", 5}, {"b", 6}}));

  // [TOOL_CALLS] as a control token is not in the text: the bare list is the call.
  p = ParseToolCalls(ToolCallFormat::kMistral, "[{\"name\": \"ping\", \"arguments\": {}}]",
                     Tools());
  ASSERT_EQ(p.calls.size(), 1u);

  p = ParseToolCalls(ToolCallFormat::kJson,
                     "```json\n[{\"name\": \"ping\", \"arguments\": {}}]\n```", Tools());
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "ping");
}

TEST(ToolCallsTest, EveryOutputTheConstraintAllowsIsOneAllowedCall) {
  std::mt19937_64 rng(7);
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                ToolCallFormat::kMistral, ToolCallFormat::kJson}) {
    for (const ToolChoice& choice : {ToolChoice{ToolChoiceKind::kRequired, ""},
                                     ToolChoice{ToolChoiceKind::kNamed, "get_weather"}}) {
      SCOPED_TRACE(std::string(ToolCallFormatName(format)) + " " + choice.name);
      const grammar::OutputConstraint c = ToolCallConstraint(format, Tools(), choice);
      ASSERT_TRUE(grammar::CheckConstraint(c).ok()) << grammar::CheckConstraint(c).ToString();
      grammar::testing::Language language(grammar::ConstraintExpr(c).value());
      int sampled = 0;
      for (int i = 0; i < 60; ++i) {
        std::string out;
        if (!language.Sample(&rng, &out, 0.3)) continue;
        ++sampled;
        ParsedToolCalls p = ParseToolCalls(format, out, Tools());
        ASSERT_EQ(p.calls.size(), 1u) << out;
        if (choice.kind == ToolChoiceKind::kNamed) {
          EXPECT_EQ(p.calls[0].name, "get_weather");
        }
        const json args = json::parse(p.calls[0].arguments);
        if (p.calls[0].name == "get_weather") {
          EXPECT_TRUE(args.at("city").is_string()) << out;
          EXPECT_TRUE(args.at("unit") == "celsius" || args.at("unit") == "fahrenheit") << out;
        } else if (p.calls[0].name == "add") {
          EXPECT_TRUE(args.at("a").is_number_integer() && args.at("b").is_number_integer()) << out;
        }
      }
      EXPECT_GT(sampled, 30);
    }
  }
}

// Tools whose parameters use $defs and $ref: both define "s" (a short string for one, an
// integer for the other), one refers to its own root ("#"), one has a property named "$ref"
// and a const value that holds a "$ref" member (data, not a reference).
std::vector<FunctionTool> RefTools() {
  return {{"name_list", "",
           R"({"type":"object","properties":{"name":{"$ref":"#/$defs/s"},)"
           R"("next":{"anyOf":[{"type":"null"},{"$ref":"#"}]}},)"
           R"("required":["name","next"],"additionalProperties":false,)"
           R"("$defs":{"s":{"type":"string","maxLength":5}}})"},
          {"count", "",
           R"({"type":"object","properties":{"n":{"$ref":"#/$defs/s"},)"
           R"("$ref":{"$ref":"#/definitions/flag"},"tag":{"const":{"$ref":"#/x"}}},)"
           R"("required":["n","$ref","tag"],"additionalProperties":false,)"
           R"("$defs":{"s":{"type":"integer"}},"definitions":{"flag":{"type":"boolean"}}})"}};
}

// Arguments of a call to a RefTools() tool, checked against its schema by hand.
void ExpectValidRefArguments(const std::string& name, const json& args, const std::string& out) {
  if (name == "count") {
    EXPECT_TRUE(args.at("n").is_number_integer()) << out;
    EXPECT_TRUE(args.at("$ref").is_boolean()) << out;
    EXPECT_EQ(args.at("tag"), json({{"$ref", "#/x"}})) << out;
    EXPECT_EQ(args.size(), 3u) << out;
    return;
  }
  ASSERT_EQ(name, "name_list") << out;
  for (const json* node = &args; !node->is_null(); node = &node->at("next")) {
    ASSERT_TRUE(node->is_object()) << out;
    EXPECT_EQ(node->size(), 2u) << out;
    ASSERT_TRUE(node->at("name").is_string()) << out;
    const std::string name_text = node->at("name").get<std::string>();
    const auto code_points = std::count_if(name_text.begin(), name_text.end(),
                                           [](char c) { return (c & 0xC0) != 0x80; });
    EXPECT_LE(code_points, 5) << out;  // maxLength counts code points
  }
}

TEST(ToolCallsTest, ParameterReferencesResolveWithinTheirOwnTool) {
  std::mt19937_64 rng(5);
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                ToolCallFormat::kMistral, ToolCallFormat::kJson}) {
    for (const ToolChoice& choice : {ToolChoice{ToolChoiceKind::kRequired, ""},
                                     ToolChoice{ToolChoiceKind::kNamed, "name_list"},
                                     ToolChoice{ToolChoiceKind::kNamed, "count"}}) {
      SCOPED_TRACE(std::string(ToolCallFormatName(format)) + " " + choice.name);
      const grammar::OutputConstraint c = ToolCallConstraint(format, RefTools(), choice);
      ASSERT_TRUE(grammar::CheckConstraint(c).ok()) << grammar::CheckConstraint(c).ToString();
      grammar::testing::Language language(grammar::ConstraintExpr(c).value());
      int sampled = 0;
      for (int i = 0; i < 60; ++i) {
        std::string out;
        if (!language.Sample(&rng, &out, 0.3)) continue;
        ++sampled;
        ParsedToolCalls p = ParseToolCalls(format, out, RefTools());
        ASSERT_EQ(p.calls.size(), 1u) << out;
        if (choice.kind == ToolChoiceKind::kNamed) {
          EXPECT_EQ(p.calls[0].name, choice.name);
        }
        ExpectValidRefArguments(p.calls[0].name, json::parse(p.calls[0].arguments), out);
      }
      EXPECT_GT(sampled, 30);
    }
  }
  // Not a string, or not a local reference: left as they were (the grammar explains them).
  const grammar::OutputConstraint c = ToolCallConstraint(
      ToolCallFormat::kJson,
      {{"f", "", R"({"type":"object","properties":{"a":{"$ref":"https://x/s"}}})"}},
      {ToolChoiceKind::kRequired, ""});
  EXPECT_NE(c.schema.find(R"("$ref":"https://x/s")"), std::string::npos) << c.schema;
}

// Streams `text` in pieces of random sizes; returns (streamed content, final parse).
std::pair<std::string, ParsedToolCalls> Split(ToolCallFormat format, const std::string& text,
                                              std::mt19937_64* rng) {
  ToolCallSplitter splitter(format);
  std::string streamed;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::uniform_int_distribution<size_t>(1, 7)(*rng);
    streamed += splitter.Push(std::string_view(text).substr(at, n));
    at += n;
  }
  ParsedToolCalls end = splitter.Finish(Tools());
  return {streamed, end};
}

TEST(ToolCallsTest, TheSplitterStreamsContentAndHoldsCalls) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    // Plain text: all of it comes out, a possible marker's beginning only at the end.
    auto [streamed, end] = Split(ToolCallFormat::kHermes, "Hello <tool is not a call", &rng);
    EXPECT_EQ(streamed + end.content, "Hello <tool is not a call");
    EXPECT_TRUE(end.calls.empty());

    const std::string call =
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    std::tie(streamed, end) = Split(ToolCallFormat::kHermes, "Sure. " + call, &rng);
    EXPECT_EQ(streamed, "Sure. ");  // the text before the call streams; the call is held
    ASSERT_EQ(end.calls.size(), 1u);
    EXPECT_EQ(end.calls[0].name, "add");

    // (format, output, what streams before the end, calls found at the end)
    const std::tuple<ToolCallFormat, std::string, std::string, size_t> cases[] = {
        {ToolCallFormat::kMistral, " [{\"name\": \"ping\", \"arguments\": {}}]", "", 1},
        {ToolCallFormat::kMistral, "Ok. [TOOL_CALLS]ping[ARGS]{}", "Ok. ", 1},
        {ToolCallFormat::kJson, "  {\"name\": \"ping\", \"arguments\": {}}", "", 1},
        // Llama 3: text that only starts like <|python_tag|> streams once it is clearly not.
        {ToolCallFormat::kLlama3, "<div>hello</div>", "<div>hello</div>", 0},
        {ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"ping\"}", "", 1},
    };
    for (const auto& [format, output, want_streamed, want_calls] : cases) {
      std::tie(streamed, end) = Split(format, output, &rng);
      EXPECT_EQ(streamed, want_streamed) << output;
      EXPECT_EQ(end.calls.size(), want_calls) << output;
    }
    // Mistral without its marker: only a bare list is a call, streamed or not.
    EXPECT_TRUE(
        ParseToolCalls(ToolCallFormat::kMistral, "{\"name\": \"ping\"}", Tools()).calls.empty());
    std::tie(streamed, end) = Split(ToolCallFormat::kJson, "It is {sunny}.", &rng);
    EXPECT_EQ(streamed + end.content, "It is {sunny}.");
    // Held because it might have been a call, then released whole as content.
    std::tie(streamed, end) = Split(ToolCallFormat::kJson, "{\"answer\": 4}", &rng);
    EXPECT_EQ(streamed, "");
    EXPECT_EQ(end.content, "{\"answer\": 4}");
    EXPECT_TRUE(end.calls.empty());
  }
}

TEST(ToolCallsTest, TheTemplateGetsToolsAsTransformersPassesThem) {
  const json tools = json::parse(ToolsJsonForTemplate(Tools()));
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_EQ(tools[0]["type"], "function");
  EXPECT_EQ(tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(tools[0]["function"]["description"], "Weather in a city");
  EXPECT_EQ(tools[0]["function"]["parameters"]["required"], json({"city", "unit"}));
  EXPECT_FALSE(tools[2]["function"].contains("parameters"));
}

}  // namespace
}  // namespace pier::api
