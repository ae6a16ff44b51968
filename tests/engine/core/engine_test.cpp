// Engine on the fake model runner: validation at Submit, batched equals alone, preemption and
// resume, aborts, stop strings, n > 1, priorities and a random submit/abort trace.
#include "engine/core/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "engine/core/fake_model.h"
#include "engine/core/swap_pool.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::FakeTokenizer;
using testing::SwapPool;
using testing::TokensOf;
using testing::VectorKvStore;

constexpr int64_t kVocab = 40;

// A fake model and an engine over it, driven with RunStep() (no engine thread).
struct Rig {
  Rig(int64_t n_blocks, int64_t block_size, SchedulerOptions sched = {},
      const tokenizer::Tokenizer* tok = nullptr, int64_t context = 4096, int64_t swap_blocks = 0)
      : kv(FakeLayout(block_size), n_blocks), runner(&kv, kVocab, context) {
    EngineOptions options;
    options.scheduler = sched;
    options.start_thread = false;
    options.swap_blocks = swap_blocks;
    options.swap_pool = SwapPool();
    options.end_of_generation_ids = {kVocab - 1};
    auto e = Engine::Create(options, &runner, &kv, tok);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  void RunToIdle(int max_steps = 100000) {
    for (int i = 0; i < max_steps && engine->RunStep(); ++i) {
    }
  }
  VectorKvStore kv;
  FakeRunner runner;
  std::unique_ptr<Engine> engine;
};

std::vector<int32_t> Prompt(int64_t n, uint32_t seed) {
  return testing::RandomPrompt(n, seed, kVocab);
}

Request Greedy(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  return testing::GreedyRequest(std::move(id), std::move(prompt), max_tokens);
}

// Tokens of choice `choice` and the final event.
struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<Event> last;
};
Output Collect(const std::vector<Event>& events, int32_t choice = 0) {
  Output out;
  for (const Event& e : events) {
    if (e.choice != choice) continue;
    if (e.token >= 0) out.tokens.push_back(e.token);
    out.text += e.text;
    if (e.finish.has_value()) out.last = e;
  }
  return out;
}

std::vector<int32_t> RunAlone(const Request& r, int64_t n_blocks = 256, int64_t bs = 4) {
  Rig rig(n_blocks, bs);
  auto h = rig.engine->Submit(r);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  rig.RunToIdle();
  return Collect((*h)->Drain()).tokens;
}

TEST(EngineSwapTest, SwapSpaceComesFromThePinnedPoolAndMustFitIt) {
  VectorKvStore kv(FakeLayout(4), 12);
  FakeRunner runner(&kv, kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  options.scheduler.preempt_by_swap = true;
  options.swap_blocks = 8;
  auto no_pool = Engine::Create(options, &runner, &kv);
  ASSERT_FALSE(no_pool.ok());
  EXPECT_NE(no_pool.status().message().find("needs a swap_pool"), std::string::npos);
  CpuDeviceOptions device_options;
  device_options.capacity_bytes = uint64_t{64} << 20;
  auto device = std::move(CpuDevice::Create(device_options)).value();
  PinnedHostPool small(device.get(), {.limit_bytes = 1});
  options.swap_pool = &small;
  auto too_small = Engine::Create(options, &runner, &kv);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_small.status().message().find("swap space of 8 KV blocks"), std::string::npos)
      << too_small.status().message();
  {
    PinnedHostPool pool(device.get(), {.limit_bytes = uint64_t{8} << 20});
    options.swap_pool = &pool;
    auto engine = Engine::Create(options, &runner, &kv);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    EXPECT_GT(pool.Stats().pool.allocated_bytes, 0u) << "the swap slots are the pool's";
  }
}

TEST(EngineTest, RefusesARequestThatCanNeverFitWithTheLimitInTheError) {
  Rig rig(8, 4);  // 32 tokens of KV
  auto h = rig.engine->Submit(Greedy("big", Prompt(20, 1), 13));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("at most 32 tokens"), std::string::npos)
      << h.status().message();
  EXPECT_EQ(rig.engine->Stats().max_request_tokens, 32);
  EXPECT_TRUE(rig.engine->Submit(Greedy("fits", Prompt(20, 1), 12)).ok());
}

