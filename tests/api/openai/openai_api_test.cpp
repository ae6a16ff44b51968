// The OpenAI routes end to end on the default model (SmolLM2-135M), without sockets: requests
// go through a Router, and the returned ResponseStream is driven as the server does (Start
// with a wake, Poll after each wake until done). Results are compared with the engine's own
// output for the same prompt.
#include "api/openai/openai_api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../../engine/test_governor.h"
#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "api/openai/generic_tools.h"
#include "serving/model_host.h"
#include "serving/model_registry.h"
#include "tokenizer/chat_prompt.h"

namespace pier::api {
namespace {

using nlohmann::json;
constexpr char kModel[] = "smollm2";

struct Reply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type;
  bool chunked = false;
  std::string body;

  std::string Header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
  json Json() const { return json::parse(body); }
};

// Drives a response's stream to the end as the server would.
Reply Drive(HttpResponse response) {
  Reply reply{response.status, response.headers, response.content_type, response.chunked,
              response.body};
  if (!response.stream) return reply;
  std::mutex mutex;
  std::condition_variable cv;
  bool woken = false;
  response.stream->Start([&] {
    std::lock_guard lock(mutex);
    woken = true;
    cv.notify_all();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (true) {
    StreamChunk chunk = response.stream->Poll();
    reply.body += chunk.data;
    if (chunk.done) {
      if (chunk.status != 0) reply.status = chunk.status;
      break;
    }
    std::unique_lock lock(mutex);
    if (!cv.wait_until(lock, deadline, [&] { return woken; })) {
      ADD_FAILURE() << "the stream did not finish in time";
      response.stream->Cancel("test timeout");
      break;
    }
    woken = false;
  }
  return reply;
}

// The `data:` payloads of an SSE body, in order.
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "unterminated event: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    events.push_back(event.substr(6));
    at = end + 2;
  }
  return events;
}

class OpenAiApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    serving::ModelHostOptions options;
    options.model.path = PIER_DEFAULT_MODEL_PATH;
    options.model.threads = 2;
    options.model.kv_tokens = 2048;
    options.engine.scheduler = {.max_batched_tokens = 64, .max_seqs = 8};
    auto instance = serving::ModelHost::Open(options, pier::testing::TestGovernor());
    ASSERT_TRUE(instance.ok()) << instance.status().ToString();
    instance_ = std::move(instance).value().release();
    ASSERT_NE(instance_->chat_template(), nullptr) << instance_->chat_template_error();
  }
  static void TearDownTestSuite() { delete instance_; }

  void SetUp() override {
    serving::ServedModel model;
    model.id = kModel;
    model.max_request_tokens = instance_->max_request_tokens();
    model.client = &instance_->client();
    model.tokenizer = &instance_->tokenizer();
    model.chat_template = instance_->chat_template();
    router_ = Router();
    api_.reset();
    registry_ = std::make_unique<serving::ModelRegistry>();
    ASSERT_TRUE(registry_->Add(model).ok());
    api_ = std::make_unique<OpenAiApi>(OpenAiApiOptions{}, registry_.get(), keys_.get(), nullptr);
    api_->Register(router_);
  }

  Reply Post(const std::string& path, const json& body,
             std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest request;
    request.method = "POST";
    request.path = path;
    request.target = path;
    request.body = body.dump();
    request.headers = std::move(headers);
    return Drive(router_.Dispatch(request));
  }

  // The engine's own output for `tokens` (greedy unless a seed and temperature are given).
  struct Direct {
    std::vector<int32_t> tokens;
    std::string text;
    std::string finish;
  };
  static Direct RunDirect(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    engine::Request r;
    static int next = 0;
    r.id = "direct-" + std::to_string(next++);
    r.prompt_tokens = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    auto handle = instance_->client().Submit(std::move(r));
    EXPECT_TRUE(handle.ok()) << handle.status().ToString();
    Direct d;
    if (!handle.ok()) return d;
    for (const engine::Event& e : (*handle)->WaitAll()) {
      if (e.token >= 0) d.tokens.push_back(e.token);
      d.text += e.text;
      if (e.finish.has_value()) d.finish = std::string(engine::FinishReasonName(*e.finish));
    }
    return d;
  }

  static std::vector<int32_t> Encode(const std::string& text) {
    auto tokens = instance_->tokenizer().Encode(text);
    EXPECT_TRUE(tokens.ok());
    return tokens.ok() ? *tokens : std::vector<int32_t>{};
  }

  static json Completion(const json& prompt, int max_tokens) {
    return {{"model", kModel}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  }

  static serving::ModelHost* instance_;
  std::unique_ptr<serving::ModelRegistry> registry_;
  std::unique_ptr<ApiKeys> keys_;
  std::unique_ptr<OpenAiApi> api_;
  Router router_;
};

