// Engine on Gemma 3 270M (15 of its 18 layers attend the last 512 positions): two 1,100-token
// prompts run side by side in a KV cache that holds only one of them with every layer's blocks,
// because the sliding layers' blocks behind the window are released; each gives the greedy
// tokens the runner gives it alone with every block kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../test_governor.h"
#include "engine/core/engine.h"
#include "engine/runner/local_model.h"
#include "model/gguf_tokenizer.h"

namespace pier::engine {
namespace {

std::vector<int32_t> TokensOf(const std::vector<Event>& events) {
  std::vector<int32_t> tokens;
  for (const Event& e : events) {
    if (e.token >= 0) tokens.push_back(e.token);
  }
  return tokens;
}

TEST(EngineSlidingWindowTest, Gemma3RunsTwoLongPromptsWhereOneFitsWithoutReleases) {
  LocalModelOptions options;
  options.path = std::string(PIER_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf";
  options.threads = 2;
  options.kv_tokens = 1536;  // 96 blocks of 16 positions, 6 groups: 576 blocks
  auto model = LocalModel::Open(options, pier::testing::TestGovernor());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const KvGroups& groups = (*model)->runner().shape().kv_groups;
  ASSERT_EQ(groups.n_groups(), 6);
  ASSERT_EQ((*model)->kv().num_blocks(), 576);
  auto tokenizer = model::LoadTokenizer((*model)->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();

  std::string text;
  for (int i = 0; i < 60; ++i) {
    text += "Entry " + std::to_string(i) +
            ": the tide came in over the harbour wall, and the keeper wrote down the hour. ";
  }
  auto stream = (*tokenizer)->Encode(text);
  ASSERT_TRUE(stream.ok());
  ASSERT_GE(stream->size(), 1200u);
  std::vector<Request> requests;
  for (int i = 0; i < 2; ++i) {
    Request r;
    r.id = "long" + std::to_string(i);
    r.prompt_tokens.assign(stream->begin() + 40 * i, stream->begin() + 40 * i + 1100);
    r.sampling.temperature = 0;
    r.max_tokens = 6;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  // With every block kept, one 1,106-position sequence takes 70 x 6 = 420 of the 576 blocks.
  EXPECT_GT(70 * 6 * 2, (*model)->kv().num_blocks());

  EngineOptions engine_options;
  engine_options.start_thread = false;
  engine_options.scheduler = {.max_batched_tokens = 512, .max_seqs = 4};
  auto engine =
      Engine::Create(engine_options, &(*model)->runner(), &(*model)->kv(), tokenizer->get());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const Request& r : requests) {
    auto h = (*engine)->Submit(r);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  int64_t most_running = 0, most_blocks = 0;
  for (int i = 0; i < 1000 && (*engine)->RunStep(); ++i) {
    const EngineStats stats = (*engine)->Stats();
    most_running = std::max(most_running, stats.running);
    most_blocks = std::max(most_blocks, stats.kv_blocks_used);
  }
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(most_running, 2);
  EXPECT_EQ(stats.preemptions, 0);
  EXPECT_LE(most_blocks, 576);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  std::printf("two 1,106-position sequences: at most %lld of 576 blocks held\n",
              static_cast<long long>(most_blocks));

  // The reference: the runner alone, the whole prompt in one step and then decode steps, every
  // block of every group in the table (ForwardReferenceTest checks that path against float64).
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<int32_t> tokens = TokensOf(handles[i]->Drain());
    ASSERT_EQ(tokens.size(), 6u);
    std::vector<int32_t> sequence = requests[i].prompt_tokens;
    std::vector<int32_t> expected;
    std::vector<int32_t> table(96 * 6);
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    int64_t computed = 0;
    while (expected.size() < 6) {
      SequenceSpan span;
      span.tokens.assign(sequence.begin() + computed, sequence.end());
      span.first_position = computed;
      span.block_table = table;
      auto out = (*model)->runner().Step(Batch{{span}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const auto row = out->Row(0);
      const int32_t next =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      computed = static_cast<int64_t>(sequence.size());
      sequence.push_back(next);
      expected.push_back(next);
    }
    EXPECT_EQ(tokens, expected) << "request " << i;
  }
}

}  // namespace
}  // namespace pier::engine