TEST(EngineTest, RefusesBadInputAtSubmit) {
  Rig rig(64, 4);
  EXPECT_FALSE(rig.engine->Submit(Greedy("a", {}, 4)).ok());
  EXPECT_FALSE(rig.engine->Submit(Greedy("", {1}, 4)).ok());
  EXPECT_FALSE(rig.engine->Submit(Greedy("b", {1, static_cast<int32_t>(kVocab)}, 4)).ok());
  EXPECT_FALSE(rig.engine->Submit(Greedy("c", {1}, 0)).ok());
  Request bad_n = Greedy("d", {1}, 4);
  bad_n.n = 9;
  EXPECT_FALSE(rig.engine->Submit(bad_n).ok());
  Request bad_p = Greedy("e", {1}, 4);
  bad_p.sampling.top_p = 1.5f;
  EXPECT_FALSE(rig.engine->Submit(bad_p).ok());
  Request bad_stop = Greedy("f", {1}, 4);
  bad_stop.stop = {""};
  EXPECT_FALSE(rig.engine->Submit(bad_stop).ok());
  EXPECT_FALSE(ParsePriority("urgent").ok());
  EXPECT_EQ(*ParsePriority("critical"), Priority::kCritical);
  ASSERT_TRUE(rig.engine->Submit(Greedy("g", {1}, 4)).ok());
  EXPECT_FALSE(rig.engine->Submit(Greedy("g", {1}, 4)).ok());  // id in use
  rig.RunToIdle();
  EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
}

TEST(EngineTest, ConcurrentRequestsProduceTheSameTokensAsAlone) {
  std::vector<Request> requests;
  for (int i = 0; i < 12; ++i) {
    requests.push_back(Greedy("r" + std::to_string(i), Prompt(1 + (i * 37) % 60, i), 5 + i % 7));
  }
  Rig rig(256, 4, {.max_batched_tokens = 16, .max_seqs = 8});
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) handles.push_back(*rig.engine->Submit(r));
  rig.RunToIdle();
  for (size_t i = 0; i < requests.size(); ++i) {
    Output out = Collect(handles[i]->Drain());
    ASSERT_TRUE(out.last.has_value());
    EXPECT_EQ(*out.last->finish, FinishReason::kLength);
    EXPECT_EQ(out.tokens, RunAlone(requests[i])) << "request " << i;
    EXPECT_EQ(out.last->usage.completion_tokens, requests[i].max_tokens);
  }
  // Several sequences shared steps.
  int64_t max_spans = 0;
  for (const auto& s : rig.runner.steps()) max_spans = std::max<int64_t>(max_spans, s.spans.size());
  EXPECT_GT(max_spans, 2);
  EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
}

// A step the runner fails computes nothing: its requests end with the runner's error, and the
// blocks it was to fill are not named in the prefix cache (a later request with the same prompt
// would read K/V never written).
TEST(EngineTest, AFailedStepLeavesNothingInThePrefixCache) {
  Rig rig(64, 4);
  const Request first = Greedy("failed", Prompt(20, 77), 4);
  rig.runner.FailNextStep();
  auto h1 = rig.engine->Submit(first);
  ASSERT_TRUE(h1.ok());
  rig.RunToIdle();
  const Output failed = Collect((*h1)->Drain());
  ASSERT_TRUE(failed.last.has_value());
  EXPECT_EQ(*failed.last->finish, FinishReason::kError);
  EXPECT_NE(failed.last->error.find("workspace was refused"), std::string::npos);
  EXPECT_EQ(rig.engine->Stats().kv_blocks_cached, 0);
  Request again = first;
  again.id = "again";
  auto h2 = rig.engine->Submit(again);
  ASSERT_TRUE(h2.ok());
  rig.RunToIdle();
  EXPECT_EQ(rig.engine->Stats().prompt_tokens_cached, 0);
  EXPECT_EQ(Collect((*h2)->Drain()).tokens, RunAlone(first));
  EXPECT_TRUE(rig.engine->CheckConsistency().ok());
}

