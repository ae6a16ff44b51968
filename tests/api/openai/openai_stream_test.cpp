// OpenAiStream over hand-made engine events (no model): the endings the default model cannot
// produce on demand (engine error, engine shutdown), Cancel, backlog, wake-ups and metrics.
#include "api/openai/openai_stream.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/serving_metrics.h"

namespace pier::api {
namespace {

using nlohmann::json;

// Records aborts; nothing is submitted through it.
class FakeClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return UnavailableError("not used");
  }
  void Abort(const std::string& id) override { aborted.push_back(id); }
  void AbortAll(std::string reason) override { aborted.push_back("*" + reason); }
  engine::EngineStats Stats() const override { return {}; }

  std::vector<std::string> aborted;
};

engine::Event Token(int32_t choice, int32_t token, std::string text) {
  engine::Event e;
  e.choice = choice;
  e.token = token;
  e.text = std::move(text);
  return e;
}

engine::Event Final(int32_t choice, engine::FinishReason reason, int64_t tokens) {
  engine::Event e;
  e.choice = choice;
  e.finish = reason;
  e.usage.prompt_tokens = 3;
  e.usage.completion_tokens = tokens;
  e.times.queued_us = 1'000;
  e.times.scheduled_us = 1'500;
  e.times.first_token_us = 3'000;
  e.times.finished_us = 7'000;
  return e;
}

struct Fixture {
  explicit Fixture(bool streaming, int prompts = 1, int n = 1,
                   OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions,
                   serving::ServingMetrics* metrics = nullptr) {
    OpenAiStreamOptions options;
    options.endpoint = endpoint;
    options.id = "chatcmpl-test";
    options.model = "m";
    options.stream = streaming;
    options.n = n;
    std::vector<OpenAiStreamPrompt> list;
    for (int p = 0; p < prompts; ++p) {
      OpenAiStreamPrompt prompt;
      prompt.engine_id = "chatcmpl-test-" + std::to_string(p);
      prompt.handle = std::make_shared<engine::RequestHandle>(prompt.engine_id, n);
      prompt.prompt_tokens = {1, 2, 3};
      handles.push_back(prompt.handle);
      list.push_back(std::move(prompt));
    }
    stream = std::make_shared<OpenAiStream>(options, std::move(list), &client, nullptr, metrics);
  }

  FakeClient client;
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  std::shared_ptr<OpenAiStream> stream;
};

