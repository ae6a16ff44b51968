// Speculative decoding on the default model (SmolLM2-135M): the output with speculation is
// the output without it, bit for bit -- tokens, logprobs, text, finish reasons and usage --
// for prompt lookup and for a proposer that proposes the plain output itself (every proposal
// kept) or random tokens (almost none kept), greedy and seeded sampling with penalties, at
// batch 1 and in mixed batches, with chunked prefill, prefix-cache hits, preemption, n > 1,
// stop strings and output constraints. Speculation is forced on every step (adaptive off)
// unless a test says otherwise, so verification runs where the planner might hold back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
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

// Everything a client sees of one request, for comparing runs exactly.
struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::string> text;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top;
  std::vector<FinishReason> finish;
  std::vector<int64_t> completion_tokens;
  bool operator==(const Outcome&) const = default;
};

Outcome Gather(const std::vector<Event>& events, int32_t n) {
  Outcome o;
  o.tokens.resize(n);
  o.text.resize(n);
  o.logprobs.resize(n);
  o.top.resize(n);
  o.finish.resize(n, FinishReason::kError);
  o.completion_tokens.resize(n, -1);
  for (const Event& e : events) {
    const auto c = static_cast<size_t>(e.choice);
    if (e.token >= 0) o.tokens[c].push_back(e.token);
    o.text[c] += e.text;
    if (e.logprob.has_value()) o.logprobs[c].push_back(*e.logprob);
    std::vector<std::pair<int32_t, float>> top;
    for (const auto& t : e.top_logprobs) top.emplace_back(t.token, t.logprob);
    if (!top.empty()) o.top[c].push_back(std::move(top));
    if (e.finish.has_value()) {
      o.finish[c] = *e.finish;
      o.completion_tokens[c] = e.usage.completion_tokens;
    }
  }
  return o;
}