serving::ModelHost* OpenAiApiTest::instance_ = nullptr;

TEST_F(OpenAiApiTest, GreedyCompletionEqualsTheEnginesGreedyText) {
  const std::string prompt = "The capital of France is";
  const Direct direct = RunDirect(Encode(prompt), 8);
  ASSERT_FALSE(direct.tokens.empty());

  Reply reply = Post("/v1/completions", Completion(prompt, 8));
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_FALSE(reply.chunked);
  json body = reply.Json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], kModel);
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["text"], direct.text);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["finish_reason"], direct.finish);
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"]["prompt_tokens"], Encode(prompt).size());
  EXPECT_EQ(body["usage"]["completion_tokens"], direct.tokens.size());
  EXPECT_EQ(body["usage"]["total_tokens"], Encode(prompt).size() + direct.tokens.size());
  EXPECT_TRUE(body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_EQ(reply.Header("X-Priority-Applied"), "normal");
}

TEST_F(OpenAiApiTest, ChatRendersTheTemplateAndAnswersAsTheEngine) {
  const json messages = {{{"role", "system"}, {"content", "You are brief."}},
                         {{"role", "user"}, {"content", "What is 2+2?"}}};
  const tokenizer::Tokenizer& tok = instance_->tokenizer();
  tokenizer::ChatTemplateOptions render;
  if (tok.bos_id() >= 0) render.bos_token = std::string(tok.Piece(tok.bos_id()));
  if (tok.eos_id() >= 0) render.eos_token = std::string(tok.Piece(tok.eos_id()));
  auto text = instance_->chat_template()->Apply(messages, render);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  tokenizer::EncodeOptions encode;
  encode.add_special = !tokenizer::PromptStartsWithBos(*text, render.bos_token);
  auto tokens = tok.Encode(*text, encode);
  ASSERT_TRUE(tokens.ok());
  const Direct direct = RunDirect(*tokens, 10);

  Reply reply =
      Post("/v1/chat/completions",
           {{"model", kModel}, {"messages", messages}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = reply.Json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], direct.text);
  EXPECT_EQ(body["choices"][0]["finish_reason"], direct.finish);
  EXPECT_EQ(body["usage"]["prompt_tokens"], tokens->size());
}

