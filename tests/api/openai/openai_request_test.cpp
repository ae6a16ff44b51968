// Parsing and validation of OpenAI request bodies (openai_request.h): every accepted form of
// every field, and for each wrong type or value a 400 naming the field in `param`.
#include "api/openai/openai_request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

namespace pier::api {
namespace {

using nlohmann::json;

json ChatBody() {
  return {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
}

json CompletionBody() { return {{"model", "m"}, {"prompt", "Hello"}}; }

OpenAiRequest ChatOk(const json& body, OpenAiRequestLimits limits = {}) {
  OpenAiParseResult r = ParseChatCompletionRequest(body.dump(), limits);
  if (auto* e = std::get_if<OpenAiError>(&r)) {
    ADD_FAILURE() << body.dump() << " -> " << e->message;
    return {};
  }
  return std::get<OpenAiRequest>(r);
}

OpenAiRequest CompletionOk(const json& body, OpenAiRequestLimits limits = {}) {
  OpenAiParseResult r = ParseCompletionRequest(body.dump(), limits);
  if (auto* e = std::get_if<OpenAiError>(&r)) {
    ADD_FAILURE() << body.dump() << " -> " << e->message;
    return {};
  }
  return std::get<OpenAiRequest>(r);
}

OpenAiError ErrorOf(const OpenAiParseResult& r) {
  if (const auto* e = std::get_if<OpenAiError>(&r)) return *e;
  ADD_FAILURE() << "expected an error";
  return {};
}

OpenAiError ChatError(const json& body) { return ErrorOf(ParseChatCompletionRequest(body.dump())); }
OpenAiError CompletionError(const json& body) {
  return ErrorOf(ParseCompletionRequest(body.dump()));
}

// `field` set to `value` on both routes gives 400 with param `field`.
void ExpectRejected(const std::string& field, const json& value,
                    const std::string& param_expected = "") {
  const std::string param = param_expected.empty() ? field : param_expected;
  json chat = ChatBody();
  chat[field] = value;
  OpenAiError e = ChatError(chat);
  EXPECT_EQ(e.status, 400) << field << "=" << value.dump();
  EXPECT_EQ(e.param, param) << field << "=" << value.dump() << ": " << e.message;
  json completion = CompletionBody();
  completion[field] = value;
  e = CompletionError(completion);
  EXPECT_EQ(e.status, 400) << field << "=" << value.dump();
  EXPECT_EQ(e.param, param) << field << "=" << value.dump() << ": " << e.message;
}

TEST(OpenAiRequestTest, MinimalChatTakesDefaults) {
  OpenAiRequest r = ChatOk(ChatBody());
  EXPECT_EQ(r.endpoint, OpenAiEndpoint::kChatCompletions);
  EXPECT_EQ(r.model, "m");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_FALSE(r.priority.has_value());
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
}

TEST(OpenAiRequestTest, ReadsEverySamplingField) {
  json body = ChatBody();
  body.update({{"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"n", 3},
               {"max_tokens", 7},
               {"temperature", 0.5},
               {"top_p", 0.9},
               {"top_k", 40},
               {"min_p", 0.05},
               {"presence_penalty", -1.5},
               {"frequency_penalty", 2},
               {"repetition_penalty", 1.1},
               {"stop", {"a", "b"}},
               {"seed", 1234},
               {"logprobs", true},
               {"top_logprobs", 5},
               {"user", "u"},
               {"ignore_eos", true},
               {"priority", "high"}});
  OpenAiRequest r = ChatOk(body);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_FLOAT_EQ(r.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.presence_penalty, -1.5f);
  EXPECT_FLOAT_EQ(r.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.repetition_penalty, 1.1f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.seed, 1234u);
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.priority, engine::Priority::kHigh);
}

TEST(OpenAiRequestTest, NullMeansNotGiven) {
  json body = ChatBody();
  for (const char* f : {"stream", "n", "max_tokens", "temperature", "top_p", "stop", "seed",
                        "logprobs", "top_logprobs", "tools", "tool_choice", "response_format",
                        "logit_bias", "user", "priority", "stream_options", "audio"}) {
    body[f] = nullptr;
  }
  OpenAiRequest r = ChatOk(body);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
}

TEST(OpenAiRequestTest, LogitBiasIsReadAsTokenIdsAndBiases) {
  json body = ChatBody();
  body["logit_bias"] = {{"50256", -100}, {"7", 2.5}, {"0", 100}};
  OpenAiRequest r = ChatOk(body);
  std::vector<std::pair<int32_t, float>> bias = r.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias,
            (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {7, 2.5f}, {50256, -100.0f}}));
}

TEST(OpenAiRequestTest, BadLogitBiasIs400NamingIt) {
  for (const json& bad : {json{{"5", 100.5}}, json{{"5", -101}}, json{{"x", 1}}, json{{"-3", 1}},
                          json{{"5", "high"}}, json{{"", 1}}, json{{"1e3", 1}}, json::array()}) {
    json body = ChatBody();
    body["logit_bias"] = bad;
    OpenAiError e = ChatError(body);
    EXPECT_EQ(e.status, 400) << bad.dump();
    EXPECT_EQ(e.param, "logit_bias") << bad.dump();
  }
}

TEST(OpenAiRequestTest, ModelMayBeOmittedButNotEmptyOrNotAString) {
  json body = ChatBody();
  body.erase("model");
  EXPECT_EQ(ChatOk(body).model, "");
  body["model"] = "";
  EXPECT_EQ(ChatError(body).param, "model");
  body["model"] = 3;
  EXPECT_EQ(ChatError(body).param, "model");
}

TEST(OpenAiRequestTest, UnknownFieldsAreIgnored) {
  json body = ChatBody();
  body["some_future_field"] = {{"x", 1}};
  body["metadata"] = "anything";
  EXPECT_EQ(ChatOk(body).model, "m");
}

TEST(OpenAiRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  json body = ChatBody();
  body["max_tokens"] = 5;
  body["max_completion_tokens"] = 9;
  EXPECT_EQ(ChatOk(body).max_tokens, 9);
  ExpectRejected("max_completion_tokens", 0);
}

TEST(OpenAiRequestTest, TopKMinusOneAndZeroDisable) {
  json body = ChatBody();
  body["top_k"] = -1;
  EXPECT_EQ(ChatOk(body).top_k, 0);
  body["top_k"] = 0;
  EXPECT_EQ(ChatOk(body).top_k, 0);
}

TEST(OpenAiRequestTest, StopAcceptsStringOrList) {
  json body = ChatBody();
  body["stop"] = "\n";
  EXPECT_EQ(ChatOk(body).stop, (std::vector<std::string>{"\n"}));
  body["stop"] = json::array();
  EXPECT_TRUE(ChatOk(body).stop.empty());
  body["stop"] = {"a", "b", "c", "d"};
  EXPECT_EQ(ChatOk(body).stop.size(), 4u);
}

TEST(OpenAiRequestTest, SeedAcceptsNegativeAndLargeIntegers) {
  json body = ChatBody();
  body["seed"] = -1;
  EXPECT_EQ(ChatOk(body).seed, ~uint64_t{0});
  body["seed"] = 18446744073709551615ull;
  EXPECT_EQ(ChatOk(body).seed, ~uint64_t{0});
}

TEST(OpenAiRequestTest, PriorityAcceptsNamesAndNumbers) {
  json body = ChatBody();
  for (const auto& [value, expected] :
       std::vector<std::pair<json, engine::Priority>>{{"critical", engine::Priority::kCritical},
                                                      {"low", engine::Priority::kLow},
                                                      {0, engine::Priority::kCritical},
                                                      {3, engine::Priority::kLow},
                                                      {"2", engine::Priority::kNormal}}) {
    body["priority"] = value;
    EXPECT_EQ(ChatOk(body).priority, expected) << value.dump();
  }
}

TEST(OpenAiRequestTest, WrongTypesAndValuesNameTheField) {
  ExpectRejected("stream", "yes");
  ExpectRejected("n", 0);
  ExpectRejected("n", 9);
  ExpectRejected("n", 1.5);
  ExpectRejected("n", "2");
  ExpectRejected("max_tokens", 0);
  ExpectRejected("max_tokens", -3);
  ExpectRejected("max_tokens", "10");
  ExpectRejected("max_tokens", 1e12);
  ExpectRejected("temperature", -0.1);
  ExpectRejected("temperature", 2.01);
  ExpectRejected("temperature", "hot");
  ExpectRejected("top_p", 0);
  ExpectRejected("top_p", 1.5);
  ExpectRejected("top_k", -2);
  ExpectRejected("top_k", 2.5);
  ExpectRejected("min_p", -0.1);
  ExpectRejected("min_p", 1.1);
  ExpectRejected("presence_penalty", 2.5);
  ExpectRejected("frequency_penalty", -2.5);
  ExpectRejected("repetition_penalty", 0);
  ExpectRejected("repetition_penalty", -1);
  ExpectRejected("stop", 5);
  ExpectRejected("stop", "");
  ExpectRejected("stop", {"a", ""});
  ExpectRejected("stop", {"a", 1});
  ExpectRejected("stop", {"a", "b", "c", "d", "e"});
  ExpectRejected("seed", 1.5);
  ExpectRejected("seed", "42");
  ExpectRejected("user", 7);
  ExpectRejected("ignore_eos", 1);
  ExpectRejected("priority", "urgent");
  ExpectRejected("priority", 4);
  ExpectRejected("priority", -1);
  ExpectRejected("priority", true);
  ExpectRejected("model", 3);
  ExpectRejected("stream_options", "x");
}

TEST(OpenAiRequestTest, RangeMessageQuotesTheLimitsAndTheValue) {
  json body = ChatBody();
  body["temperature"] = 3;
  OpenAiError e = ChatError(body);
  EXPECT_NE(e.message.find("between 0 and 2"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("3"), std::string::npos) << e.message;
}

TEST(OpenAiRequestTest, StreamOptionsNeedStream) {
  json body = ChatBody();
  body["stream_options"] = {{"include_usage", true}};
  EXPECT_EQ(ChatError(body).param, "stream_options");
  body["stream"] = false;
  EXPECT_EQ(ChatError(body).param, "stream_options");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", "yes"}};
  EXPECT_EQ(ChatError(body).param, "stream_options");
}

TEST(OpenAiRequestTest, ChatLogprobsForms) {
  json body = ChatBody();
  body["logprobs"] = true;
  EXPECT_EQ(ChatOk(body).logprobs, 0);
  body["logprobs"] = false;
  EXPECT_FALSE(ChatOk(body).logprobs.has_value());
  body["top_logprobs"] = 2;
  EXPECT_EQ(ChatError(body).param, "top_logprobs");  // requires logprobs
  body["logprobs"] = true;
  body["top_logprobs"] = 21;
  EXPECT_EQ(ChatError(body).param, "top_logprobs");
  body["top_logprobs"] = 20;
  EXPECT_EQ(ChatOk(body).logprobs, 20);
  body["logprobs"] = 3;  // an integer is the completions form
  EXPECT_EQ(ChatError(body).param, "logprobs");
}

TEST(OpenAiRequestTest, ChatMessagesFormsAndErrors) {
  json body = ChatBody();
  body["messages"] = {
      {{"role", "system"}, {"content", "s"}},
      {{"role", "developer"}, {"content", "d"}},
      {{"role", "user"},
       {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}},
       {"name", "bob"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "x"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
      {{"role", "tool"}, {"content", "t"}, {"tool_call_id", "x"}},
  };
  OpenAiRequest r = ChatOk(body);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[2].content, "a\nb");
  EXPECT_EQ(r.messages[2].name, "bob");
  EXPECT_EQ(r.messages[3].content, "");

  for (const json& bad : std::vector<json>{
           json::array(), "hi", json::array({"hi"}), json::array({{{"content", "x"}}}),
           json::array({{{"role", "robot"}, {"content", "x"}}}), json::array({{{"role", "user"}}}),
           json::array({{{"role", "user"}, {"content", 5}}}),
           json::array({{{"role", "user"}, {"content", {{{"type", "text"}}}}}}),
           json::array({{{"role", "user"}, {"content", {"plain"}}}}),
           json::array({{{"role", "user"}, {"content", "x"}, {"name", 1}}})}) {
    body["messages"] = bad;
    OpenAiError e = ChatError(body);
    EXPECT_EQ(e.status, 400) << bad.dump();
    EXPECT_EQ(e.param, "messages") << bad.dump() << ": " << e.message;
  }
  body.erase("messages");
  EXPECT_EQ(ChatError(body).param, "messages");
}

TEST(OpenAiRequestTest, ImagePartsAreRefusedByType) {
  json body = ChatBody();
  body["messages"] = {{{"role", "user"},
                       {"content",
                        {{{"type", "text"}, {"text", "what is this"}},
                         {{"type", "image_url"}, {"image_url", {{"url", "http://x/y.png"}}}}}}}};
  OpenAiError e = ChatError(body);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("unsupported content part type image_url"), std::string::npos)
      << e.message;
}

TEST(OpenAiRequestTest, ResponseFormatBecomesAnOutputConstraint) {
  json chat = ChatBody();
  chat["response_format"] = {{"type", "json_object"}};
  EXPECT_EQ(ChatOk(chat).constraint.kind, grammar::OutputConstraint::Kind::kJsonObject);

  // The schema keeps the client's property order (ordered parsing), and completions take it too.
  const std::string body = R"({"model":"m","prompt":"x","response_format":{"type":"json_schema",
      "json_schema":{"name":"p","strict":true,"schema":{"type":"object",
      "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},
      "required":["zeta","alpha"]}}}})";
  auto parsed = ParseCompletionRequest(body);
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(parsed));
  const grammar::OutputConstraint& c = std::get<OpenAiRequest>(parsed).constraint;
  EXPECT_EQ(c.kind, grammar::OutputConstraint::Kind::kJsonSchema);
  EXPECT_LT(c.schema.find("zeta"), c.schema.find("alpha")) << c.schema;

  chat["response_format"] = {{"type", "text"}};
  EXPECT_FALSE(ChatOk(chat).constraint.active());
}