TEST(EngineTest, PreemptedRequestsResumeWithExactlyTheirTokens) {
  for (bool swap : {false, true}) {
    SCOPED_TRACE(swap ? "swap" : "recompute");
    // 12 blocks of 4 tokens: four requests of up to 40 tokens each cannot all stay.
    std::vector<Request> requests;
    for (int i = 0; i < 4; ++i)
      requests.push_back(Greedy("p" + std::to_string(i), Prompt(10, 50 + i), 30));
    Rig rig(12, 4, {.max_batched_tokens = 32, .max_seqs = 4, .preempt_by_swap = swap}, nullptr,
            4096, swap ? 64 : 0);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Request& r : requests) handles.push_back(*rig.engine->Submit(r));
    rig.RunToIdle();
    EXPECT_GT(rig.engine->Stats().preemptions, 0);
    EXPECT_EQ(rig.engine->Stats().swap_outs > 0, swap);
    for (size_t i = 0; i < requests.size(); ++i) {
      Output out = Collect(handles[i]->Drain());
      EXPECT_EQ(out.tokens.size(), 30u);
      EXPECT_EQ(out.tokens, RunAlone(requests[i])) << "request " << i;
    }
    EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
    EXPECT_EQ(rig.engine->Stats().swapped, 0);
    EXPECT_TRUE(rig.engine->CheckConsistency().ok());
  }
}

TEST(EngineTest, PrefixCacheHitGivesTheSameOutputAsAColdRun) {
  const std::vector<int32_t> system = Prompt(24, 9);
  std::vector<int32_t> p1 = system, p2 = system;
  p1.push_back(3);
  p2.push_back(4);
  Rig rig(64, 4);
  auto h1 = *rig.engine->Submit(Greedy("one", p1, 6));
  rig.RunToIdle();
  auto h2 = *rig.engine->Submit(Greedy("two", p2, 6));
  rig.RunToIdle();
  Output o2 = Collect(h2->Drain());
  ASSERT_TRUE(o2.last.has_value());
  EXPECT_EQ(o2.last->usage.cached_prompt_tokens, 24);
  EXPECT_EQ(o2.tokens, RunAlone(Greedy("two", p2, 6)));
  EXPECT_GT(rig.engine->Stats().prefix_hit_rate, 0.0);
  (void)h1;
}

TEST(EngineTest, AbortMidPrefillAndMidDecodeFreesEveryBlock) {
  Rig rig(64, 4, {.max_batched_tokens = 8, .max_seqs = 4});
  auto prefill = *rig.engine->Submit(Greedy("prefill", Prompt(100, 1), 4));
  auto decode = *rig.engine->Submit(Greedy("decode", Prompt(3, 2), 100));
  for (int i = 0; i < 4; ++i) rig.engine->RunStep();
  EXPECT_GT(rig.engine->Stats().kv_blocks_used, 0);
  rig.engine->Abort("prefill");
  rig.engine->Abort("decode");
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
  EXPECT_EQ(rig.engine->Stats().running + rig.engine->Stats().waiting, 0);
  for (auto* h : {&prefill, &decode}) {
    Output out = Collect((*h)->Drain());
    ASSERT_TRUE(out.last.has_value());
    EXPECT_EQ(*out.last->finish, FinishReason::kAbort);
    EXPECT_TRUE((*h)->finished());
  }
  EXPECT_TRUE(rig.engine->CheckConsistency().ok());
}