// A model whose template shows no tools (SmolLM2's) gets them in the generic form: the prompt of
// a fixture conversation with calls and results is the committed text (reviewed by hand; it
// changes only when the form does, docs/api.md), and the request answers one valid call.
TEST_F(OpenAiApiTest, GenericToolsRenderTheFixtureConversationAsCommitted) {
  const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "description":"Weather in a city","parameters":{"type":"object","properties":{
      "city":{"type":"string"}},"required":["city"]}}}])");
  const json messages = json::parse(R"([
      {"role":"user","content":"Weather in Oslo?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
       "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"4 degrees"},
      {"role":"user","content":"And in Rome?"}])");
  const std::vector<FunctionTool> function_tools = {
      {"get_weather", "Weather in a city",
       // The request's `tools` below is a json (keys sorted): the same text here.
       R"({"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"})"}};
  std::vector<ChatMessage> chat(4);
  chat[0] = {"user", "Weather in Oslo?", std::nullopt, {}, std::nullopt};
  chat[1].role = "assistant";
  chat[1].tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}};
  chat[2] = {"tool", "4 degrees", std::nullopt, {}, "call_1"};
  chat[3] = {"user", "And in Rome?", std::nullopt, {}, std::nullopt};
  const ToolChoice required{ToolChoiceKind::kRequired, ""};
  auto prompt = tokenizer::RenderChatPrompt(*instance_->chat_template(), instance_->tokenizer(),
                                            GenericToolMessages(chat, function_tools, required));
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/api/generic_tools_prompt.txt",
                   std::ios::binary);
  ASSERT_TRUE(in) << "the fixture is missing";
  const std::string expected((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(prompt->text, expected);

  Reply reply = Post("/v1/chat/completions", {{"model", kModel},
                                              {"messages", messages},
                                              {"tools", tools},
                                              {"tool_choice", "required"},
                                              {"max_tokens", 40},
                                              {"temperature", 0}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = reply.Json();
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt->tokens.size());
  const json& message = body["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << reply.body;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>())
                  .at("city")
                  .is_string());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(OpenAiApiTest, ChatStreamFramesDeltasAsOpenAiDoes) {
  json request = {
      {"model", kModel},    {"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
      {"max_tokens", 6},    {"n", 2},
      {"temperature", 0.8}, {"seed", 11},
      {"stream", true},     {"stream_options", {{"include_usage", true}}}};
  Reply reply = Post("/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_TRUE(reply.chunked);
  EXPECT_EQ(reply.content_type, "text/event-stream");
  std::vector<std::string> events = SseData(reply.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");

  std::string id;
  std::map<int, std::vector<json>> by_choice;
  json usage_chunk;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_EQ(chunk["model"], kModel);
    EXPECT_TRUE(chunk["created"].is_number_integer());
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id);
    if (chunk["choices"].empty()) {
      EXPECT_EQ(i + 2, events.size()) << "the usage chunk comes last, before [DONE]";
      usage_chunk = chunk;
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null());
    for (const json& c : chunk["choices"]) by_choice[c["index"].get<int>()].push_back(c);
  }
  EXPECT_EQ(id.rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(by_choice.size(), 2u);
  std::map<int, std::string> texts;
  for (auto& [index, chunks] : by_choice) {
    ASSERT_GE(chunks.size(), 2u);
    EXPECT_EQ(chunks.front()["delta"]["role"], "assistant");
    EXPECT_EQ(chunks.front()["delta"]["content"], "");
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i]["delta"].contains("role"), i == 0) << index << " chunk " << i;
      if (chunks[i]["delta"].contains("content")) texts[index] += chunks[i]["delta"]["content"];
      const bool last = i + 1 == chunks.size();
      EXPECT_EQ(chunks[i]["finish_reason"].is_null(), !last) << index << " chunk " << i;
    }
  }
  ASSERT_FALSE(usage_chunk.is_null()) << "include_usage asks for a usage chunk";
  EXPECT_GT(usage_chunk["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LE(usage_chunk["usage"]["completion_tokens"].get<int>(), 12);

  // The same request without streaming gives the same texts (same seeds).
  request["stream"] = false;
  request.erase("stream_options");
  Reply whole = Post("/v1/chat/completions", request);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json body = whole.Json();
  ASSERT_EQ(body["choices"].size(), 2u);
  for (const json& c : body["choices"]) {
    EXPECT_EQ(c["message"]["content"], texts[c["index"].get<int>()]);
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], usage_chunk["usage"]["completion_tokens"]);
}

TEST_F(OpenAiApiTest, CompletionStreamEndsWithDone) {
  json request = Completion("Once upon a time", 5);
  request["stream"] = true;
  Reply reply = Post("/v1/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<std::string> events = SseData(reply.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_FALSE(chunk.contains("usage")) << "no usage without include_usage";
    text += chunk["choices"][0]["text"];
    EXPECT_EQ(chunk["choices"][0]["finish_reason"].is_null(), i + 2 < events.size());
  }
  EXPECT_EQ(text, RunDirect(Encode("Once upon a time"), 5).text);
}

TEST_F(OpenAiApiTest, NChoicesUseSeedPlusIndex) {
  json request = {{"model", kModel},   {"prompt", "My favourite colour is"},
                  {"max_tokens", 8},   {"temperature", 0.8},
                  {"seed", 41},        {"n", 2},
                  {"ignore_eos", true}};
  Reply two = Post("/v1/completions", request);
  ASSERT_EQ(two.status, 200) << two.body;
  json body = two.Json();
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["usage"]["completion_tokens"], 16);

  // Reproducible, and choice 1 is what seed + 1 gives alone.
  Reply again = Post("/v1/completions", request);
  EXPECT_EQ(again.Json()["choices"], body["choices"]);
  request["n"] = 1;
  request["seed"] = 42;
  Reply one = Post("/v1/completions", request);
  EXPECT_EQ(one.Json()["choices"][0]["text"], body["choices"][1]["text"]);
}

TEST_F(OpenAiApiTest, ListOfPromptsGivesOneChoiceGroupEach) {
  Reply reply = Post("/v1/completions", Completion({"The sky is", "Water is"}, 4));
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = reply.Json();
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][0]["text"], RunDirect(Encode("The sky is"), 4).text);
  EXPECT_EQ(body["choices"][1]["text"], RunDirect(Encode("Water is"), 4).text);
  EXPECT_EQ(body["usage"]["prompt_tokens"],
            Encode("The sky is").size() + Encode("Water is").size());

  // Token ids work the same as the text they encode.
  Reply ids = Post("/v1/completions", Completion(Encode("The sky is"), 4));
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(ids.Json()["choices"][0]["text"], body["choices"][0]["text"]);
}

