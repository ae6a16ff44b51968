// KV groups for sliding-window models (kv_groups.h): how layers are grouped, how many blocks a
// sequence holds, and the engine releasing a sliding group's blocks once they fall out of its
// window -- with the same tokens as a run that keeps every block, under preemption (recompute
// and swap), prefix caching, parallel samples and a KV store too small for the plain table.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "engine/core/engine.h"
#include "engine/kv/kv_groups.h"
#include "engine/runner/cpu/llama_model.h"
#include "engine/core/fake_model.h"
#include "engine/core/swap_pool.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::SwapPool;
using testing::VectorKvStore;

TEST(KvGroupsTest, Gemma3MakesOneGlobalAndFiveSlidingGroupsOfThreeLayers) {
  std::vector<int64_t> windows;
  for (int64_t il = 0; il < 18; ++il) {
    windows.push_back(LayerWindow(SlidingWindowPeriod("gemma3"), 512, il));
  }
  const KvGroups g = GroupLayersByWindow(windows);
  EXPECT_EQ(g.layers_per_block, 3);
  EXPECT_EQ(g.windows, (std::vector<int64_t>{512, 512, 512, 512, 512, 0}));
  // Layers 5, 11 and 17 attend everything: the last group, in that order.
  for (int64_t il : {5, 11, 17}) EXPECT_EQ(g.group_of_layer[il], 5) << il;
  EXPECT_EQ(g.slot_of_layer[5], 0);
  EXPECT_EQ(g.slot_of_layer[11], 1);
  EXPECT_EQ(g.slot_of_layer[17], 2);
  // Every (group, slot) holds exactly one layer.
  std::vector<int> used(6 * 3, 0);
  for (int64_t il = 0; il < 18; ++il) ++used[g.group_of_layer[il] * 3 + g.slot_of_layer[il]];
  EXPECT_TRUE(std::all_of(used.begin(), used.end(), [](int n) { return n == 1; }));
}

TEST(KvGroupsTest, OtherPatterns) {
  std::vector<int64_t> gemma2;
  for (int64_t il = 0; il < 26; ++il) {
    gemma2.push_back(LayerWindow(SlidingWindowPeriod("gemma2"), 4096, il));
  }
  const KvGroups g2 = GroupLayersByWindow(gemma2);
  EXPECT_EQ(g2.layers_per_block, 13);
  EXPECT_EQ(g2.windows, (std::vector<int64_t>{4096, 0}));  // layer 0 slides

  const KvGroups plain = GroupLayersByWindow(std::vector<int64_t>(30, 0));
  EXPECT_EQ(plain.layers_per_block, 30);
  EXPECT_EQ(plain.windows, (std::vector<int64_t>{0}));
  EXPECT_FALSE(plain.any_window());

  const KvGroups mistral = GroupLayersByWindow(std::vector<int64_t>(32, 4096));
  EXPECT_EQ(mistral.layers_per_block, 32);
  EXPECT_EQ(mistral.windows, (std::vector<int64_t>{4096}));
  EXPECT_TRUE(mistral.any_window());

  // 4 global and 22 sliding layers (Gemma 3 1B): groups of 2.
  std::vector<int64_t> gemma3_1b;
  for (int64_t il = 0; il < 26; ++il) gemma3_1b.push_back(LayerWindow(6, 512, il));
  const KvGroups g1b = GroupLayersByWindow(gemma3_1b);
  EXPECT_EQ(g1b.layers_per_block, 2);
  EXPECT_EQ(g1b.n_groups(), 13);
}

