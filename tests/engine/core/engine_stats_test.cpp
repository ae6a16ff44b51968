// EngineStats' KV figures on the fake model runner: kv_tokens_used counts the positions the
// running sequences' blocks hold (a shared block once), so kv_blocks_used * kv_block_size -
// kv_tokens_used is the KV waste the engine benchmark reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/fake_model.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::GreedyRequest;
using testing::RandomPrompt;
using testing::VectorKvStore;

constexpr int64_t kVocab = 40;
constexpr int64_t kBlockSize = 4;

// A fake model and an engine over it, driven with RunStep() (no engine thread).
struct Rig {
  explicit Rig(int64_t n_blocks = 64)
      : kv(FakeLayout(kBlockSize), n_blocks), runner(&kv, kVocab, 4096) {
    EngineOptions options;
    options.scheduler.max_batched_tokens = 256;
    options.start_thread = false;
    options.end_of_generation_ids = {kVocab - 1};
    auto e = Engine::Create(options, &runner, &kv);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  void Submit(Request r) {
    auto h = engine->Submit(std::move(r));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  VectorKvStore kv;
  FakeRunner runner;
  std::unique_ptr<Engine> engine;
  std::vector<std::shared_ptr<RequestHandle>> handles;
};

TEST(EngineStatsTest, KvTokensUsedCountsComputedPositionsOfRunningSequences) {
  Rig rig;
  rig.Submit(GreedyRequest("a", RandomPrompt(5, 1, kVocab), 10));
  rig.Submit(GreedyRequest("b", RandomPrompt(8, 2, kVocab), 10));
  rig.Submit(GreedyRequest("c", RandomPrompt(3, 3, kVocab), 10));

  // Step 1 computes the three prompts whole: 5 + 8 + 3 positions in 2 + 2 + 1 blocks.
  ASSERT_TRUE(rig.engine->RunStep());
  EngineStats s = rig.engine->Stats();
  EXPECT_EQ(s.kv_block_size, kBlockSize);
  EXPECT_EQ(s.kv_tokens_used, 16);
  EXPECT_EQ(s.kv_blocks_used, 5);

  // Step 2 computes each first sampled token: 6, 9 and 4 positions in 2 + 3 + 1 blocks.
  ASSERT_TRUE(rig.engine->RunStep());
  s = rig.engine->Stats();
  EXPECT_EQ(s.kv_tokens_used, 19);
  EXPECT_EQ(s.kv_blocks_used, 6);
  EXPECT_EQ(s.kv_blocks_used * s.kv_block_size - s.kv_tokens_used, 5);
}

TEST(EngineStatsTest, KvTokensUsedCountsABlockSharedByForkedChoicesOnce) {
  Rig rig;
  Request r = GreedyRequest("n2", RandomPrompt(6, 4, kVocab), 10);
  r.n = 2;
  rig.Submit(std::move(r));

  // Step 1: the prompt (6 positions, 2 blocks); choice 1 forks and shares both blocks.
  ASSERT_TRUE(rig.engine->RunStep());
  EngineStats s = rig.engine->Stats();
  EXPECT_EQ(s.running, 2);
  EXPECT_EQ(s.kv_tokens_used, 6);
  EXPECT_EQ(s.kv_blocks_used, 2);

  // Step 2: both write position 6 into the shared, partly filled block 1, so one copies it
  // first: block 0 still shared (4 positions), two private blocks of 3 positions each.
  ASSERT_TRUE(rig.engine->RunStep());
  s = rig.engine->Stats();
  EXPECT_EQ(s.cow_copies, 1);
  EXPECT_EQ(s.kv_blocks_used, 3);
  EXPECT_EQ(s.kv_tokens_used, 4 + 3 + 3);
}

TEST(EngineStatsTest, KvWasteStaysUnderOneBlockPerSequenceAndEndsAtZero) {
  Rig rig(/*n_blocks=*/256);
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) {
    const auto prompt_len = static_cast<int64_t>(1 + rng() % 30);
    const auto max_tokens = static_cast<int32_t>(1 + rng() % 20);
    rig.Submit(GreedyRequest("r" + std::to_string(i),
                             RandomPrompt(prompt_len, static_cast<uint32_t>(100 + i), kVocab),
                             max_tokens));
  }
  int steps = 0;
  while (rig.engine->RunStep()) {
    ++steps;
    ASSERT_LT(steps, 10000);
    const EngineStats s = rig.engine->Stats();
    const int64_t allocated = s.kv_blocks_used * s.kv_block_size;
    EXPECT_LE(s.kv_tokens_used, allocated);
    // Without sharing, only each running sequence's last block can be partly filled.
    EXPECT_LT(allocated - s.kv_tokens_used, std::max<int64_t>(s.running, 1) * kBlockSize);
  }
  const EngineStats s = rig.engine->Stats();
  EXPECT_EQ(s.requests_finished, 12);
  EXPECT_EQ(s.kv_tokens_used, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

}  // namespace
}  // namespace pier::engine