TEST(OpenAiRequestTest, BadResponseFormatsAreRefusedByName) {
  const std::vector<std::pair<json, std::string>> cases = {
      {"json_object", "response_format must be an object"},
      {{{"type", "yaml"}}, "must be text, json_object or json_schema, got \"yaml\""},
      {{{"type", "json_schema"}}, "json_schema must be an object"},
      {{{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}, "schema is required"},
      {{{"type", "json_schema"}, {"json_schema", {{"schema", "str"}}}},
       "schema must be an object, got a string"},
      {{{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}, {"strict", 1}}}},
       "strict must be a boolean"},
      // Valid JSON Schema that Pier cannot enforce: refused naming the keyword, not ignored.
      {{{"type", "json_schema"},
        {"json_schema", {{"schema", {{"type", "array"}, {"uniqueItems", true}}}}}},
       "uniqueItems"},
      // Not a valid schema at all.
      {{{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "integr"}}}}}}, "integr"},
  };
  for (const auto& [format, want] : cases) {
    json chat = ChatBody();
    chat["response_format"] = format;
    OpenAiError e = ChatError(chat);
    EXPECT_EQ(e.status, 400) << format.dump();
    EXPECT_EQ(e.param, "response_format") << format.dump();
    EXPECT_NE(e.message.find(want), std::string::npos) << format.dump() << ": " << e.message;
  }
}