TEST(EngineTest, StopStringIsNeverStreamedEvenInPart) {
  FakeTokenizer tok(kVocab);
  const Request base = Greedy("base", Prompt(5, 3), 20);
  std::string full;
  {
    Rig rig(64, 4, {}, &tok);
    auto h = *rig.engine->Submit(base);
    rig.RunToIdle();
    full = Collect(h->Drain()).text;
  }
  ASSERT_EQ(full.size(), 20u);
  // A stop string made of three characters from the middle of the output.
  const std::string stop = full.substr(8, 3);
  const std::string expected = full.substr(0, full.find(stop));
  Rig rig(64, 4, {}, &tok);
  Request r = base;
  r.id = "stopped";
  r.stop = {stop};
  auto h = *rig.engine->Submit(r);
  std::string streamed;
  while (rig.engine->RunStep()) {
    for (const Event& e : h->Drain()) {
      streamed += e.text;
      // Nothing streamed so far may contain the stop string or end with a prefix of it
      // that later completes it.
      EXPECT_EQ(streamed.find(stop), std::string::npos);
      EXPECT_EQ(expected.compare(0, streamed.size(), streamed), 0) << streamed;
      if (e.finish.has_value()) {
        EXPECT_EQ(*e.finish, FinishReason::kStop);
      }
    }
  }
  EXPECT_EQ(streamed, expected);
  EXPECT_TRUE(h->finished());
}

TEST(EngineTest, EndOfGenerationTokenStopsUnlessIgnored) {
  // Find a prompt whose greedy output contains the end-of-generation token kVocab - 1.
  for (uint32_t seed = 0; seed < 400; ++seed) {
    Request r = Greedy("x", Prompt(4, seed), 30);
    std::vector<int32_t> tokens = RunAlone(r);
    auto it = std::find(tokens.begin(), tokens.end(), kVocab - 1);
    if (it == tokens.end()) continue;
    r.ignore_eos = false;
    Rig rig(256, 4);
    auto h = *rig.engine->Submit(r);
    rig.RunToIdle();
    Output out = Collect(h->Drain());
    EXPECT_EQ(out.tokens, std::vector<int32_t>(tokens.begin(), it + 1));
    EXPECT_EQ(*out.last->finish, FinishReason::kStop);
    return;
  }
  FAIL() << "no prompt produced the end-of-generation token";
}

TEST(EngineTest, ParallelSamplesShareThePromptAndMatchSeparateSeeds) {
  Request r = Greedy("n3", Prompt(21, 5), 8);
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 100;
  r.n = 3;
  Rig rig(128, 4);
  auto h = *rig.engine->Submit(r);
  rig.RunToIdle();
  std::vector<Event> events = h->Drain();
  std::set<std::vector<int32_t>> distinct;
  for (int32_t c = 0; c < 3; ++c) {
    Output out = Collect(events, c);
    ASSERT_TRUE(out.last.has_value());
    EXPECT_EQ(out.tokens.size(), 8u);
    Request alone = r;
    alone.n = 1;
    alone.sampling.seed = 100 + c;
    EXPECT_EQ(out.tokens, RunAlone(alone)) << "choice " << c;
    distinct.insert(out.tokens);
  }
  EXPECT_GT(distinct.size(), 1u);
  // Choices 1 and 2 were forked after the prompt: nothing recomputed, and the shared partial
  // last block (21 = 5 * 4 + 1 tokens) was copied before the first two writes to it.
  EXPECT_EQ(rig.engine->Stats().cow_copies, 2);
  int64_t prompt_tokens_computed = 0;
  for (const auto& step : rig.runner.steps()) {
    for (const auto& [id, n, pos] : step.spans) prompt_tokens_computed += pos < 21 ? n : 0;
  }
  EXPECT_EQ(prompt_tokens_computed, 21);
  EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
}