TEST_F(OpenAiApiTest, StopStringEndsTheTextBeforeIt) {
  json request = Completion("One, two, three, four,", 16);
  request["ignore_eos"] = true;
  const std::string full = Post("/v1/completions", request).Json()["choices"][0]["text"];
  ASSERT_GE(full.size(), 6u) << full;
  const std::string stop = full.substr(full.size() / 2, 2);
  const std::string expected = full.substr(0, full.find(stop));
  request["stop"] = {stop};
  json body = Post("/v1/completions", request).Json();
  EXPECT_EQ(body["choices"][0]["text"], expected) << "stop " << json(stop);
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>().find(stop), std::string::npos);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST_F(OpenAiApiTest, SeededSamplingIsReproducible) {
  json request = {{"model", kModel},
                  {"messages", {{{"role", "user"}, {"content", "Name a fruit."}}}},
                  {"max_tokens", 8},
                  {"temperature", 0.8},
                  {"seed", 1234}};
  Reply a = Post("/v1/chat/completions", request);
  Reply b = Post("/v1/chat/completions", request);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.Json()["choices"], b.Json()["choices"]);
  EXPECT_NE(a.Json()["id"], b.Json()["id"]);
}

TEST_F(OpenAiApiTest, ChatLogprobsCarryTopAlternatives) {
  json request = {{"model", kModel},    {"messages", {{{"role", "user"}, {"content", "Hello!"}}}},
                  {"max_tokens", 5},    {"temperature", 0},
                  {"ignore_eos", true}, {"logprobs", true},
                  {"top_logprobs", 3}};
  Reply reply = Post("/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = reply.Json();
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u) << body.dump();
  std::string joined;
  for (const json& entry : content) {
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    ASSERT_EQ(entry["top_logprobs"].size(), 3u);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(entry["top_logprobs"][0]["token"], entry["token"]);
    EXPECT_FLOAT_EQ(entry["top_logprobs"][0]["logprob"].get<float>(),
                    entry["logprob"].get<float>());
    double previous = 0;
    for (const json& top : entry["top_logprobs"]) {
      EXPECT_LE(top["logprob"].get<double>(), previous);
      previous = top["logprob"];
      EXPECT_TRUE(top["bytes"].is_array());
    }
    for (const json& b : entry["bytes"]) joined += static_cast<char>(b.get<int>());
  }
  EXPECT_EQ(joined, body["choices"][0]["message"]["content"]);
}

TEST_F(OpenAiApiTest, CompletionLogprobsAndEcho) {
  const std::string prompt = "Paris is the capital of";
  const Direct direct = RunDirect(Encode(prompt), 4);
  json request = Completion(prompt, 4);
  request["echo"] = true;
  Reply echo = Post("/v1/completions", request);
  ASSERT_EQ(echo.status, 200) << echo.body;
  EXPECT_EQ(echo.Json()["choices"][0]["text"], prompt + direct.text);

  request["logprobs"] = 2;
  json body = Post("/v1/completions", request).Json();
  EXPECT_EQ(body["choices"][0]["text"], prompt + direct.text);
  const json& lp = body["choices"][0]["logprobs"];
  const size_t n_prompt = Encode(prompt).size();
  ASSERT_EQ(lp["tokens"].size(), n_prompt + direct.tokens.size()) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), lp["tokens"].size());
  ASSERT_EQ(lp["top_logprobs"].size(), lp["tokens"].size());
  ASSERT_EQ(lp["text_offset"].size(), lp["tokens"].size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << "nothing precedes the first prompt token";
  for (size_t i = 1; i < lp["tokens"].size(); ++i) {
    ASSERT_TRUE(lp["token_logprobs"][i].is_number()) << i;
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["text_offset"][i].get<int64_t>(), lp["text_offset"][i - 1].get<int64_t>());
  }
  std::string joined;
  for (const json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, prompt + direct.text);

  // Without echo: only the generated tokens.
  request.erase("echo");
  body = Post("/v1/completions", request).Json();
  EXPECT_EQ(body["choices"][0]["text"], direct.text);
  EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"].size(), direct.tokens.size());
  EXPECT_EQ(body["choices"][0]["logprobs"]["text_offset"][0], 0);
}