// Proposes, for a sequence whose tokens start with a known prompt, the known plain output's
// next tokens (every proposal right), or with `corrupt` every other proposal changed.
class OracleProposer : public Proposer {
 public:
  void Add(std::vector<int32_t> prompt, std::vector<int32_t> output) {
    std::lock_guard lock(mutex_);
    known_.emplace_back(std::move(prompt), std::move(output));
  }
  bool corrupt = false;
  std::vector<std::vector<int32_t>> Propose(std::span<const ProposalRequest> requests) override {
    std::lock_guard lock(mutex_);
    std::vector<std::vector<int32_t>> out;
    for (const ProposalRequest& r : requests) {
      std::vector<int32_t> p;
      for (const auto& [prompt, output] : known_) {
        if (r.tokens.size() < prompt.size() ||
            !std::equal(prompt.begin(), prompt.end(), r.tokens.begin())) {
          continue;
        }
        const size_t done = r.tokens.size() - prompt.size();
        if (done > output.size() ||
            !std::equal(output.begin(), output.begin() + done, r.tokens.begin() + prompt.size())) {
          continue;
        }
        for (size_t i = done; i < output.size() && p.size() < size_t(r.max_tokens); ++i) {
          p.push_back(corrupt && (i % 2 == 1) ? (output[i] + 1) % 1000 : output[i]);
        }
        break;
      }
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> known_;
};

// Random tokens: almost every proposal is refused at its first position.
class RandomProposer : public Proposer {
 public:
  std::vector<std::vector<int32_t>> Propose(std::span<const ProposalRequest> requests) override {
    std::vector<std::vector<int32_t>> out;
    for (const ProposalRequest& r : requests) {
      std::vector<int32_t> p;
      for (int32_t i = 0; i < r.max_tokens; ++i) p.push_back(static_cast<int32_t>(rng_() % 49152));
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  std::mt19937 rng_{7};
};

class EngineSpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DefaultModel opened;
    OpenDefaultModel(4096, &opened);
    model_ = opened.model.release();
    tokenizer_ = opened.tokenizer.release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static EngineOptions Options(SpeculativeMethod method, std::shared_ptr<Proposer> proposer = {},
                               int32_t max_tokens = 8, bool adaptive = false) {
    EngineOptions options;
    options.scheduler = {.max_batched_tokens = 128, .max_seqs = 16};
    options.speculative.method = method;
    options.speculative.max_tokens = max_tokens;
    options.speculative.proposer = std::move(proposer);
    options.speculative.adaptive = adaptive;
    return options;
  }

  std::unique_ptr<Engine> MakeEngine(const EngineOptions& options) {
    auto e = Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  std::vector<int32_t> Encode(const std::string& text) {
    auto tokens = tokenizer_->Encode(text);
    EXPECT_TRUE(tokens.ok());
    return *tokens;
  }

  Request Make(std::string id, const std::string& text, int32_t max_tokens) {
    Request r;
    r.id = std::move(id);
    r.prompt_tokens = Encode(text);
    r.sampling.temperature = 0;
    r.sampling.logprobs = 3;
    r.max_tokens = max_tokens;
    return r;
  }

  // Runs `requests` on an engine made with `options`: all submitted at once (concurrent) or
  // one after another.
  std::vector<Outcome> Run(const EngineOptions& options, const std::vector<Request>& requests,
                           bool concurrent, EngineStats* stats = nullptr) {
    std::unique_ptr<Engine> engine = MakeEngine(options);
    std::vector<Outcome> outcomes;
    if (concurrent) {
      std::vector<std::shared_ptr<RequestHandle>> handles;
      for (const Request& r : requests) {
        auto h = engine->Submit(r);
        EXPECT_TRUE(h.ok()) << h.status().ToString();
        handles.push_back(*h);
      }
      for (size_t i = 0; i < requests.size(); ++i) {
        outcomes.push_back(Gather(handles[i]->WaitAll(), requests[i].n));
      }
    } else {
      for (const Request& r : requests) {
        auto h = engine->Submit(r);
        EXPECT_TRUE(h.ok()) << h.status().ToString();
        outcomes.push_back(Gather((*h)->WaitAll(), r.n));
      }
    }
    const EngineStats s = engine->Stats();
    EXPECT_EQ(s.kv_blocks_used, 0) << "blocks left held";
    if (stats != nullptr) *stats = s;
    return outcomes;
  }

  // Prompts whose answers copy from them (prompt lookup finds its proposals there) and free
  // ones.
  std::vector<Request> Prompts(int32_t max_tokens) {
    const std::vector<std::string> texts = {
        "Repeat exactly: the harbour was quiet, boats rocked, gulls argued and the old pier "
        "creaked. Repeat exactly: the harbour was quiet, boats",
        "Copy this JSON: {\"id\": 7, \"name\": \"Ada\", \"city\": \"Paris\", \"tags\": [\"a\", "
        "\"b\"]}\nCopy: {\"id\": 7,",
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4,",
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time, in a land far away, there lived a dragon who",
        "<|im_start|>user\nList three fruits.<|im_end|>\n<|im_start|>assistant\n",
        "a b c d e f g a b c d e f g a b c",
    };
    std::vector<Request> requests;
    for (size_t i = 0; i < texts.size(); ++i) {
      requests.push_back(Make("p" + std::to_string(i), texts[i], max_tokens));
    }
    return requests;
  }

  static LocalModel* model_;
  static tokenizer::Tokenizer* tokenizer_;
};

LocalModel* EngineSpeculativeTest::model_ = nullptr;
tokenizer::Tokenizer* EngineSpeculativeTest::tokenizer_ = nullptr;

TEST_F(EngineSpeculativeTest, PromptLookupGreedyIsBitExactAloneAndBatched) {
  const std::vector<Request> requests = Prompts(40);
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/false);
  EngineStats stats;
  const std::vector<Outcome> alone =
      Run(Options(SpeculativeMethod::kNgram), requests, /*concurrent=*/false, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(alone[i], plain[i]) << "request " << i;
  EXPECT_GT(stats.spec_draft_tokens, 0);
  EXPECT_GT(stats.spec_accepted_tokens, 0) << "the copying prompts keep some proposals";
  EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens);
  EXPECT_EQ(stats.spec_accepted_lengths.size(), 9u);
  int64_t drafts = 0;
  for (int64_t n : stats.spec_accepted_lengths) drafts += n;
  EXPECT_EQ(drafts, stats.spec_drafts);
  // Fewer steps than tokens: steps yielded several tokens.
  const std::vector<Outcome> batched =
      Run(Options(SpeculativeMethod::kNgram), requests, /*concurrent=*/true);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(batched[i], plain[i]) << "request " << i;
}

TEST_F(EngineSpeculativeTest, EveryProposalKeptOrEveryOtherRefusedGivesThePlainOutput) {
  const std::vector<Request> requests = Prompts(24);
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/false);
  auto oracle = std::make_shared<OracleProposer>();
  for (size_t i = 0; i < requests.size(); ++i) {
    oracle->Add(requests[i].prompt_tokens, plain[i].tokens[0]);
  }
  EngineStats stats;
  const std::vector<Outcome> right =
      Run(Options(SpeculativeMethod::kDraft, oracle), requests, /*concurrent=*/true, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(right[i], plain[i]) << "request " << i;
  // Every proposal kept (the proposals stop at the known output's end).
  EXPECT_GT(stats.spec_draft_tokens, 0);
  EXPECT_EQ(stats.spec_accepted_tokens, stats.spec_draft_tokens);
  // 24 tokens per request in steps of up to 9: far fewer steps than tokens.
  EXPECT_LT(stats.steps, 8 * 24 / 2);

  oracle->corrupt = true;
  const std::vector<Outcome> half =
      Run(Options(SpeculativeMethod::kDraft, oracle), requests, /*concurrent=*/true, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(half[i], plain[i]) << "request " << i;
  EXPECT_GT(stats.spec_accepted_tokens, 0);
  EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens);
}

TEST_F(EngineSpeculativeTest, RandomProposalsChangeNothing) {
  const std::vector<Request> requests = Prompts(16);
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/true);
  EngineStats stats;
  const std::vector<Outcome> random =
      Run(Options(SpeculativeMethod::kDraft, std::make_shared<RandomProposer>(), 32), requests,
          /*concurrent=*/true, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(random[i], plain[i]) << "request " << i;
  EXPECT_GT(stats.spec_drafts, 0);
}

TEST_F(EngineSpeculativeTest, SeededSamplingWithPenaltiesAndNChoicesIsBitExact) {
  std::vector<Request> requests = Prompts(32);
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.top_k = 50;
    r.sampling.seed = 1000 + i;
    r.sampling.repetition_penalty = i % 2 == 0 ? 1.1f : 1.0f;
    r.sampling.frequency_penalty = i % 3 == 0 ? 0.3f : 0.0f;
    r.n = i % 2 == 0 ? 2 : 1;
  }
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/true);
  EngineStats stats;
  const std::vector<Outcome> spec =
      Run(Options(SpeculativeMethod::kNgram), requests, /*concurrent=*/true, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec[i], plain[i]) << "request " << i;
  EXPECT_GT(stats.spec_accepted_tokens, 0);
}

TEST_F(EngineSpeculativeTest, StopStringsAndConstraintsAreThoseOfThePlainPath) {
  std::vector<Request> requests = Prompts(48);
  requests[0].stop = {"gulls"};
  requests[2].stop = {"4, 5"};
  requests[2].stop_token_ids = {};
  constexpr char kSchema[] = R"({"type":"object","properties":{
    "id":{"type":"integer"},"name":{"type":"string","maxLength":12},
    "city":{"type":"string","maxLength":12}},"required":["id","name","city"],
    "additionalProperties":false})";
  requests[1].constraint = grammar::OutputConstraint::JsonSchema(kSchema);
  requests[4].constraint = grammar::OutputConstraint::JsonObject();
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/true);
  EXPECT_EQ(plain[0].finish[0], FinishReason::kStop);
  auto oracle = std::make_shared<OracleProposer>();
  oracle->corrupt = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    oracle->Add(requests[i].prompt_tokens, plain[i].tokens[0]);
  }
  for (auto method : {SpeculativeMethod::kNgram, SpeculativeMethod::kDraft}) {
    EngineStats stats;
    const std::vector<Outcome> spec =
        Run(Options(method, oracle), requests, /*concurrent=*/true, &stats);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(spec[i], plain[i])
          << "request " << i << " method " << SpeculativeMethodName(method);
    }
  }
}