TEST(EngineTest, PromptLogprobsMatchTheSamplersLogprobsOfEachPrefix) {
  const std::vector<int32_t> prompt = Prompt(23, 17);
  Request r = Greedy("plp", prompt, 2);
  r.prompt_logprobs = 5;
  r.n = 2;  // reported once, with choice 0's first token
  // Chunked prefill (8 tokens a step) and a warm prefix cache that must not be used.
  Rig rig(64, 4, {.max_batched_tokens = 8, .max_seqs = 4});
  ASSERT_TRUE(rig.engine->Submit(Greedy("warm", prompt, 1)).ok());
  rig.RunToIdle();
  auto h = *rig.engine->Submit(r);
  rig.RunToIdle();
  std::vector<Event> events = h->Drain();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().choice, 0);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_TRUE(events[i].prompt_logprobs.empty());
  const std::vector<PromptTokenLogprob>& lps = events.front().prompt_logprobs;
  ASSERT_EQ(lps.size(), prompt.size() - 1);
  for (size_t i = 0; i < lps.size(); ++i) {
    const PromptTokenLogprob& lp = lps[i];
    EXPECT_EQ(lp.position, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(lp.token, prompt[i + 1]);
    ASSERT_EQ(lp.top_logprobs.size(), 5u);
    // The distribution after prompt[0..i] is what a request with that prompt samples from.
    Request prefix =
        Greedy("prefix", std::vector<int32_t>(prompt.begin(), prompt.begin() + i + 1), 1);
    prefix.sampling.logprobs = 5;
    Rig alone(64, 4);
    auto ph = *alone.engine->Submit(prefix);
    alone.RunToIdle();
    const Event first = ph->Drain().front();
    ASSERT_EQ(first.top_logprobs.size(), 5u);
    bool in_top = false;
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top_logprobs[k].token, first.top_logprobs[k].token) << "position " << i + 1;
      // Bit for bit: the same logits (batch invariance) through the sampler's own
      // log-softmax (deterministic exp), not a second implementation.
      EXPECT_EQ(lp.top_logprobs[k].logprob, first.top_logprobs[k].logprob) << "position " << i + 1;
      if (lp.top_logprobs[k].token == lp.token) {
        in_top = true;
        EXPECT_FLOAT_EQ(lp.logprob, lp.top_logprobs[k].logprob);
      }
    }
    if (!in_top) {
      EXPECT_LE(lp.logprob, lp.top_logprobs[4].logprob);
    }
    EXPECT_LT(lp.logprob, 0.0f);
  }
  EXPECT_EQ(events.back().usage.cached_prompt_tokens, 0);
  Request bad = Greedy("bad", prompt, 1);
  bad.prompt_logprobs = 21;
  EXPECT_FALSE(rig.engine->Submit(bad).ok());
}

TEST(EngineTest, CriticalRequestIsAdmittedAtOnceAndFinishesFirstUnderLowLoad) {
  Rig rig(32, 4, {.max_batched_tokens = 16, .max_seqs = 4});
  std::vector<std::shared_ptr<RequestHandle>> low;
  for (int i = 0; i < 8; ++i) {
    Request r = Greedy("low" + std::to_string(i), Prompt(12, 70 + i), 20);
    r.priority = Priority::kLow;
    low.push_back(*rig.engine->Submit(r));
  }
  for (int i = 0; i < 3; ++i) rig.engine->RunStep();
  Request c = Greedy("critical", Prompt(12, 99), 5);
  c.priority = Priority::kCritical;
  auto ch = *rig.engine->Submit(c);
  const size_t steps_before = rig.runner.steps().size();
  rig.engine->RunStep();
  ASSERT_GT(rig.runner.steps().size(), steps_before);
  // The critical request is computed in the very next step.
  int64_t critical_seq = -1;
  for (const auto& [id, n, pos] : rig.runner.steps().back().spans) {
    if (pos == 0 && n == 12) critical_seq = id;
  }
  EXPECT_GE(critical_seq, 0);
  rig.RunToIdle();
  const TimestampUs critical_done = Collect(ch->Drain()).last->times.finished_us;
  for (auto& h : low) EXPECT_LT(critical_done, Collect(h->Drain()).last->times.finished_us);
}