json WeatherTool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "d"},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"city", {{"type", "string"}}}}},
              {"required", {"city"}}}}}}};
}

TEST(OpenAiRequestTest, ToolsAndToolChoiceAreRead) {
  json chat = ChatBody();
  chat["tools"] = json::array({WeatherTool()});
  OpenAiRequest r = ChatOk(chat);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools[0].description, "d");
  EXPECT_EQ(json::parse(r.tools[0].parameters)["required"], json({"city"}));
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kAuto);  // the default with tools
  EXPECT_EQ(ChatOk(ChatBody()).tool_choice.kind, ToolChoiceKind::kNone);
  chat["tool_choice"] = "required";
  EXPECT_EQ(ChatOk(chat).tool_choice.kind, ToolChoiceKind::kRequired);
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  EXPECT_EQ(ChatOk(chat).tool_choice, (ToolChoice{ToolChoiceKind::kNamed, "get_weather"}));
  chat["tool_choice"] = "none";
  chat["parallel_tool_calls"] = false;
  r = ChatOk(chat);
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kNone);
  EXPECT_FALSE(r.parallel_tool_calls);
}

TEST(OpenAiRequestTest, ToolCallsInTheHistoryAreRead) {
  json chat = ChatBody();
  chat["messages"] = {
      {{"role", "user"}, {"content", "weather?"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"t\": 3}"}}};
  OpenAiRequest r = ChatOk(chat);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(json::parse(r.messages[1].tool_calls[0].arguments), json({{"city", "Oslo"}}));
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
}