TEST_F(EngineSpeculativeTest, PreemptionChunkedPrefillAndPrefixHitsKeepTheBits) {
  // A small cache (256 positions) and a 32-token budget: long prompts are read in chunks,
  // sequences preempt each other, and the second copy of each prompt hits the prefix cache.
  LocalModelOptions small;
  small.path = PIER_DEFAULT_MODEL_PATH;
  small.threads = 2;
  small.kv_tokens = 256;
  auto model = LocalModel::Open(small, pier::testing::TestGovernor());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<Request> requests = Prompts(40);
  for (size_t i = 0; i < 4; ++i) {
    Request again = requests[i];
    again.id += "-again";
    requests.push_back(again);
  }
  auto run = [&](SpeculativeMethod method, EngineStats* stats) {
    EngineOptions options = Options(method);
    options.scheduler.max_batched_tokens = 32;
    options.scheduler.max_seqs = 6;
    auto engine = Engine::Create(options, &(*model)->runner(), &(*model)->kv(), tokenizer_);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Request& r : requests) handles.push_back(*(*engine)->Submit(r));
    std::vector<Outcome> outcomes;
    for (size_t i = 0; i < requests.size(); ++i) {
      outcomes.push_back(Gather(handles[i]->WaitAll(), 1));
    }
    *stats = (*engine)->Stats();
    EXPECT_EQ(stats->kv_blocks_used, 0);
    return outcomes;
  };
  EngineStats plain_stats, spec_stats;
  const std::vector<Outcome> plain = run(SpeculativeMethod::kOff, &plain_stats);
  const std::vector<Outcome> spec = run(SpeculativeMethod::kNgram, &spec_stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec[i], plain[i]) << "request " << i;
  EXPECT_GT(spec_stats.preemptions, 0);
  EXPECT_GT(spec_stats.prompt_tokens_cached, 0);
  EXPECT_GT(spec_stats.spec_accepted_tokens, 0);
}

TEST_F(EngineSpeculativeTest, AdaptivePlannerSpeculatesOnCopiesAndIsBitExact) {
  // The planner on its own measurements: a copying prompt alone gets proposals.
  const std::vector<Request> requests = {Prompts(64)[0], Prompts(64)[2]};
  const std::vector<Outcome> plain =
      Run(Options(SpeculativeMethod::kOff), requests, /*concurrent=*/false);
  EngineStats stats;
  const std::vector<Outcome> spec = Run(Options(SpeculativeMethod::kNgram, {}, 8, true), requests,
                                        /*concurrent=*/false, &stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec[i], plain[i]) << "request " << i;
  EXPECT_GT(stats.spec_accepted_tokens, 16);
}

TEST_F(EngineSpeculativeTest, BadOptionsAreRefused) {
  EngineOptions options = Options(SpeculativeMethod::kNgram, {}, 0);
  auto e = Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("max_tokens must be in [1, 32]"), std::string::npos)
      << e.status().ToString();
  options = Options(SpeculativeMethod::kDraft);
  e = Engine::Create(options, &model_->runner(), &model_->kv(), tokenizer_);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("proposer"), std::string::npos);
}

}  // namespace
}  // namespace pier::engine