TEST(EngineTest, RandomSubmitAbortFinishReturnsEveryBlock) {
  for (bool swap : {false, true}) {
    SCOPED_TRACE(swap ? "swap" : "recompute");
    Rig rig(24, 4,
            {.max_batched_tokens = 24, .max_seqs = 6, .aging_steps = 8, .preempt_by_swap = swap},
            nullptr, 4096, swap ? 16 : 0);
    std::mt19937 rng(swap ? 12 : 11);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    int next = 0;
    for (int op = 0; op < 10000; ++op) {
      const uint32_t what = rng() % 10;
      if (what < 3) {
        Request r = Greedy("q" + std::to_string(next++), Prompt(1 + rng() % 40, rng()),
                           1 + static_cast<int32_t>(rng() % 30));
        r.priority = static_cast<Priority>(rng() % 4);
        r.n = 1 + static_cast<int32_t>(rng() % 3);
        r.stop_token_ids = {static_cast<int32_t>(rng() % kVocab)};
        auto h = rig.engine->Submit(r);
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        handles.push_back(*h);
      } else if (what < 5 && next > 0) {
        rig.engine->Abort("q" + std::to_string(rng() % next));
      } else {
        rig.engine->RunStep();
      }
      ASSERT_TRUE(rig.engine->CheckConsistency().ok());
    }
    rig.RunToIdle();
    EngineStats stats = rig.engine->Stats();
    EXPECT_EQ(stats.kv_blocks_used, 0);
    EXPECT_EQ(stats.running + stats.waiting, 0);
    for (auto& h : handles) EXPECT_TRUE(h->finished());
    EXPECT_TRUE(rig.engine->CheckConsistency().ok());
    EXPECT_GT(stats.preemptions, 0);
    EXPECT_GT(stats.cow_copies, 0);
    EXPECT_EQ(stats.swap_outs > 0, swap);
  }
}

TEST(EngineTest, EngineThreadServesSubmissionsFromManyThreads) {
  VectorKvStore kv(FakeLayout(4), 64);
  FakeRunner runner(&kv, kVocab, 4096);
  EngineOptions options;
  options.scheduler = {.max_batched_tokens = 32, .max_seqs = 8};
  auto engine = *Engine::Create(options, &runner, &kv);
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> got(8), want(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Request r = Greedy("t" + std::to_string(t), Prompt(5 + t, 200 + t), 10);
      auto h = engine->Submit(r);
      ASSERT_TRUE(h.ok());
      got[t] = Collect((*h)->WaitAll()).tokens;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(got[t], RunAlone(Greedy("t", Prompt(5 + t, 200 + t), 10))) << "thread " << t;
  }
  EXPECT_GT(engine->Stats().steps, 0);
  EXPECT_GT(engine->Stats().last_step_at_us, 0);
}

// Fails one chosen step with RESOURCE_EXHAUSTED (as a runner short of workspace memory would).
class FailingRunner final : public ModelRunner {
 public:
  FailingRunner(ModelRunner* inner, int fail_at) : inner_(inner), fail_at_(fail_at) {}
  const ModelShape& shape() const override { return inner_->shape(); }
  Result<StepOutput> Step(const Batch& batch) override {
    if (step_++ == fail_at_) return ResourceExhaustedError("workspace: out of memory (test)");
    return inner_->Step(batch);
  }

 private:
  ModelRunner* inner_;
  int fail_at_;
  int step_ = 0;
};

TEST(EngineTest, RunnerErrorEndsTheBatchsRequestsWithTheReasonAndFreesTheirBlocks) {
  VectorKvStore kv(FakeLayout(4), 64);
  FakeRunner fake(&kv, kVocab, 4096);
  FailingRunner runner(&fake, 2);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, &kv);
  auto a = *engine->Submit(Greedy("a", Prompt(6, 1), 10));
  auto b = *engine->Submit(Greedy("b", Prompt(9, 2), 10));
  while (engine->RunStep()) {
  }
  for (auto* h : {&a, &b}) {
    std::vector<Event> events = (*h)->Drain();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().finish, FinishReason::kError);
    EXPECT_NE(events.back().error.find("out of memory (test)"), std::string::npos);
    EXPECT_EQ(events.back().usage.completion_tokens, 2);
  }
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  EXPECT_TRUE(engine->CheckConsistency().ok());
  // The engine goes on serving.
  Request c = Greedy("c", Prompt(5, 3), 4);
  auto hc = *engine->Submit(c);
  while (engine->RunStep()) {
  }
  EXPECT_EQ(Collect(hc->Drain()).tokens, RunAlone(c));
}