TEST(OpenAiRequestTest, BadToolsAreRefusedByName) {
  const auto tool_with = [](const char* key, json value) {
    json t = WeatherTool();
    t["function"][key] = std::move(value);
    return t;
  };
  const std::vector<std::tuple<std::string, json, std::string, std::string>> cases = {
      {"tools", "f", "tools", "tools must be an array"},
      {"tools", {{{"type", "retrieval"}}}, "tools", "type must be function"},
      {"tools", json::array({tool_with("name", "has space")}), "tools", "letters, digits"},
      {"tools", json::array({tool_with("parameters", "object")}), "tools",
       "JSON Schema object, got a string"},
      {"tools", json::array({tool_with("parameters", {{"type", "integr"}})}), "tools",
       "not a valid JSON Schema"},
      {"tools", {WeatherTool(), WeatherTool()}, "tools", "is used twice"},
      {"tool_choice", "sometimes", "tool_choice", "none, auto, required or a function"},
      {"tool_choice",
       {{"type", "function"}, {"function", {{"name", "nope"}}}},
       "tool_choice",
       "not among the tools"},
  };
  for (const auto& [field, value, param, words] : cases) {
    json chat = ChatBody();
    chat["tools"] = json::array({WeatherTool()});
    chat[field] = value;
    OpenAiError e = ChatError(chat);
    EXPECT_EQ(e.status, 400) << value.dump();
    EXPECT_EQ(e.param, param) << value.dump();
    EXPECT_NE(e.message.find(words), std::string::npos) << value.dump() << ": " << e.message;
  }
  // Enforcing a call needs parameters Pier can enforce; auto does not.
  json chat = ChatBody();
  chat["tools"] =
      json::array({tool_with("parameters", {{"type", "object"}, {"not", json::object()}})});
  EXPECT_EQ(ChatOk(chat).tools.size(), 1u);
  chat["tool_choice"] = "required";
  EXPECT_NE(ChatError(chat).message.find("cannot be enforced"), std::string::npos);
  // required without tools, and with response_format.
  chat = ChatBody();
  chat["tool_choice"] = "required";
  EXPECT_NE(ChatError(chat).message.find("needs tools"), std::string::npos);
  chat["tools"] = json::array({WeatherTool()});
  chat["response_format"] = {{"type", "json_object"}};
  EXPECT_NE(ChatError(chat).message.find("cannot be combined"), std::string::npos);
  // A tool message must answer an earlier call.
  chat = ChatBody();
  chat["messages"] = {{{"role", "user"}, {"content", "x"}},
                      {{"role", "tool"}, {"tool_call_id", "call_9"}, {"content", "1"}}};
  OpenAiError e = ChatError(chat);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("does not match a tool call"), std::string::npos) << e.message;
  chat["messages"][1].erase("tool_call_id");
  EXPECT_NE(ChatError(chat).message.find("tool_call_id is required"), std::string::npos);
  chat["messages"] = {{{"role", "user"}, {"content", "x"}, {"tool_calls", {{{"id", "a"}}}}}};
  EXPECT_NE(ChatError(chat).message.find("only allowed in assistant"), std::string::npos);
  chat["messages"] = {{{"role", "assistant"},
                       {"tool_calls",
                        {{{"id", "a"},
                          {"type", "function"},
                          {"function", {{"name", "f"}, {"arguments", "{not json"}}}}}}}};
  EXPECT_NE(ChatError(chat).message.find("arguments must be a JSON object"), std::string::npos);
  // Completions take no tools.
  json completion = CompletionBody();
  completion["tools"] = json::array({WeatherTool()});
  auto parsed = ParseCompletionRequest(completion.dump());
  ASSERT_TRUE(std::holds_alternative<OpenAiError>(parsed));
  EXPECT_EQ(std::get<OpenAiError>(parsed).param, "tools");
}