TEST(KvGroupsTest, BlocksHeldByOneSequence) {
  const KvGroups g = GroupLayersByWindow(std::vector<int64_t>{0, 32, 32});
  // Blocks of 4 positions, chunks of at most 16: the full group holds all 25 blocks of 100
  // positions, each sliding one at most (32 + 14 + 16) / 4 + 2 = 17.
  EXPECT_EQ(g.MaxBlocksHeld(100, 4, 16), 25 + 2 * 17);
  EXPECT_EQ(g.MaxBlocksHeld(20, 4, 16), 3 * 5);  // shorter than the window: everything
  // The plain table (a default KvGroups too): every block.
  EXPECT_EQ(KvGroups{}.MaxBlocksHeld(100, 4, 16), 25);
  EXPECT_EQ(GroupLayersByWindow(std::vector<int64_t>{0, 0}).MaxBlocksHeld(100, 4, 16), 25);
  // A sliding window alone: a sequence of any length holds a bounded number of blocks.
  const KvGroups all_sliding = GroupLayersByWindow(std::vector<int64_t>{32});
  EXPECT_EQ(all_sliding.MaxBlocksHeld(100000, 4, 16), 17);
  // Released entries: those wholly before the first 16-position tile a token reads.
  EXPECT_EQ(KvGroups::FirstReadPosition(40, 32), 0);  // 40 - 31 = 9, tile 0
  EXPECT_EQ(KvGroups::FirstReadPosition(80, 32), 48);
  EXPECT_EQ(g.BlocksBefore(1, 80, 4), 12);
  EXPECT_EQ(g.BlocksBefore(0, 80, 4), 0);
}

constexpr int64_t kVocab = 40;
constexpr int64_t kBs = 4;
constexpr int64_t kWindow = 32;
const std::vector<int64_t> kAttended = {0, kWindow, kWindow};

// One full and two sliding groups of one layer. `release`: the scheduler knows the windows
// and releases blocks; otherwise three groups without windows keep every block (the
// reference: the fake model attends the same positions either way).
KvGroups Groups(bool release) {
  if (release) return GroupLayersByWindow(kAttended);
  return KvGroups{.layers_per_block = 1,
                  .windows = {0, 0, 0},
                  .group_of_layer = {0, 1, 2},
                  .slot_of_layer = {0, 0, 0}};
}

