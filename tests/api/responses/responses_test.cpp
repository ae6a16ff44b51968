// The Responses API on top of chat completions: request translation (input items, tools,
// text.format, refusals by name) and the stream adapter (chat chunks in, typed Responses events
// and Response objects out), with a scripted chat stream.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "api/responses/responses_request.h"
#include "api/responses/responses_stream.h"

namespace pier::api {
namespace {

using json = nlohmann::ordered_json;

OpenAiRequest Ok(const json& body) {
  OpenAiParseResult r = ParseResponsesRequest(body.dump());
  if (auto* e = std::get_if<OpenAiError>(&r)) ADD_FAILURE() << body.dump() << " -> " << e->message;
  return std::holds_alternative<OpenAiRequest>(r) ? std::get<OpenAiRequest>(r) : OpenAiRequest{};
}

OpenAiError Error(const json& body) {
  OpenAiParseResult r = ParseResponsesRequest(body.dump());
  if (!std::holds_alternative<OpenAiError>(r)) {
    ADD_FAILURE() << body.dump() << ": expected an error";
    return {};
  }
  return std::get<OpenAiError>(r);
}

TEST(ResponsesRequestTest, InputItemsBecomeChatMessages) {
  OpenAiRequest r = Ok({{"model", "m"},
                        {"input", "hi"},
                        {"instructions", "be brief"},
                        {"max_output_tokens", 9},
                        {"temperature", 0.5}});
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);

  r = Ok({{"input",
           {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "a"}}}}},
            {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
            {{"type", "function_call"}, {"call_id", "c2"}, {"name", "f"}, {"arguments", "{}"}},
            {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "1"}},
            {{"type", "function_call_output"}, {"call_id", "c2"}, {"output", "2"}},
            {{"type", "message"},
             {"role", "assistant"},
             {"content", {{{"type", "output_text"}, {"text", "done"}}}}}}},
          {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}},
          {"tool_choice", {{"type", "function"}, {"name", "f"}}}});
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].tool_calls.size(), 2u);  // consecutive calls share one turn
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.messages[4].content, "done");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice, (ToolChoice{ToolChoiceKind::kNamed, "f"}));

  r = Ok({{"input", "x"},
          {"text",
           {{"format",
             {{"type", "json_schema"},
              {"name", "s"},
              {"schema", {{"type", "integer"}}},
              {"strict", true}}}}}});
  EXPECT_EQ(r.constraint.kind, grammar::OutputConstraint::Kind::kJsonSchema);
}

TEST(ResponsesRequestTest, WhatPierCannotDoIsRefusedByName) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"model", "m"}}, "input is required"},
      {{{"input", json::array()}}, "non-empty array"},
      {{{"input", {{{"type", "input_image"}, {"image_url", "x"}}}}}, "input_image"},
      {{{"input", {{{"role", "user"}, {"content", {{{"type", "input_file"}}}}}}}}, "input_file"},
      {{{"input", "x"}, {"previous_response_id", "resp_1"}}, "whole conversation"},
      {{{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, "web_search"},
      {{{"input", "x"}, {"background", true}}, "background"},
      {{{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens"},
      {{{"input", {{{"type", "function_call_output"}, {"call_id", "zz"}, {"output", "1"}}}}},
       "does not match the call_id of an earlier function_call item"},
  };
  for (const auto& [body, words] : cases) {
    OpenAiError e = Error(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find(words), std::string::npos) << body.dump() << ": " << e.message;
  }
}

// The chat parser judges the translated body, but its errors name the Responses fields.
TEST(ResponsesRequestTest, ErrorsNameTheFieldsOfTheResponsesBody) {
  auto schema_format = [](json schema) {
    return json{{"type", "json_schema"}, {"name", "s"}, {"schema", std::move(schema)}};
  };
  const std::vector<std::tuple<json, std::string, std::string>> cases = {
      {{{"input",
         {{{"role", "user"}, {"content", "hi"}},
          {{"type", "function_call_output"}, {"call_id", "zz"}, {"output", "1"}}}}},
       "input",
       "input[1].call_id \"zz\" does not match the call_id of an earlier function_call item"},
      {{{"input",
         {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "[1]"}}}}},
       "input",
       "input[0].arguments must be a JSON object (as text)"},
      {{{"input", "x"}, {"max_output_tokens", int64_t{1} << 31}},
       "max_output_tokens",
       "max_output_tokens must be between 1 and 2147483647, got 2147483648"},
      {{{"input", "x"}, {"text", {{"format", schema_format(5)}}}},
       "text",
       "text.format.schema must be an object, got an integer"},
      {{{"input", "x"}, {"text", {{"format", schema_format({{"type", "integr"}})}}}},
       "text",
       "text.format: "},
      {{{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}},
       "text",
       "text.format.type must be text, json_object or json_schema"},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "bad name"}}}}},
       "tools",
       "tools[0].name must be 1 to 64 letters"},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", 3}}}}},
       "tools",
       "tools[0].parameters must be a JSON Schema object"},
      {{{"input", "x"},
        {"tools", {{{"type", "function"}, {"name", "f"}}}},
        {"tool_choice", "required"},
        {"text", {{"format", {{"type", "json_object"}}}}}},
       "tool_choice",
       "cannot be combined with text.format json_object or json_schema"},
  };
  for (const auto& [body, param, words] : cases) {
    OpenAiError e = Error(body);
    EXPECT_EQ(e.param, param) << body.dump() << ": " << e.message;
    EXPECT_NE(e.message.find(words), std::string::npos) << body.dump() << ": " << e.message;
    for (const char* chat :
         {"messages", "tool_call_id", "max_completion_tokens", "response_format", ".function."}) {
      EXPECT_EQ(e.message.find(chat), std::string::npos) << body.dump() << ": " << e.message;
    }
  }
  // What the route says later (the prompt's length, max_tokens against the context) too.
  const OpenAiRequest r = Ok({{"input", "x"}, {"max_output_tokens", 9}});
  EXPECT_EQ(r.messages_param, "input");
  EXPECT_EQ(r.max_tokens_param, "max_output_tokens");
}