TEST(OpenAiRequestTest, UnsupportedFeaturesSaySo) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"functions", {{{"name", "f"}}}},
      {"function_call", "auto"},
      {"audio", {{"voice", "alloy"}}},
      {"modalities", {"text", "audio"}},
  };
  for (const auto& [field, value] : cases) {
    json chat = ChatBody();
    chat[field] = value;
    OpenAiError e = ChatError(chat);
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.param, field);
    EXPECT_NE(e.message.find("is not supported"), std::string::npos) << field << ": " << e.message;
  }
  // The harmless forms pass.
  json chat = ChatBody();
  chat["response_format"] = {{"type", "text"}};
  chat["logit_bias"] = json::object();
  chat["tools"] = json::array();
  chat["tool_choice"] = "none";
  chat["modalities"] = {"text"};
  chat["parallel_tool_calls"] = true;
  EXPECT_EQ(ChatOk(chat).model, "m");

  json completion = CompletionBody();
  completion["suffix"] = "end";
  EXPECT_NE(CompletionError(completion).message.find("suffix is not supported"), std::string::npos);
  completion["suffix"] = "";
  completion["best_of"] = 1;
  EXPECT_EQ(CompletionOk(completion).n, 1);
  completion["best_of"] = 2;
  OpenAiError e = CompletionError(completion);
  EXPECT_EQ(e.param, "best_of");
  EXPECT_NE(e.message.find("not supported"), std::string::npos);
}