TEST_F(OpenAiApiTest, CancelAbortsTheEngineRequest) {
  json request = Completion("Write a very long essay about the sea.", 400);
  request["stream"] = true;
  request["ignore_eos"] = true;
  HttpRequest http;
  http.method = "POST";
  http.path = "/v1/completions";
  http.body = request.dump();
  HttpResponse response = router_.Dispatch(http);
  ASSERT_EQ(response.status, 200) << response.body;
  ASSERT_TRUE(response.stream);
  std::mutex mutex;
  std::condition_variable cv;
  bool woken = false;
  response.stream->Start([&] {
    std::lock_guard lock(mutex);
    woken = true;
    cv.notify_all();
  });
  std::string received;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received.find("\"text\"") == std::string::npos) {
    StreamChunk chunk = response.stream->Poll();
    ASSERT_FALSE(chunk.done) << received << chunk.data;
    received += chunk.data;
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_until(lock, deadline, [&] { return woken; }));
    woken = false;
  }
  EXPECT_GT(instance_->client().Stats().running, 0);
  response.stream->Cancel("client gone");
  response.stream->Cancel("client gone");  // a second Cancel is harmless
  engine::EngineStats stats;
  while (std::chrono::steady_clock::now() < deadline) {
    stats = instance_->client().Stats();
    if (stats.running == 0 && stats.waiting == 0 && stats.kv_blocks_used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_TRUE(response.stream->Poll().done);
}

TEST_F(OpenAiApiTest, WrongModelIs404) {
  json request = Completion("Hi", 2);
  request["model"] = "gpt-4";
  Reply reply = Post("/v1/completions", request);
  EXPECT_EQ(reply.status, 404);
  json error = reply.Json()["error"];
  EXPECT_EQ(error["message"], "model gpt-4 does not exist");
  EXPECT_EQ(error["code"], "model_not_found");
  EXPECT_EQ(error["param"], "model");
}

TEST_F(OpenAiApiTest, TooManyTokensNamesBothNumbers) {
  const int64_t limit = instance_->max_request_tokens();
  json request = Completion("Hello there", static_cast<int>(limit));
  Reply reply = Post("/v1/completions", request);
  EXPECT_EQ(reply.status, 400);
  const std::string message = reply.Json()["error"]["message"];
  EXPECT_NE(message.find(std::to_string(limit)), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(Encode("Hello there").size())), std::string::npos)
      << message;
  EXPECT_EQ(reply.Json()["error"]["param"], "max_tokens");

  // Token ids outside the vocabulary are the prompt's fault.
  request["max_tokens"] = 2;
  request["prompt"] = {1, 2, 999999};
  reply = Post("/v1/completions", request);
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.Json()["error"]["param"], "prompt");
}

TEST_F(OpenAiApiTest, BadBodiesAre400) {
  HttpRequest http;
  http.method = "POST";
  http.path = "/v1/chat/completions";
  http.body = "{not json";
  HttpResponse response = router_.Dispatch(http);
  EXPECT_EQ(response.status, 400);
  EXPECT_NE(response.body.find("invalid JSON"), std::string::npos) << response.body;
  EXPECT_FALSE(response.stream);
}

TEST_F(OpenAiApiTest, PriorityFromBodyOrHeader) {
  json request = Completion("Hi", 1);
  EXPECT_EQ(
      Post("/v1/completions", request, {{"x-priority", "critical"}}).Header("X-Priority-Applied"),
      "critical");
  EXPECT_EQ(Post("/v1/completions", request, {{"x-priority", "3"}}).Header("X-Priority-Applied"),
            "low");
  request["priority"] = "high";
  EXPECT_EQ(Post("/v1/completions", request, {{"x-priority", "low"}}).Header("X-Priority-Applied"),
            "high");
  request.erase("priority");
  EXPECT_EQ(Post("/v1/completions", request, {{"x-priority", "urgent"}}).status, 400);
}