TEST(OpenAiStreamTest, EngineErrorEndsAStreamWithOneErrorEvent) {
  Fixture f(/*stream=*/true);
  f.stream->Start([] {});
  f.handles[0]->Push(Token(0, 5, "Hi"));
  engine::Event error = Final(0, engine::FinishReason::kError, 1);
  error.error = "runner failed: device lost";
  f.handles[0]->Push(error);
  StreamChunk chunk = f.stream->Poll();
  EXPECT_TRUE(chunk.done);
  EXPECT_NE(chunk.data.find("\"Hi\""), std::string::npos) << chunk.data;
  EXPECT_EQ(chunk.data.find("[DONE]"), std::string::npos);
  const size_t at = chunk.data.rfind("data: ");
  json last = json::parse(chunk.data.substr(at + 6));
  EXPECT_NE(last["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
  EXPECT_EQ(last["error"]["type"], "server_error");
  EXPECT_TRUE(f.stream->Poll().done);
}

TEST(OpenAiStreamTest, EngineErrorWithoutStreamingIs500) {
  Fixture f(/*stream=*/false);
  f.stream->Start([] {});
  engine::Event error = Final(0, engine::FinishReason::kError, 0);
  error.error = "boom";
  f.handles[0]->Push(error);
  StreamChunk chunk = f.stream->Poll();
  EXPECT_TRUE(chunk.done);
  EXPECT_EQ(chunk.status, 500);
  EXPECT_NE(json::parse(chunk.data)["error"]["message"].get<std::string>().find("boom"),
            std::string::npos);
}

TEST(OpenAiStreamTest, AFailureTheRequestCausedIs400) {
  Fixture f(/*stream=*/false);
  f.stream->Start([] {});
  engine::Event error = Final(0, engine::FinishReason::kError, 0);
  error.error = "the output constraint: the DFA outgrew 65536 states";
  error.request_fault = true;
  f.handles[0]->Push(error);
  StreamChunk chunk = f.stream->Poll();
  EXPECT_EQ(chunk.status, 400);
  const json body = json::parse(chunk.data);
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("65536"), std::string::npos);
}

// A request resubmitted after its worker died, into a full queue: answered as a full queue
// answers at Submit (429 with Retry-After), and in a stream, with that 429's error type.
TEST(OpenAiStreamTest, AResubmissionIntoAFullQueueIs429WithRetryAfter) {
  for (const bool streaming : {false, true}) {
    Fixture f(streaming);
    f.stream->Start([] {});
    engine::Event refused = Final(0, engine::FinishReason::kError, 0);
    refused.error = "queue full: 1 sequences are waiting (limit 1)";
    refused.queue_full = true;
    f.handles[0]->Push(refused);
    StreamChunk chunk = f.stream->Poll();
    ASSERT_TRUE(chunk.done);
    const std::string body =
        streaming ? chunk.data.substr(chunk.data.rfind("data: ") + 6) : chunk.data;
    EXPECT_EQ(json::parse(body)["error"]["type"], "rate_limit_error") << body;
    EXPECT_NE(body.find("queue full"), std::string::npos) << body;
    if (!streaming) {
      EXPECT_EQ(chunk.status, 429);
      ASSERT_EQ(chunk.headers.size(), 1u);
      EXPECT_EQ(chunk.headers[0].first, "Retry-After");
    }
  }
}

// A chat stream over tools in the Hermes form, answering two calls.
std::string TwoCalls(bool streaming, bool parallel) {
  OpenAiStreamOptions options;
  options.endpoint = OpenAiEndpoint::kChatCompletions;
  options.id = "chatcmpl-0123456789abcdef01234567";
  options.model = "m";
  options.stream = streaming;
  options.tool_format = ToolCallFormat::kHermes;
  options.tools = {{"f", "", ""}, {"g", "", ""}};
  options.parallel_tool_calls = parallel;
  OpenAiStreamPrompt prompt;
  prompt.engine_id = "e";
  prompt.handle = std::make_shared<engine::RequestHandle>("e", 1);
  prompt.prompt_tokens = {1};
  std::shared_ptr<engine::RequestHandle> handle = prompt.handle;
  FakeClient client;
  std::vector<OpenAiStreamPrompt> prompts;
  prompts.push_back(std::move(prompt));
  OpenAiStream stream(options, std::move(prompts), &client, nullptr, nullptr);
  stream.Start([] {});
  handle->Push(Token(0, 5, "On it.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}"));
  handle->Push(Token(0, 6, "\n</tool_call>\n<tool_call>\n{\"name\": \"g\"}\n</tool_call>"));
  handle->Push(Final(0, engine::FinishReason::kStop, 2));
  std::string out;
  for (StreamChunk c = stream.Poll();; c = stream.Poll()) {
    out += c.data;
    if (c.done) break;
  }
  return out;
}

TEST(OpenAiStreamTest, ToolCallsAnswerWithIdsAndFinishReason) {
  const json whole = json::parse(TwoCalls(false, true));
  const json& message = whole["choices"][0]["message"];
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(message["content"], "On it.");
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"x", 1}}));
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);
  // parallel_tool_calls false: the first call only.
  EXPECT_EQ(json::parse(TwoCalls(false, false))["choices"][0]["message"]["tool_calls"].size(), 1u);

  // Streamed: the text before the calls as content, then the calls, then the finish.
  const std::string sse = TwoCalls(true, true);
  std::string content;
  std::vector<json> calls;
  std::string finish;
  for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    const std::string payload = sse.substr(at + 6, sse.find("\n\n", at) - at - 6);
    if (payload == "[DONE]") break;
    const json chunk = json::parse(payload);
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"];
    if (choice["delta"].contains("tool_calls")) {
      for (const json& c : choice["delta"]["tool_calls"]) calls.push_back(c);
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "On it.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[1]["function"]["name"], "g");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(OpenAiStreamTest, EngineShutdownIs503) {
  Fixture f(/*stream=*/false);
  f.stream->Start([] {});
  f.handles[0]->Push(Final(0, engine::FinishReason::kAbort, 0));
  StreamChunk chunk = f.stream->Poll();
  EXPECT_TRUE(chunk.done);
  EXPECT_EQ(chunk.status, 503);
}

TEST(OpenAiStreamTest, CancelAbortsEachUnfinishedRequestOnce) {
  Fixture f(/*stream=*/true, /*prompts=*/3);
  f.stream->Start([] {});
  f.handles[1]->Push(Token(0, 7, "x"));
  f.handles[1]->Push(Final(0, engine::FinishReason::kLength, 1));
  EXPECT_FALSE(f.stream->Poll().done);
  f.handles[0]->Push(Token(0, 7, "y"));
  EXPECT_EQ(f.stream->backlog(), 1u);
  f.stream->Cancel("client gone");
  f.stream->Cancel("client gone");
  EXPECT_EQ(f.client.aborted, (std::vector<std::string>{"chatcmpl-test-0", "chatcmpl-test-2"}));
  EXPECT_TRUE(f.stream->Poll().done);
}

