// Seeded mutations of valid OpenAI bodies (run under ASan+UBSan in CI, like the GGUF reader's
// corruption test): whatever bytes arrive, the parsers answer either a request whose fields are
// in range or a 4xx error with a message, and never crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "api/openai/openai_request.h"
#include "grammar/constraint.h"

namespace pier::api {
namespace {

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> seeds = {
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,)"
      R"("stream_options":{"include_usage":true},"n":2,"max_tokens":16,"temperature":0.7,)"
      R"("top_p":0.9,"top_k":-1,"min_p":0.1,"stop":["\n","END"],"seed":42,"logprobs":true,)"
      R"("top_logprobs":3,"presence_penalty":0.5,"frequency_penalty":-0.5,"priority":"high"})",
      R"({"model":"m","prompt":["Hello","World"],"max_tokens":4,"echo":true,"logprobs":2,)"
      R"("stop":"x","seed":-7,"user":"u","ignore_eos":true,"repetition_penalty":1.2})",
      R"({"model":"m","prompt":[[1,2,3],[4,5]],"n":1,"best_of":1,"suffix":null,)"
      R"("logit_bias":{},"response_format":{"type":"text"},"priority":2})",
      // Tools, a call and its result in the history, and a schema: the newest parsers.
      R"({"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant",)"
      R"("content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f",)"
      R"("arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"2"}],)"
      R"("tools":[{"type":"function","function":{"name":"f","description":"d","parameters":)"
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":0}},"required":["a"]}}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false})",
      R"({"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":)"
      R"({"name":"s","strict":true,"schema":{"type":"object","properties":{"k":{"type":)"
      R"("string","pattern":"^[a-z]{1,4}$"},"n":{"anyOf":[{"type":"null"},{"enum":[1,"x"]}]}},)"
      R"("required":["k"],"additionalProperties":false}}}})",
  };
  return seeds;
}

void Mutate(std::mt19937_64& rng, std::string& s) {
  static const char* const kTokens[] = {"null",
                                        "[",
                                        "]",
                                        "{",
                                        "}",
                                        "\"",
                                        ",",
                                        ":",
                                        "1e999",
                                        "-1",
                                        "0",
                                        "true",
                                        "\\u0000",
                                        "\\ud800",
                                        "\xff",
                                        "\xc3",
                                        "\"\":",
                                        "[[[[",
                                        "99999999999999999999"};
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % (n == 0 ? 1 : n)); };
  const int mutations = 1 + static_cast<int>(rng() % 3);
  for (int m = 0; m < mutations; ++m) {
    switch (rng() % 5) {
      case 0:  // flip bits of one byte
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1:  // truncate
        s.resize(pick(s.size()));
        break;
      case 2: {  // delete a run
        if (s.empty()) break;
        const size_t at = pick(s.size());
        s.erase(at, std::min<size_t>(1 + rng() % 12, s.size() - at));
        break;
      }
      case 3:  // insert a JSON-ish token
        s.insert(pick(s.size() + 1), kTokens[rng() % std::size(kTokens)]);
        break;
      default: {  // replace a value-looking run with a token
        if (s.empty()) break;
        const size_t at = pick(s.size());
        s.replace(at, std::min<size_t>(1 + rng() % 6, s.size() - at),
                  kTokens[rng() % std::size(kTokens)]);
        break;
      }
    }
  }
}

void ExpectSane(const OpenAiParseResult& result, const std::string& body, int mutant) {
  if (const auto* e = std::get_if<OpenAiError>(&result)) {
    ASSERT_GE(e->status, 400) << "mutant " << mutant << ": " << body;
    ASSERT_LT(e->status, 500) << "mutant " << mutant << ": " << body;
    ASSERT_FALSE(e->message.empty()) << "mutant " << mutant;
    return;
  }
  const OpenAiRequest& r = std::get<OpenAiRequest>(result);
  ASSERT_GE(r.n, 1);
  ASSERT_LE(r.n, 8);
  ASSERT_LE(r.stop.size(), 4u);
  ASSERT_TRUE(r.temperature >= 0 && r.temperature <= 2) << body;
  ASSERT_TRUE(r.top_p > 0 && r.top_p <= 1) << body;
  ASSERT_GE(r.max_tokens.value_or(1), 1);
  ASSERT_TRUE(r.logprobs.value_or(0) >= 0 && r.logprobs.value_or(0) <= 20);
  // What the route relies on without checking again.
  if (r.constraint.active()) {
    ASSERT_TRUE(grammar::CheckConstraint(r.constraint).ok()) << body;
  }
  if (r.tool_choice.kind == ToolChoiceKind::kNamed) {
    ASSERT_TRUE(std::any_of(r.tools.begin(), r.tools.end(),
                            [&](const FunctionTool& t) { return t.name == r.tool_choice.name; }));
  }
  if (r.tool_choice.kind != ToolChoiceKind::kNone) {
    ASSERT_FALSE(r.tools.empty()) << body;
  }
  for (const ChatMessage& m : r.messages) {
    for (const ToolCall& call : m.tool_calls) {
      ASSERT_TRUE(nlohmann::json::parse(call.arguments, nullptr, false).is_object()) << body;
    }
    if (m.role == "tool") {
      ASSERT_TRUE(m.tool_call_id.has_value()) << body;
    }
  }
  if (r.endpoint == OpenAiEndpoint::kChatCompletions) {
    ASSERT_FALSE(r.messages.empty());
  } else {
    ASSERT_FALSE(r.prompts.empty());
    ASSERT_LE(static_cast<int64_t>(r.prompts.size()) * r.n, 8);
  }
}

TEST(OpenAiRequestMutationTest, TenThousandMutatedBodiesGiveRequestsOr4xx) {
  for (const std::string& seed : Seeds()) {
    ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(ParseChatCompletionRequest(seed)) ||
                std::holds_alternative<OpenAiRequest>(ParseCompletionRequest(seed)))
        << seed;
  }
  std::mt19937_64 rng(0x0a1'5eed);
  constexpr int kMutants = 10000;
  int accepted = 0;
  for (int i = 0; i < kMutants; ++i) {
    std::string body = Seeds()[static_cast<size_t>(i) % Seeds().size()];
    Mutate(rng, body);
    // An exact-size heap copy, so ASan sees any read past the end.
    std::vector<char> exact(body.begin(), body.end());
    const std::string_view view(exact.data(), exact.size());
    const OpenAiParseResult chat = ParseChatCompletionRequest(view);
    ASSERT_NO_FATAL_FAILURE(ExpectSane(chat, body, i));
    const OpenAiParseResult completion = ParseCompletionRequest(view);
    ASSERT_NO_FATAL_FAILURE(ExpectSane(completion, body, i));
    accepted += std::holds_alternative<OpenAiRequest>(chat) ? 1 : 0;
    accepted += std::holds_alternative<OpenAiRequest>(completion) ? 1 : 0;
  }
  // The mutations must leave some bodies valid, or the test only exercises the JSON parser.
  EXPECT_GT(accepted, kMutants / 50);
}

}  // namespace
}  // namespace pier::api