TEST_F(OpenAiApiTest, KeysClampPriorityAndAuthenticate) {
  auto keys =
      ApiKeys::Parse("keys:\n  - key: \"sk-a\"\n    tenant: \"team-a\"\n    max_priority: high\n");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  keys_ = std::make_unique<ApiKeys>(std::move(keys).value());
  router_ = Router();
  SetUp();
  json request = Completion("Hi", 1);
  request["priority"] = "critical";
  Reply reply = Post("/v1/completions", request, {{"authorization", "Bearer sk-a"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.Header("X-Priority-Applied"), "high");
  request["priority"] = "low";
  EXPECT_EQ(Post("/v1/completions", request, {{"authorization", "Bearer sk-a"}})
                .Header("X-Priority-Applied"),
            "low");
  EXPECT_EQ(Post("/v1/completions", request).status, 401);
  EXPECT_EQ(Post("/v1/completions", request, {{"authorization", "Bearer sk-b"}}).status, 401);
}

// Answers every Submit with one error.
class RefusingClient final : public engine::EngineClient {
 public:
  explicit RefusingClient(Status status) : status_(std::move(status)) {}
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return status_;
  }
  void Abort(const std::string&) override {}
  void AbortAll(std::string) override {}
  engine::EngineStats Stats() const override { return {.max_request_tokens = 2048}; }

 private:
  Status status_;
};

TEST_F(OpenAiApiTest, SubmitErrorsMapToHttpStatuses) {
  const std::vector<std::pair<Status, int>> cases = {
      {InvalidArgumentError("bad sampling"), 400},
      {ResourceExhaustedError("queue full"), 429},
      {UnavailableError("shutting down"), 503},
  };
  for (const auto& [status, http_status] : cases) {
    RefusingClient client(status);
    serving::ModelRegistry registry;
    ASSERT_TRUE(registry
                    .Add({.id = kModel,
                          .client = &client,
                          .tokenizer = &instance_->tokenizer(),
                          .chat_template = instance_->chat_template()})
                    .ok());
    OpenAiApi api({}, &registry, nullptr, nullptr);
    Router router;
    api.Register(router);
    HttpRequest http;
    http.method = "POST";
    http.path = "/v1/completions";
    http.body = Completion("Hi", 2).dump();
    HttpResponse response = router.Dispatch(http);
    EXPECT_EQ(response.status, http_status) << status.ToString();
    EXPECT_FALSE(response.stream);
    EXPECT_NE(response.body.find(status.message()), std::string::npos) << response.body;
    bool retry_after = false;
    for (const auto& [name, value] : response.headers) {
      retry_after |= name == "Retry-After" && value == "1";
    }
    EXPECT_EQ(retry_after, http_status == 429);
  }
}

// A crowded engine: 2 slots busy, 10 normal sequences waiting, 2 admitted per second. Every
// Submit is recorded; the request then ends as its queue deadline passed.
class CrowdedClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request request) override {
    auto handle = std::make_shared<engine::RequestHandle>(request.id, request.n);
    engine::Event expired;
    expired.finish = engine::FinishReason::kAbort;
    expired.queue_expired = true;
    expired.error =
        "it waited 3 ms in the queue and its queue deadline passed before it could start";
    handle->Push(expired);
    submitted.push_back(std::move(request));
    return handle;
  }
  void Abort(const std::string&) override {}
  void AbortAll(std::string) override {}
  engine::EngineStats Stats() const override {
    engine::EngineStats s;
    s.max_request_tokens = 2048;
    s.max_seqs = 2;
    s.running = 2;
    s.waiting_by_class = {0, 0, 10, 0};
    s.admissions_per_s = 2;
    return s;
  }
  std::vector<engine::Request> submitted;
};

