// Batch invariance on the default model: a token's logits (and the K/V it
// writes) are bitwise identical whatever batch it runs in, however its prompt
// is chunked, and whether the K/V it reads came from a prefill or from decoding.
//
// The prompt is ~300 tokens (the fixture's prompts, concatenated). Its one-step
// prefill is the reference. Chunkings: several whole-prompt chunkings (chunk
// size 1 is decoding one token at a time), then chunk sizes 1..64 (all) and up
// to 300 (sampled) at random split points: the K/V before the split are copied from
// the reference run (so only the chunk itself is computed), and the chunk's
// logits and the K/V it writes must equal the reference's bits. Batches: a
// chunk of the prompt in batches of 2..64 with other sequences (prompt pieces
// and decode tokens at other positions, in other blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/companion_batch.h"
#include "engine/runner/local_model.h"
#include "engine/reference_fixture.h"
#include "engine/test_governor.h"

namespace pier::engine {
namespace {

constexpr int64_t kPromptTokens = 300;
constexpr int64_t kBlock = 16;
constexpr int64_t kPromptBlocks = (kPromptTokens + kBlock - 1) / kBlock;  // 19

class BatchInvarianceTest : public ::testing::Test {
 protected:
  // Blocks [0, 19): the reference prompt. [19, 38): chunk scratch. [38, ...): companions.
  static constexpr int32_t kReferenceBlock = 0;
  static constexpr int32_t kScratchBlock = kPromptBlocks;
  static constexpr int32_t kCompanionBlock = 2 * kPromptBlocks;
  static constexpr testing::CompanionLayout kCompanions = {.prompt_tokens = kPromptTokens,
                                                           .block_size = kBlock,
                                                           .reference_block = kReferenceBlock,
                                                           .prompt_blocks = kPromptBlocks,
                                                           .companion_block = kCompanionBlock};

  static void SetUpTestSuite() {
    LocalModelOptions options;
    options.path = PIER_DEFAULT_MODEL_PATH;
    options.threads = 2;
    options.block_size = kBlock;
    options.kv_tokens = (kCompanionBlock + 64 * 2) * kBlock;
    auto model = LocalModel::Open(options, pier::testing::TestGovernor());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value().release();
    prompt_ = new std::vector<int32_t>(
        testing::ReferencePromptTokens(testing::LoadForwardReference(), kPromptTokens));
    const auto start = std::chrono::steady_clock::now();
    const SequenceSpan span = testing::PromptSpan(*prompt_, 0, kPromptTokens, kReferenceBlock,
                                                  kPromptBlocks, LogitsWanted::kAll);
    auto out = model_->runner().Step(Batch{{span}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    reference_ = new std::vector<float>(out->logits.begin(), out->logits.end());
    std::printf("reference prefill of %lld tokens: %.2f s\n", static_cast<long long>(kPromptTokens),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete prompt_;
    delete reference_;
  }

  static int64_t n_vocab() { return model_->runner().shape().n_vocab; }
  static std::span<const float> ReferenceRows(int64_t first, int64_t n) {
    return std::span<const float>(*reference_).subspan(first * n_vocab(), n * n_vocab());
  }

  // Copies positions [0, n) of the reference run's K/V into the scratch blocks.
  static void CopyReferencePrefix(int64_t n) {
    testing::CopyKvPrefix(model_->kv(), kReferenceBlock, kScratchBlock, n);
  }

  // Whether positions [first, first + n) of the scratch blocks hold the reference's K/V bits.
  static bool ScratchKvMatchesReference(int64_t first, int64_t n) {
    return testing::SameKvBytes(model_->kv(), kScratchBlock, kReferenceBlock, first, n);
  }

  // Runs prompt positions [first, first + n) as one span in the scratch blocks.
  static SequenceSpan Chunk(int64_t first, int64_t n, LogitsWanted logits) {
    return testing::PromptSpan(*prompt_, first, n, kScratchBlock, kPromptBlocks, logits);
  }

  static bool SameBits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  static LocalModel* model_;
  static std::vector<int32_t>* prompt_;
  static std::vector<float>* reference_;  // [kPromptTokens, n_vocab]
};
LocalModel* BatchInvarianceTest::model_ = nullptr;
std::vector<int32_t>* BatchInvarianceTest::prompt_ = nullptr;
std::vector<float>* BatchInvarianceTest::reference_ = nullptr;

TEST_F(BatchInvarianceTest, WholePromptChunkingsGiveIdenticalLogits) {
  // Chunk size 1 is decoding one token at a time, each reading K/V written by earlier steps.
  for (int64_t c : {1, 3, 16, 17, 100}) {
    int mismatches = 0;
    for (int64_t first = 0; first < kPromptTokens; first += c) {
      const int64_t n = std::min(c, kPromptTokens - first);
      auto out = model_->runner().Step(Batch{{Chunk(first, n, LogitsWanted::kAll)}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      if (!SameBits(out->logits, ReferenceRows(first, n))) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "chunk size " << c;
    EXPECT_TRUE(ScratchKvMatchesReference(0, kPromptTokens)) << "chunk size " << c;
  }
}

TEST_F(BatchInvarianceTest, EveryChunkSizeAtSampledSplitsGivesIdenticalBits) {
  // Every chunk size 1..64 at two random split points; above 64, every 16th size and the
  // largest (one split each): all sizes would cost 45,000 tokens, too slow for a test.
  std::mt19937 rng(17);
  int checked = 0;
  for (int64_t c = 1; c <= kPromptTokens; ++c) {
    if (c > 64 && c % 16 != 0 && c != kPromptTokens) continue;
    const int splits = c <= 64 ? 2 : 1;
    for (int i = 0; i < splits; ++i) {
      const int64_t first = rng() % (kPromptTokens - c + 1);
      CopyReferencePrefix(first);
      auto out = model_->runner().Step(Batch{{Chunk(first, c, LogitsWanted::kLast)}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_TRUE(SameBits(out->logits, ReferenceRows(first + c - 1, 1)))
          << "chunk of " << c << " at " << first;
      EXPECT_TRUE(ScratchKvMatchesReference(first, c)) << "chunk of " << c << " at " << first;
      ++checked;
    }
  }
  std::printf("%d chunks checked\n", checked);
}

TEST_F(BatchInvarianceTest, CompanySequencesDoNotChangeBits) {
  // The target: prompt positions [200, 208) with logits at every position, after a prefix
  // copied from the reference. Companions: spans of 1..6 tokens (mostly single decode
  // tokens) at random positions, each writing its own blocks and reading the reference's.
  const int64_t first = 200, n = 8;
  std::mt19937 rng(23);
  for (int b = 2; b <= 64; ++b) {
    CopyReferencePrefix(first);
    const int target_index = static_cast<int>(rng() % b);
    const Batch batch = testing::CompanionBatch(Chunk(first, n, LogitsWanted::kAll), b,
                                                target_index, *prompt_, kCompanions, rng);
    auto out = model_->runner().Step(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::vector<float> got = testing::RowsOfSequence(*out, target_index);
    EXPECT_TRUE(SameBits(got, ReferenceRows(first, n)))
        << "batch of " << b << ", target at " << target_index;
    EXPECT_TRUE(ScratchKvMatchesReference(first, n)) << "batch of " << b;
  }
}

}  // namespace
}  // namespace pier::engine