TEST(OpenAiStreamTest, DroppingAnUnfinishedStreamAborts) {
  FakeClient* client = nullptr;
  {
    auto f = std::make_unique<Fixture>(/*stream=*/false);
    client = &f->client;
    f->stream->Start([] {});
    f->stream.reset();
    EXPECT_EQ(client->aborted, (std::vector<std::string>{"chatcmpl-test-0"}));
  }
}

TEST(OpenAiStreamTest, WakeFollowsEngineEvents) {
  Fixture f(/*stream=*/true);
  int wakes = 0;
  f.handles[0]->Push(Token(0, 5, "a"));
  f.stream->Start([&] { ++wakes; });
  EXPECT_EQ(wakes, 1) << "events already pending wake at once";
  f.handles[0]->Push(Token(0, 6, "b"));
  EXPECT_EQ(wakes, 2);
  f.stream->Cancel("done");
  f.handles[0]->Push(Token(0, 6, "c"));
  EXPECT_EQ(wakes, 2) << "no wake after Cancel";
}

TEST(OpenAiStreamTest, ChoicesOfSeveralPromptsAreNumberedPromptTimesN) {
  Fixture f(/*stream=*/false, /*prompts=*/2, /*n=*/2, OpenAiEndpoint::kCompletions);
  f.stream->Start([] {});
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 2; ++i) {
      f.handles[p]->Push(Token(i, 9, "p" + std::to_string(p) + "c" + std::to_string(i)));
      f.handles[p]->Push(Final(i, engine::FinishReason::kStop, 2));
    }
  }
  StreamChunk chunk = f.stream->Poll();
  ASSERT_TRUE(chunk.done);
  EXPECT_EQ(chunk.status, 0);
  json body = json::parse(chunk.data);
  ASSERT_EQ(body["choices"].size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(body["choices"][k]["index"], k);
    EXPECT_EQ(body["choices"][k]["text"],
              "p" + std::to_string(k / 2) + "c" + std::to_string(k % 2));
    EXPECT_EQ(body["choices"][k]["finish_reason"], "stop");
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], 6);  // each prompt once, not once per choice
  EXPECT_EQ(body["usage"]["completion_tokens"], 8);
}

TEST(OpenAiStreamTest, CancelsAreCountedByReasonOnce) {
  serving::ServingMetrics metrics("m");
  Fixture slow(/*stream=*/true, /*prompts=*/1, /*n=*/1, OpenAiEndpoint::kCompletions, &metrics);
  slow.stream->Start([] {});
  slow.stream->Cancel("client reads too slowly: 5000 events waiting");
  slow.stream->Cancel("client disconnected");  // already cancelled: not counted again
  Fixture gone(/*stream=*/true, /*prompts=*/1, /*n=*/1, OpenAiEndpoint::kCompletions, &metrics);
  gone.stream->Start([] {});
  gone.stream->Cancel("client disconnected");
  const std::string text = metrics.Render(engine::EngineStats{}, nullptr);
  EXPECT_NE(text.find("pier_client_aborts_total{model=\"m\",reason=\"slow_reader\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pier_client_aborts_total{model=\"m\",reason=\"client_disconnected\"} 1"),
            std::string::npos)
      << text;
}

TEST(OpenAiStreamTest, FinishedRequestsAreRecordedInMetrics) {
  serving::ServingMetrics metrics("m");
  Fixture f(/*stream=*/true, /*prompts=*/1, /*n=*/1, OpenAiEndpoint::kCompletions, &metrics);
  f.stream->Start([] {});
  f.handles[0]->Push(Token(0, 1, "a"));
  EXPECT_FALSE(f.stream->Poll().done);
  f.handles[0]->Push(Token(0, 2, "b"));
  f.handles[0]->Push(Final(0, engine::FinishReason::kLength, 3));
  EXPECT_TRUE(f.stream->Poll().done);
  const std::string text = metrics.Render(engine::EngineStats{}, nullptr);
  EXPECT_NE(text.find("pier_generation_tokens_total{model=\"m\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("pier_inter_token_latency_seconds_count{model=\"m\"} 1"), std::string::npos)
      << text;
  // Queue time is scheduled - queued (0.5 ms), TTFT first token - queued (2 ms).
  EXPECT_NE(text.find("pier_request_queue_time_seconds_sum{model=\"m\"} 5e-04"), std::string::npos)
      << text;
  EXPECT_NE(text.find("pier_time_to_first_token_seconds_sum{model=\"m\"} 0.002"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace pier::api