struct Rig {
  // `engine_releases`: EngineOptions::release_sliding_blocks (with release, the model's groups
  // have windows but the engine may still keep every block).
  Rig(int64_t n_blocks, bool release, SchedulerOptions sched = {}, int64_t swap_blocks = 0,
      bool engine_releases = true)
      : kv(FakeLayout(kBs), n_blocks), runner(&kv, kVocab, 4096, Groups(release), kAttended) {
    EngineOptions options;
    options.release_sliding_blocks = engine_releases;
    options.scheduler = sched;
    options.start_thread = false;
    options.swap_blocks = swap_blocks;
    options.swap_pool = SwapPool();
    auto e = Engine::Create(options, &runner, &kv, nullptr);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  // Runs to idle; the most blocks held at once.
  int64_t RunToIdle() {
    int64_t peak = 0;
    for (int i = 0; i < 100000 && engine->RunStep(); ++i) {
      EXPECT_TRUE(engine->CheckConsistency().ok());
      peak = std::max(peak, engine->Stats().kv_blocks_used);
    }
    return peak;
  }
  VectorKvStore kv;
  FakeRunner runner;
  std::unique_ptr<Engine> engine;
};

struct Output {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
};
Output Collect(const std::vector<Event>& events, int32_t choice = 0) {
  Output out;
  for (const Event& e : events) {
    if (e.choice != choice) continue;
    if (e.token >= 0) out.tokens.push_back(e.token);
    if (e.finish.has_value()) out.finish = e.finish;
  }
  return out;
}

Request Greedy(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  return testing::GreedyRequest(std::move(id), std::move(prompt), max_tokens);
}

std::vector<int32_t> Prompt(int64_t n, uint32_t seed) {
  return testing::RandomPrompt(n, seed, kVocab);
}

Output RunAlone(const Request& r, bool release) {
  Rig rig(2048, release);
  auto h = rig.engine->Submit(r);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  rig.RunToIdle();
  return Collect((*h)->Drain());
}

TEST(KvWindowEngineTest, ReleasedBlocksLeaveTheTokensAsTheyWere) {
  const Request r = Greedy("long", Prompt(150, 1), 40);
  Rig keep(2048, false);
  Rig release(2048, true);
  auto hk = keep.engine->Submit(r);
  auto hr = release.engine->Submit(r);
  ASSERT_TRUE(hk.ok() && hr.ok());
  const int64_t peak_keep = keep.RunToIdle();
  const int64_t peak_release = release.RunToIdle();
  const Output a = Collect((*hk)->Drain()), b = Collect((*hr)->Drain());
  ASSERT_EQ(b.finish, FinishReason::kLength);
  EXPECT_EQ(a.tokens.size(), 40u);
  EXPECT_EQ(a.tokens, b.tokens);
  // 188 positions computed before the step that ends it: 47 blocks per group kept. The default
  // budget reads the prompt in one step, so the sliding groups hold it whole until that step
  // ends; then only their window.
  EXPECT_EQ(peak_keep, 3 * 47);
  EXPECT_LT(peak_release, peak_keep);
  EXPECT_EQ(release.engine->Stats().kv_blocks_used, 0);
  // The engine told to keep them: the windowed model holds what full attention would.
  Rig told_to_keep(2048, true, {}, 0, /*engine_releases=*/false);
  auto ht = told_to_keep.engine->Submit(r);
  ASSERT_TRUE(ht.ok());
  EXPECT_EQ(told_to_keep.RunToIdle(), peak_keep);
  EXPECT_EQ(Collect((*ht)->Drain()).tokens, a.tokens);
}

TEST(KvWindowEngineTest, ChunkedPrefillHoldsOnlyTheWindow) {
  const Request r = Greedy("long", Prompt(300, 2), 20);
  SchedulerOptions chunked{.max_batched_tokens = 16, .max_seqs = 4};
  Rig release(2048, true, chunked);
  auto h = release.engine->Submit(r);
  ASSERT_TRUE(h.ok());
  const int64_t peak = release.RunToIdle();
  EXPECT_EQ(Collect((*h)->Drain()).tokens, RunAlone(r, false).tokens);
  // 320 positions: 80 blocks of the full group, and each sliding group at most its window
  // plus a chunk.
  EXPECT_LE(peak, 80 + 2 * ((kWindow + 14 + 16) / kBs + 2));
}

TEST(KvWindowEngineTest, MoreLongSequencesRunAtOnce) {
  // 150 blocks; chunks of 16. Kept, a 160-position sequence holds 3 x 40 = 120 blocks, so two
  // cannot both finish without one preempting the other; released, about 40 + 2 x 14 each,
  // so they run side by side to the end.
  SchedulerOptions chunked{.max_batched_tokens = 16, .max_seqs = 4};
  const std::vector<Request> requests = {Greedy("x", Prompt(150, 3), 10),
                                         Greedy("y", Prompt(150, 5), 10)};
  for (bool release : {false, true}) {
    SCOPED_TRACE(release ? "released" : "kept");
    Rig rig(150, release, chunked);
    EXPECT_EQ(rig.engine->Stats().max_request_tokens, 200);  // 150 / 3 blocks of 4
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Request& r : requests) handles.push_back(*rig.engine->Submit(r));
    int64_t most_running = 0;
    for (int i = 0; i < 100000 && rig.engine->RunStep(); ++i) {
      most_running = std::max(most_running, rig.engine->Stats().running);
    }
    EXPECT_EQ(most_running, 2);
    EXPECT_EQ(rig.engine->Stats().preemptions > 0, !release);
    for (size_t i = 0; i < requests.size(); ++i) {
      const Output out = Collect(handles[i]->Drain());
      EXPECT_EQ(out.finish, FinishReason::kLength);
      EXPECT_EQ(out.tokens, RunAlone(requests[i], false).tokens);
    }
  }
}