// A chat stream that returns scripted chunks.
class ScriptedStream final : public ResponseStream {
 public:
  explicit ScriptedStream(std::deque<StreamChunk> chunks) : chunks_(std::move(chunks)) {}
  void Start(std::function<void()>) override {}
  StreamChunk Poll() override {
    StreamChunk c = chunks_.front();
    chunks_.pop_front();
    return c;
  }
  size_t backlog() const override { return chunks_.size(); }
  void Cancel(std::string_view) override {}

 private:
  std::deque<StreamChunk> chunks_;
};

std::string Sse(const json& chunk) { return "data: " + chunk.dump() + "\n\n"; }

json ChatChunk(json delta, json finish = nullptr) {
  return {{"object", "chat.completion.chunk"},
          {"choices", {{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish}}}}};
}

// The events of an SSE body: [(type, data)].
std::vector<std::pair<std::string, json>> Events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    const std::string event = body.substr(at, end - at);
    at = end + 2;
    const size_t nl = event.find('\n');
    EXPECT_EQ(event.substr(0, 7), "event: ");
    EXPECT_EQ(event.substr(nl + 1, 6), "data: ");
    out.emplace_back(event.substr(7, nl - 7), json::parse(event.substr(nl + 7)));
  }
  return out;
}

TEST(ResponsesStreamTest, ChatChunksBecomeTypedEventsInOrder) {
  const json usage = {{"prompt_tokens", 5},
                      {"completion_tokens", 3},
                      {"total_tokens", 8},
                      {"prompt_tokens_details", {{"cached_tokens", 2}}}};
  std::deque<StreamChunk> script = {
      {Sse(ChatChunk({{"role", "assistant"}, {"content", ""}})), false, 0},
      {Sse(ChatChunk({{"content", "Hel"}})) + Sse(ChatChunk({{"content", "lo"}})), false, 0},
      {Sse(ChatChunk({{"tool_calls",
                       {{{"index", 0},
                         {"id", "call_1"},
                         {"type", "function"},
                         {"function", {{"name", "f"}, {"arguments", "{\"a\":1}"}}}}}}})) +
           Sse(ChatChunk(json::object(), "tool_calls")) +
           Sse({{"choices", json::array()}, {"usage", usage}}) + "data: [DONE]\n\n",
       true, 0}};
  ResponsesStream stream(std::make_shared<ScriptedStream>(script),
                         {.id = "resp_abc", .model = "m", .created_at = 1, .stream = true});
  std::string body;
  for (int i = 0; i < 3; ++i) body += stream.Poll().data;
  std::vector<std::string> types;
  int64_t sequence = 0;
  json last;
  for (const auto& [type, data] : Events(body)) {
    types.push_back(type);
    EXPECT_EQ(data["type"], type);
    EXPECT_EQ(data["sequence_number"], sequence++);
    last = data;
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done",
                       "response.completed"}));
  const json& response = last["response"];
  EXPECT_EQ(response["status"], "completed");
  ASSERT_EQ(response["output"].size(), 2u);
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(response["output"][1]["call_id"], "call_1");
  EXPECT_EQ(response["output"][1]["arguments"], "{\"a\":1}");
  EXPECT_EQ(response["usage"]["input_tokens"], 5);
  EXPECT_EQ(response["usage"]["input_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(response["usage"]["total_tokens"], 8);
}

TEST(ResponsesStreamTest, WholeAnswersErrorsAndTheLengthLimit) {
  const json chat = {{"object", "chat.completion"},
                     {"choices",
                      {{{"index", 0},
                        {"message", {{"role", "assistant"}, {"content", "Hi"}}},
                        {"finish_reason", "length"}}}},
                     {"usage", {{"prompt_tokens", 1}, {"completion_tokens", 1}}}};
  ResponsesStream whole(
      std::make_shared<ScriptedStream>(std::deque<StreamChunk>{{chat.dump(), true, 0}}),
      {.id = "resp_x", .model = "m", .created_at = 1, .stream = false});
  const json r = json::parse(whole.Poll().data);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hi");

  // An engine failure: the error passes through (status and body) when not streaming...
  ResponsesStream failed(std::make_shared<ScriptedStream>(std::deque<StreamChunk>{
                             {R"({"error":{"message":"boom"}})", true, 500}}),
                         {.id = "resp_y", .model = "m", .created_at = 1, .stream = false});
  StreamChunk c = failed.Poll();
  EXPECT_EQ(c.status, 500);
  EXPECT_EQ(json::parse(c.data)["error"]["message"], "boom");
  // ...and becomes an error event and response.failed when streaming.
  ResponsesStream streamed(std::make_shared<ScriptedStream>(std::deque<StreamChunk>{
                               {"data: {\"error\":{\"message\":\"boom\"}}\n\n", true, 0}}),
                           {.id = "resp_z", .model = "m", .created_at = 1, .stream = true});
  auto events = Events(streamed.Poll().data);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2].first, "error");
  EXPECT_EQ(events[2].second["message"], "boom");
  EXPECT_EQ(events[3].first, "response.failed");
  EXPECT_EQ(events[3].second["response"]["status"], "failed");
}

}  // namespace
}  // namespace pier::api
