// Engine on the default model (SmolLM2-135M): concurrent requests give the same greedy tokens
// as each alone (batch invariance end to end, with chunked prefill), and a prefix-cache hit
// gives the same output as a cold run.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_governor.h"
#include "engine/core/default_model.h"
#include "engine/core/engine.h"
#include "engine/runner/local_model.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pier::engine {
namespace {

class EngineModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DefaultModel opened;
    OpenDefaultModel(2048, &opened);
    model_ = opened.model.release();
    tokenizer_ = opened.tokenizer.release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  std::unique_ptr<Engine> MakeEngine() {
    EngineOptions options;
    options.scheduler = {.max_batched_tokens = 64, .max_seqs = 8};
    auto e = Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  Request Greedy(std::string id, const std::string& text, int32_t max_tokens) {
    Request r;
    r.id = std::move(id);
    auto tokens = tokenizer_->Encode(text);
    EXPECT_TRUE(tokens.ok());
    r.prompt_tokens = *tokens;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  static std::pair<std::vector<int32_t>, Event> Collect(const std::vector<Event>& events) {
    std::vector<int32_t> tokens;
    Event last;
    for (const Event& e : events) {
      if (e.token >= 0) tokens.push_back(e.token);
      if (e.finish.has_value()) last = e;
    }
    return {tokens, last};
  }

  static LocalModel* model_;
  static tokenizer::Tokenizer* tokenizer_;
};

LocalModel* EngineModelTest::model_ = nullptr;
tokenizer::Tokenizer* EngineModelTest::tokenizer_ = nullptr;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST_F(EngineModelTest, ConcurrentRequestsGiveTheSameGreedyTokensAsAlone) {
  const std::vector<std::string> texts = {
      "The capital of France is",
      "Once upon a time, " + Repeat("in a land far away, ", 8),
      "def fibonacci(n):",
      Repeat("Pier schedules many requests on one model. ", 12),
      "1, 2, 3, 4,",
      "The quick brown fox",
  };
  std::vector<Request> requests;
  for (size_t i = 0; i < texts.size(); ++i) {
    requests.push_back(Greedy("r" + std::to_string(i), texts[i], 12));
  }
  std::vector<std::vector<int32_t>> alone;
  {
    std::unique_ptr<Engine> engine = MakeEngine();
    for (const Request& r : requests) {
      auto h = engine->Submit(r);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      alone.push_back(Collect((*h)->WaitAll()).first);
      ASSERT_EQ(alone.back().size(), 12u);
    }
  }
  std::unique_ptr<Engine> engine = MakeEngine();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(*engine->Submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    auto [tokens, last] = Collect(handles[i]->WaitAll());
    EXPECT_EQ(tokens, alone[i]) << "request " << i << ": " << texts[i];
    EXPECT_EQ(last.finish, FinishReason::kLength);
  }
  EXPECT_GT(engine->Stats().tokens_per_step, 1.5);
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST_F(EngineModelTest, MixedLengthPromptsBatchedEqualSequential) {
  // The issue's 32 prompts of 1 to 700 tokens (cut from one long token stream so lengths are
  // exact), run together with chunked prefill in a 2048-token cache that holds a few at a
  // time, so most wait in the queue (preemption and resume: the tests below).
  const std::string text = Repeat(
      "In the morning the harbour was quiet; boats rocked, gulls argued, and the old pier "
      "creaked under the weight of crates. ",
      60);
  auto stream = tokenizer_->Encode(text);
  ASSERT_TRUE(stream.ok());
  ASSERT_GE(stream->size(), 800u);
  std::vector<Request> requests;
  for (int i = 0; i < 32; ++i) {
    const int64_t len = 1 + (i * 699) / 31;  // 1 .. 700
    const int64_t offset = (i * 13) % 90;    // different contents
    Request r;
    r.id = "m" + std::to_string(i);
    r.prompt_tokens.assign(stream->begin() + offset, stream->begin() + offset + len);
    r.sampling.temperature = 0;
    r.max_tokens = 3;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<int32_t>> alone;
  {
    EngineOptions options;
    options.scheduler = {.max_batched_tokens = 512, .max_seqs = 1, .enable_prefix_caching = false};
    auto engine = *Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
    for (const Request& r : requests) {
      alone.push_back(Collect((*engine->Submit(r))->WaitAll()).first);
      ASSERT_EQ(alone.back().size(), 3u);
    }
  }
  EngineOptions options;
  options.scheduler = {.max_batched_tokens = 256, .max_seqs = 16, .enable_prefix_caching = false};
  auto engine = *Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(*engine->Submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(Collect(handles[i]->WaitAll()).first, alone[i])
        << "prompt of " << requests[i].prompt_tokens.size() << " tokens";
  }
  const EngineStats stats = engine->Stats();
  std::printf("32 prompts of 1-700 tokens in a 2048-token cache: %lld preemptions\n",
              static_cast<long long>(stats.preemptions));
  EXPECT_EQ(stats.kv_blocks_used, 0);
}

TEST_F(EngineModelTest, ParallelSamplesEqualSeparateRequestsWithTheirSeeds) {
  // n = 3 forks the prompt's blocks; the partial last block is copied before each write.
  Request r = Greedy("n3", "Write a short poem about the sea:", 10);
  r.sampling.temperature = 0.9f;
  r.sampling.seed = 42;
  r.n = 3;
  std::unique_ptr<Engine> engine = MakeEngine();
  auto h = engine->Submit(r);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<Event> events = (*h)->WaitAll();
  EXPECT_GT(engine->Stats().cow_copies, 0);
  for (int32_t c = 0; c < 3; ++c) {
    std::vector<int32_t> tokens;
    for (const Event& e : events) {
      if (e.choice == c && e.token >= 0) tokens.push_back(e.token);
    }
    Request alone = r;
    alone.id = "alone" + std::to_string(c);
    alone.n = 1;
    alone.sampling.seed = 42 + c;
    auto ha = engine->Submit(alone);
    ASSERT_TRUE(ha.ok());
    EXPECT_EQ(tokens, Collect((*ha)->WaitAll()).first) << "choice " << c;
  }
}

TEST_F(EngineModelTest, SwapPreemptionResumesWithTheSameTokens) {
  // Four 512-token prompts, admitted in one step, fill the 2048-token cache exactly (32 blocks
  // each): the first decode tokens need blocks, so sequences are swapped out and back in. They
  // share 496 tokens and differ in their last block, so the runs alone are cheap (prefix cache).
  auto stream = tokenizer_->Encode(Repeat("Tides rise and fall; the pier stands. ", 80));
  ASSERT_TRUE(stream.ok());
  ASSERT_GE(stream->size(), 580u);
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.id = "w" + std::to_string(i);
    r.prompt_tokens.assign(stream->begin(), stream->begin() + 496);
    r.prompt_tokens.insert(r.prompt_tokens.end(), stream->begin() + 500 + 16 * i,
                           stream->begin() + 516 + 16 * i);
    r.sampling.temperature = 0;
    r.max_tokens = 3;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  EngineOptions options;
  options.scheduler = {.max_batched_tokens = 2048,
                       .max_seqs = 4,
                       .enable_prefix_caching = true,
                       .preempt_by_swap = true};
  options.swap_blocks = 256;
  options.swap_pool = pier::testing::TestSwapPool();
  std::vector<std::vector<int32_t>> alone;
  {
    auto engine = *Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
    for (const Request& r : requests)
      alone.push_back(Collect((*engine->Submit(r))->WaitAll()).first);
  }
  options.scheduler.enable_prefix_caching = false;
  // Stepped here, not by an engine thread: all four are queued before the first step (with
  // a thread, the first step could take fewer, and nothing would need swapping).
  options.start_thread = false;
  auto engine = *Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(*engine->Submit(r));
  for (int step = 0; step < 10'000 && engine->RunStep(); ++step) {
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(Collect(handles[i]->WaitAll()).first, alone[i]) << "request " << i;
  }
  EXPECT_GT(engine->Stats().swap_outs, 0);
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST_F(EngineModelTest, PrefixCacheHitGivesTheSameOutputAsAColdRun) {
  const std::string system = Repeat("You are a helpful assistant who answers briefly. ", 5);
  Request cold = Greedy("cold", system + "What is two plus two?", 10);
  std::unique_ptr<Engine> engine = MakeEngine();
  auto h1 = engine->Submit(cold);
  ASSERT_TRUE(h1.ok());
  auto [cold_tokens, cold_last] = Collect((*h1)->WaitAll());
  EXPECT_EQ(cold_last.usage.cached_prompt_tokens, 0);

  Request warm = cold;
  warm.id = "warm";
  auto h2 = engine->Submit(warm);
  ASSERT_TRUE(h2.ok());
  auto [warm_tokens, warm_last] = Collect((*h2)->WaitAll());
  EXPECT_EQ(warm_tokens, cold_tokens);
  EXPECT_GE(warm_last.usage.cached_prompt_tokens,
            static_cast<int64_t>(cold.prompt_tokens.size()) - 16);
  EXPECT_GT(engine->Stats().prefix_hit_rate, 0.4);
}

// ---- Output constraints ---------------------------------------------------------------------

constexpr char kPersonSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":16},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["red","green","blue"]},"minItems":1,"maxItems":3}},
  "required":["name","age","tags"],"additionalProperties":false})";

std::string Text(const std::vector<Event>& events, int32_t choice) {
  std::string text;
  for (const Event& e : events) {
    if (e.choice == choice) text += e.text;
  }
  return text;
}

// The output holds every rule of kPersonSchema (checked here by hand, not by the grammar).
void ExpectPerson(const std::string& text) {
  nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 3u) << text;
  ASSERT_TRUE(v["name"].is_string()) << text;
  const std::string name = v["name"].get<std::string>();
  const auto code_points =
      std::count_if(name.begin(), name.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
  EXPECT_LE(code_points, 16) << text;
  ASSERT_TRUE(v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 120) << text;
  ASSERT_TRUE(v["tags"].is_array()) << text;
  EXPECT_GE(v["tags"].size(), 1u) << text;
  EXPECT_LE(v["tags"].size(), 3u) << text;
  for (const auto& tag : v["tags"]) {
    EXPECT_TRUE(tag == "red" || tag == "green" || tag == "blue") << text;
  }
}

TEST_F(EngineModelTest, ConstrainedOutputsFollowTheSchemaAndStopWhenComplete) {
  std::unique_ptr<Engine> engine = MakeEngine();
  Request greedy = Greedy("schema-greedy", "A person, as JSON:", 200);
  greedy.ignore_eos = false;
  greedy.constraint = grammar::OutputConstraint::JsonSchema(kPersonSchema);
  Request sampled = greedy;
  sampled.id = "schema-sampled";
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  sampled.n = 4;
  Request object = greedy;
  object.id = "object";
  object.constraint = grammar::OutputConstraint::JsonObject();
  auto hg = engine->Submit(greedy);
  auto hs = engine->Submit(sampled);
  auto ho = engine->Submit(object);
  ASSERT_TRUE(hg.ok() && hs.ok() && ho.ok());

  std::vector<Event> events = (*hg)->WaitAll();
  ExpectPerson(Text(events, 0));
  EXPECT_EQ(Collect(events).second.finish, FinishReason::kStop) << Text(events, 0);
  events = (*hs)->WaitAll();
  for (int32_t c = 0; c < 4; ++c) {
    SCOPED_TRACE("choice " + std::to_string(c));
    ExpectPerson(Text(events, c));
  }
  events = (*ho)->WaitAll();
  const std::string text = Text(events, 0);
  nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  EXPECT_TRUE(v.is_object()) << text;
  EXPECT_EQ(Collect(events).second.finish, FinishReason::kStop) << text;
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST_F(EngineModelTest, ConstrainedAndFreeRequestsBatchedEqualAlone) {
  // The mask depends on a choice's own tokens only: batch invariance holds with constraints.
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    Request r = Greedy("c" + std::to_string(i), "Item " + std::to_string(i) + " as JSON:", 40);
    if (i % 2 == 0) r.constraint = grammar::OutputConstraint::JsonSchema(kPersonSchema);
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<int32_t>> alone;
  {
    std::unique_ptr<Engine> engine = MakeEngine();
    for (const Request& r : requests)
      alone.push_back(Collect((*engine->Submit(r))->WaitAll()).first);
  }
  std::unique_ptr<Engine> engine = MakeEngine();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(*engine->Submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(Collect(handles[i]->WaitAll()).first, alone[i]) << "request " << i;
  }
}

TEST_F(EngineModelTest, AConstraintThatDoesNotCompileIsRefusedAtSubmit) {
  std::unique_ptr<Engine> engine = MakeEngine();
  Request r = Greedy("bad", "x", 4);
  r.constraint = grammar::OutputConstraint::JsonSchema(R"({"type":"string","not":{}})");
  auto h = engine->Submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kUnsupported);  // valid, but not enforceable
  EXPECT_NE(h.status().message().find("not"), std::string::npos) << h.status().ToString();
  r.constraint = grammar::OutputConstraint::JsonSchema("{not json");
  EXPECT_EQ(engine->Submit(r).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pier::engine