TEST_F(OpenAiApiTest, QueueDeadlinesRefuseByPredictionOrExpiryWith429) {
  CrowdedClient client;
  serving::ModelRegistry registry;
  ASSERT_TRUE(registry
                  .Add({.id = kModel,
                        .client = &client,
                        .tokenizer = &instance_->tokenizer(),
                        .chat_template = instance_->chat_template()})
                  .ok());
  OpenAiApiOptions options;
  options.class_max_queue.max_queue_ms[static_cast<size_t>(engine::Priority::kNormal)] = 1000;
  options.class_max_queue.delay[static_cast<size_t>(engine::Priority::kHigh)] = true;
  OpenAiApi api(options, &registry, nullptr, nullptr);
  Router router;
  api.Register(router);
  auto post = [&](json body, std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest http;
    http.method = "POST";
    http.path = "/v1/completions";
    http.body = body.dump();
    http.headers = std::move(headers);
    return Drive(router.Dispatch(http));
  };
  // normal: 11 sequences to admit at 2/s is 5.5 s, past its 1 s: refused at once, Retry-After
  // from the prediction, nothing submitted.
  Reply predicted = post(Completion("Hi", 2));
  EXPECT_EQ(predicted.status, 429) << predicted.body;
  EXPECT_EQ(predicted.Header("Retry-After"), "6");
  EXPECT_NE(predicted.body.find("predicted wait for class normal is 5500 ms, past this "
                                "request's class max queue time of 1000 ms"),
            std::string::npos)
      << predicted.body;
  EXPECT_TRUE(client.submitted.empty());
  // A class without a limit, with the client's own deadline: named as deadline_ms.
  json with_deadline = Completion("Hi", 2);
  with_deadline["priority"] = "low";
  with_deadline["deadline_ms"] = 300;
  Reply own = post(with_deadline);
  EXPECT_EQ(own.status, 429);
  EXPECT_NE(own.body.find("past this request's deadline_ms of 300 ms"), std::string::npos)
      << own.body;
  // critical has no limit and skips the queue ahead: submitted with no deadline. The engine
  // then ends it as expired: 429 naming the deadline (the scripted client expires everything).
  json critical = Completion("Hi", 2);
  critical["priority"] = "critical";
  Reply expired = post(critical);
  ASSERT_EQ(client.submitted.size(), 1u);
  EXPECT_FALSE(client.submitted[0].deadline_us.has_value());
  EXPECT_EQ(expired.status, 429);
  EXPECT_NE(expired.body.find("queue deadline passed"), std::string::npos) << expired.body;
  // high with a header deadline the prediction allows (critical and high ahead: none, and the
  // 2 slots are full: one admission, 500 ms): submitted with its deadline and the delay action.
  json high = Completion("Hi", 2);
  high["priority"] = "high";
  const int64_t before_us = engine::NowUs();
  post(high, {{"x-request-deadline-ms", "800"}});
  ASSERT_EQ(client.submitted.size(), 2u);
  ASSERT_TRUE(client.submitted[1].deadline_us.has_value());
  EXPECT_GE(*client.submitted[1].deadline_us, before_us + 800'000);
  EXPECT_LE(*client.submitted[1].deadline_us, engine::NowUs() + 800'000);
  EXPECT_EQ(client.submitted[1].on_deadline, engine::Request::DeadlineAction::kDelay);
  // Bad deadlines are 400s naming their source.
  Reply bad_header = post(high, {{"x-request-deadline-ms", "soon"}});
  EXPECT_EQ(bad_header.status, 400);
  EXPECT_NE(bad_header.body.find("X-Request-Deadline-Ms"), std::string::npos);
  high["deadline_ms"] = -5;
  EXPECT_EQ(post(high).status, 400);
  high["deadline_ms"] = "soon";
  EXPECT_EQ(post(high).status, 400);
  EXPECT_EQ(client.submitted.size(), 2u);

  // A class whose deadline action is delay is never refused on arrival: it waits instead.
  options.class_max_queue.delay[static_cast<size_t>(engine::Priority::kNormal)] = true;
  OpenAiApi delaying(options, &registry, nullptr, nullptr);
  Router delay_router;
  delaying.Register(delay_router);
  HttpRequest http;
  http.method = "POST";
  http.path = "/v1/completions";
  http.body = Completion("Hi", 2).dump();
  Drive(delay_router.Dispatch(http));
  ASSERT_EQ(client.submitted.size(), 3u);
  EXPECT_EQ(client.submitted[2].on_deadline, engine::Request::DeadlineAction::kDelay);
}

}  // namespace
}  // namespace pier::api