TEST(OpenAiRequestTest, CompletionPromptForms) {
  json body = CompletionBody();
  OpenAiRequest r = CompletionOk(body);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "Hello");

  body["prompt"] = {"a", "b"};
  r = CompletionOk(body);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].text, "b");

  body["prompt"] = {1, 2, 3};
  r = CompletionOk(body);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));

  body["prompt"] = {{1, 2}, {3}};
  r = CompletionOk(body);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{3}));

  for (const json& bad : std::vector<json>{5,
                                           json::array(),
                                           {"a", 1},
                                           {1, "a"},
                                           {1, -2},
                                           {{1}, json::array()},
                                           {{1}, {"x"}},
                                           {1, 2.5},
                                           {{1}, 2},
                                           {1, 4294967296ll},
                                           {true}}) {
    body["prompt"] = bad;
    OpenAiError e = CompletionError(body);
    EXPECT_EQ(e.status, 400) << bad.dump();
    EXPECT_EQ(e.param, "prompt") << bad.dump() << ": " << e.message;
  }
  body.erase("prompt");
  EXPECT_EQ(CompletionError(body).param, "prompt");
}

TEST(OpenAiRequestTest, PromptsTimesNIsLimited) {
  json body = CompletionBody();
  body["prompt"] = {"a", "b", "c"};
  body["n"] = 3;
  OpenAiError e = ErrorOf(ParseCompletionRequest(body.dump(), {.max_n = 8}));
  EXPECT_EQ(e.param, "n");
  EXPECT_NE(e.message.find("9"), std::string::npos) << e.message;
  body["n"] = 2;
  EXPECT_EQ(CompletionOk(body, {.max_n = 8}).n, 2);
}

TEST(OpenAiRequestTest, CompletionLogprobsAndEcho) {
  json body = CompletionBody();
  body["logprobs"] = 0;
  EXPECT_EQ(CompletionOk(body).logprobs, 0);
  body["logprobs"] = 5;
  body["echo"] = true;
  OpenAiRequest r = CompletionOk(body);
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_TRUE(r.echo);
  body["logprobs"] = 21;
  EXPECT_EQ(CompletionError(body).param, "logprobs");
  body["logprobs"] = true;
  EXPECT_EQ(CompletionError(body).param, "logprobs");
  body["logprobs"] = nullptr;
  body["echo"] = "yes";
  EXPECT_EQ(CompletionError(body).param, "echo");
}

TEST(OpenAiRequestTest, MalformedBodies) {
  for (const char* body : {"", "{", "{\"model\": }", "[1, 2]", "\"text\"", "42", "null",
                           "{\"model\": \"m\"} trailing"}) {
    for (const OpenAiParseResult& r :
         {ParseChatCompletionRequest(body), ParseCompletionRequest(body)}) {
      OpenAiError e = ErrorOf(r);
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_TRUE(e.param.empty()) << body;
    }
  }
  // What is wrong and where, not the parser's internals.
  OpenAiError e = ErrorOf(ParseChatCompletionRequest("{\"model\": "));
  EXPECT_EQ(e.message.rfind("invalid JSON at byte offset 10: ", 0), 0u) << e.message;
  EXPECT_NE(e.message.find("unexpected end of input"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("json.exception"), std::string::npos) << e.message;
  e = ErrorOf(ParseChatCompletionRequest("[]"));
  EXPECT_NE(e.message.find("must be a JSON object"), std::string::npos) << e.message;
}

TEST(OpenAiRequestTest, InvalidUtf8IsA400) {
  // A lone continuation byte, a truncated sequence, an overlong encoding, a lone surrogate.
  for (const std::string& bad : {std::string("\x80"), std::string("\xe2\x82"),
                                 std::string("\xc0\xaf"), std::string("\\ud800")}) {
    const std::string body = "{\"model\": \"m\", \"prompt\": \"a" + bad +
                             "b\", \"messages\": [{\"role\": \"user\", "
                             "\"content\": \"x" +
                             bad + "\"}]}";
    EXPECT_EQ(ErrorOf(ParseCompletionRequest(body)).status, 400);
    EXPECT_EQ(ErrorOf(ParseChatCompletionRequest(body)).status, 400);
  }
}

}  // namespace
}  // namespace pier::api