TEST(EngineTest, ShutdownAbortsUnfinishedRequests) {
  std::shared_ptr<RequestHandle> h;
  {
    Rig rig(64, 4);
    h = *rig.engine->Submit(Greedy("left", Prompt(5, 1), 50));
    rig.engine->RunStep();
  }
  Output out = Collect(h->Drain());
  ASSERT_TRUE(out.last.has_value());
  EXPECT_EQ(*out.last->finish, FinishReason::kAbort);
}

}  // namespace
}  // namespace pier::engine

namespace pier::engine {
namespace {

// The queue bound counts requests submitted since the last step too, so a burst cannot
// overshoot it; n > 1 counts each choice.
TEST(EngineQueueTest, MaxWaitingRefusesABurstBeyondTheLimitAndFreesUpAsRequestsRun) {
  VectorKvStore kv(testing::FakeLayout(4), 64);
  FakeRunner runner(&kv, kVocab, 4096);
  EngineOptions options;
  options.scheduler = {.max_batched_tokens = 8, .max_seqs = 1};
  options.start_thread = false;
  options.max_waiting = 3;
  auto engine = *Engine::Create(options, &runner, &kv);
  ASSERT_TRUE(engine->Submit(Greedy("a", Prompt(4, 1), 50)).ok());
  Request two = Greedy("b", Prompt(4, 2), 50);
  two.n = 2;
  ASSERT_TRUE(engine->Submit(two).ok());
  auto refused = engine->Submit(Greedy("c", Prompt(4, 3), 50));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("queue full"), std::string::npos)
      << refused.status().message();
  // One step admits "a" (max_seqs 1): two sequences still wait, so one more fits.
  ASSERT_TRUE(engine->RunStep());
  EXPECT_EQ(engine->Stats().waiting, 1);  // choice 0 of "b" (its sibling forks later)
  EXPECT_TRUE(engine->Submit(Greedy("d", Prompt(4, 4), 50)).ok());
  engine->Abort("a");
  engine->Abort("b");
  engine->Abort("d");
  for (int i = 0; i < 100 && engine->RunStep(); ++i) {
  }
  EXPECT_TRUE(engine->Submit(Greedy("e", Prompt(4, 5), 5)).ok());
}

}  // namespace
}  // namespace pier::engine

namespace pier::engine {
namespace {

TEST(EngineTimestampsTest, QueuedScheduledFirstTokenAndFinishedAreOrdered) {
  Rig rig(64, 4, {.max_batched_tokens = 8, .max_seqs = 1});
  auto first = *rig.engine->Submit(Greedy("a", Prompt(6, 1), 4));
  auto second = *rig.engine->Submit(Greedy("b", Prompt(6, 2), 4));
  rig.RunToIdle();
  for (const auto& handle : {first, second}) {
    const std::vector<Event> events = handle->WaitAll();
    ASSERT_FALSE(events.empty());
    const Timestamps& t = events.back().times;
    EXPECT_GT(t.queued_us, 0);
    EXPECT_GE(t.scheduled_us, t.queued_us);
    EXPECT_GE(t.first_token_us, t.scheduled_us);
    EXPECT_GE(t.finished_us, t.first_token_us);
  }
}

}  // namespace
}  // namespace pier::engine

namespace pier::engine {
namespace {

TEST(EngineIdTest, AnIdMayBeReusedAsSoonAsItsLastEventIsRead) {
  VectorKvStore kv(testing::FakeLayout(4), 64);
  FakeRunner runner(&kv, kVocab, 4096);
  EngineOptions options;
  options.scheduler = {.max_batched_tokens = 16, .max_seqs = 4};
  auto engine = *Engine::Create(options, &runner, &kv);  // with its engine thread
  for (int i = 0; i < 200; ++i) {
    Request r = Greedy("same-id", Prompt(3, static_cast<uint32_t>(i)), 2);
    r.n = 1 + i % 2;
    auto handle = engine->Submit(std::move(r));
    ASSERT_TRUE(handle.ok()) << "round " << i << ": " << handle.status().ToString();
    (*handle)->WaitAll();
  }
  EXPECT_EQ(engine->Stats().requests_finished, 200);
}

}  // namespace
}  // namespace pier::engine