// Every layer sliding (Mistral-style: one group, with a window): the plain table, its entries
// released behind the window.
TEST(KvWindowEngineTest, OneSlidingGroupReleasesItsBlocks) {
  const Request r = Greedy("all-sliding", Prompt(200, 6), 30);
  std::vector<int32_t> tokens[2];
  int64_t peak[2] = {0, 0};
  for (int release = 0; release < 2; ++release) {
    VectorKvStore kv(FakeLayout(kBs), 2048);
    const KvGroups groups = GroupLayersByWindow(std::vector<int64_t>{release ? kWindow : 0});
    FakeRunner runner(&kv, kVocab, 4096, groups, {kWindow});
    EngineOptions options;
    options.start_thread = false;
    options.scheduler = {.max_batched_tokens = 32, .max_seqs = 4};
    auto engine = Engine::Create(options, &runner, &kv, nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto h = (*engine)->Submit(r);
    ASSERT_TRUE(h.ok());
    for (int i = 0; i < 100000 && (*engine)->RunStep(); ++i) {
      ASSERT_TRUE((*engine)->CheckConsistency().ok());
      peak[release] = std::max(peak[release], (*engine)->Stats().kv_blocks_used);
    }
    const Output out = Collect((*h)->Drain());
    EXPECT_EQ(out.finish, FinishReason::kLength);
    tokens[release] = out.tokens;
  }
  EXPECT_EQ(tokens[0].size(), 30u);
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(peak[0], 57);  // 228 positions computed before the last step
  EXPECT_LE(peak[1], (kWindow + 14 + 32) / kBs + 2);
}

TEST(KvWindowEngineTest, PrefixCacheResumesPastTheWindow) {
  Rig rig(2048, true, {.max_batched_tokens = 32, .max_seqs = 4});
  const Request first = Greedy("a", Prompt(130, 4), 8);
  auto h1 = rig.engine->Submit(first);
  ASSERT_TRUE(h1.ok());
  rig.RunToIdle();
  Request second = first;
  second.id = "b";
  auto h2 = rig.engine->Submit(second);
  ASSERT_TRUE(h2.ok());
  rig.RunToIdle();
  // The sliding groups' blocks of the window before the resume point were kept in the cache
  // when released: the second request starts from the last whole block of its prompt.
  EXPECT_EQ(rig.engine->Stats().prompt_tokens_cached, 128);
  EXPECT_EQ(Collect((*h1)->Drain()).tokens, Collect((*h2)->Drain()).tokens);
}

TEST(KvWindowEngineTest, PressurePreemptionAndSamplesMatchRunningAlone) {
  for (bool swap : {false, true}) {
    SCOPED_TRACE(swap ? "swap" : "recompute");
    std::mt19937 rng(swap ? 7 : 8);
    const std::vector<int32_t> shared = Prompt(70, 9);
    std::vector<Request> requests;
    for (int i = 0; i < 10; ++i) {
      const int64_t length = 20 + rng() % 120;  // two statements: a fixed order of draws
      std::vector<int32_t> prompt = Prompt(length, rng());
      if (i % 3 == 0) prompt.insert(prompt.begin(), shared.begin(), shared.end());
      Request r = Greedy("r" + std::to_string(i), prompt, 5 + static_cast<int32_t>(rng() % 30));
      if (i % 4 == 1) {  // parallel samples share the prompt's blocks (copy-on-write)
        r.n = 2;
        r.sampling.temperature = 0.8f;
        r.sampling.seed = 11 + i;
      }
      requests.push_back(std::move(r));
    }
    Rig rig(190, true, {.max_batched_tokens = 32, .max_seqs = 6, .preempt_by_swap = swap},
            swap ? 64 : 0);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Request& r : requests) {
      auto h = rig.engine->Submit(r);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(*h);
    }
    rig.RunToIdle();
    const EngineStats stats = rig.engine->Stats();
    EXPECT_GT(stats.preemptions, 0);
    EXPECT_EQ(stats.swap_outs > 0, swap);
    EXPECT_EQ(stats.kv_blocks_used, 0);
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<Event> events = handles[i]->Drain();
      // The reference keeps every block, alone in a large store.
      Rig alone(2048, false);
      auto h = alone.engine->Submit(requests[i]);
      ASSERT_TRUE(h.ok());
      alone.RunToIdle();
      const std::vector<Event> reference = (*h)->Drain();
      for (int32_t c = 0; c < requests[i].n; ++c) {
        const Output out = Collect(events, c);
        EXPECT_EQ(out.finish, FinishReason::kLength) << "request " << i << " choice " << c;
        EXPECT_EQ(out.tokens.size(), static_cast<size_t>(requests[i].max_tokens));
        EXPECT_EQ(out.tokens, Collect(reference, c).tokens) << "request " << i << " choice " << c;
      }
    }
  }
}

}  // namespace
}  // namespace pier::engine
