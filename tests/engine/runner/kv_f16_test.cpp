// An f16 KV store on the default model: batch invariance holds as with f32 (a prompt
// computed in one step or in chunks, alone or in a batch, gives the same logits and K/V
// bits), and the logits stay close to those of an f32 KV store.
//
// How close, and why. Storing K/V in f16 rounds each value to 11 significant bits (a
// relative error of at most 2^-12). That alone would move the logits very little, but the
// runner rounds activations to 8-bit blocks before every matrix product (see
// forward_reference_test), so a tiny change moves some values across a rounding boundary
// and the 8-bit rounding noise is drawn anew: f16 and f32 KV then differ by about what two
// independent draws of that noise differ by. Measured on this machine: against the float64
// reference (the fixture's 169 positions), max |d logit| / RMS logit has a median of 0.072
// with f16 KV and 0.072 with f32 KV (max 0.30 and 0.51), so f16 KV costs no measurable
// accuracy, and that test holds f16 KV to forward_reference_test's bounds and to at most
// 1.5x f32's median. Between the two runs on the 300-token prompt: median 0.126, max 0.67
// (largest |d logit| 3.0), 4 argmax flips at f32 top-2 gaps up to 0.16; the bounds below
// are about twice the median and 1.5x the max (sqrt(2) x forward_reference_test's 0.6 is
// 0.85), far below a real error (wrong rows or a wrong conversion give errors near 1 or
// more at the median). Argmax may differ only where f32's top-2 gap is below kTieGap;
// greedy decoding must pick f32's 64 tokens, or stop differing only at such a near-tie.
// Where the flips land depends on the draw: with the packed MatMul kernels (another
// rounding order around the same exact integer sums) the two runs differ by median 0.12,
// max 0.39-0.54 (largest |d logit| 1.6-2.4), with 6-10 flips at gaps up to 0.42-0.53 and
// greedy agreement for 9-58 of 64 tokens; kTieGap is 1.5x the largest flip gap seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/companion_batch.h"
#include "engine/runner/local_model.h"
#include "engine/reference_fixture.h"
#include "tensor/float16.h"
#include "engine/test_governor.h"

namespace pier::engine {
namespace {

constexpr double kMaxRelativeError = 1.0;
constexpr double kMaxMedianRelativeError = 0.25;
constexpr double kMaxReferenceError = 0.6;  // forward_reference_test's bounds
constexpr double kMaxReferenceMedianError = 0.15;
constexpr double kTieGap = 0.8;  // logits
constexpr int kGreedySteps = 64;

constexpr int64_t kPromptTokens = 300;
constexpr int64_t kBlock = 16;
constexpr int64_t kPromptBlocks = (kPromptTokens + kBlock - 1) / kBlock;  // 19

int64_t ArgMax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

double TopTwoGap(std::span<const float> row) {
  std::vector<float> v(row.begin(), row.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return static_cast<double>(v[0]) - v[1];
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class KvF16Test : public ::testing::Test {
 protected:
  // Blocks [0, 19): the reference prompt. [19, 38): scratch. [38, ...): companions.
  static constexpr int32_t kReferenceBlock = 0;
  static constexpr int32_t kScratchBlock = kPromptBlocks;
  static constexpr int32_t kCompanionBlock = 2 * kPromptBlocks;
  static constexpr testing::CompanionLayout kCompanions = {.prompt_tokens = kPromptTokens,
                                                           .block_size = kBlock,
                                                           .reference_block = kReferenceBlock,
                                                           .prompt_blocks = kPromptBlocks,
                                                           .companion_block = kCompanionBlock};

  static LocalModel* Open(KvDtype dtype) {
    LocalModelOptions options;
    options.path = PIER_DEFAULT_MODEL_PATH;
    options.threads = 2;
    options.block_size = kBlock;
    options.kv_tokens = (kCompanionBlock + 2 * 64) * kBlock;
    options.kv_dtype = dtype;
    auto model = LocalModel::Open(options, pier::testing::TestGovernor());
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value().release() : nullptr;
  }

  static void SetUpTestSuite() {
    const nlohmann::json fixture = testing::LoadForwardReference();
    prompt_ = new std::vector<int32_t>(testing::ReferencePromptTokens(fixture, kPromptTokens));
    greedy_prompt_ =
        new std::vector<int32_t>(fixture["prompts"][0]["ids"].get<std::vector<int32_t>>());
    f16_ = Open(KvDtype::kF16);
    f32_ = Open(KvDtype::kF32);
    ASSERT_NE(f16_, nullptr);
    ASSERT_NE(f32_, nullptr);
    for (LocalModel* m : {f16_, f32_}) {
      const SequenceSpan span = testing::PromptSpan(*prompt_, 0, kPromptTokens, kReferenceBlock,
                                                    kPromptBlocks, LogitsWanted::kAll);
      auto out = m->runner().Step(Batch{{span}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      (m == f16_ ? reference_f16_ : reference_f32_) =
          new std::vector<float>(out->logits.begin(), out->logits.end());
    }
  }
  static void TearDownTestSuite() {
    delete f16_;
    delete f32_;
    delete prompt_;
    delete greedy_prompt_;
    delete reference_f16_;
    delete reference_f32_;
  }

  static int64_t n_vocab() { return f16_->runner().shape().n_vocab; }
  static std::span<const float> ReferenceRows(int64_t first, int64_t n) {
    return std::span<const float>(*reference_f16_).subspan(first * n_vocab(), n * n_vocab());
  }

  // Copies positions [0, n) of the f16 reference's K/V into the scratch blocks.
  static void CopyReferencePrefix(int64_t n) {
    testing::CopyKvPrefix(f16_->kv(), kReferenceBlock, kScratchBlock, n);
  }

  // Whether positions [first, first + n) of the scratch blocks hold the reference's K/V bytes.
  static bool ScratchKvMatchesReference(int64_t first, int64_t n) {
    return testing::SameKvBytes(f16_->kv(), kScratchBlock, kReferenceBlock, first, n);
  }

  static SequenceSpan Chunk(int64_t first, int64_t n, LogitsWanted logits) {
    return testing::PromptSpan(*prompt_, first, n, kScratchBlock, kPromptBlocks, logits);
  }

  static LocalModel* f16_;
  static LocalModel* f32_;
  static std::vector<int32_t>* prompt_;
  static std::vector<int32_t>* greedy_prompt_;
  static std::vector<float>* reference_f16_;  // [kPromptTokens, n_vocab]
  static std::vector<float>* reference_f32_;  // [kPromptTokens, n_vocab]
};
LocalModel* KvF16Test::f16_ = nullptr;
LocalModel* KvF16Test::f32_ = nullptr;
std::vector<int32_t>* KvF16Test::prompt_ = nullptr;
std::vector<int32_t>* KvF16Test::greedy_prompt_ = nullptr;
std::vector<float>* KvF16Test::reference_f16_ = nullptr;
std::vector<float>* KvF16Test::reference_f32_ = nullptr;

TEST_F(KvF16Test, StoreAndShapeAreF16AtHalfTheBytes) {
  EXPECT_EQ(f16_->kv().layout().dtype, KvDtype::kF16);
  EXPECT_EQ(f16_->runner().shape().kv.dtype, KvDtype::kF16);
  EXPECT_EQ(f32_->runner().shape().kv.dtype, KvDtype::kF32);
  EXPECT_EQ(2 * f16_->kv().layout().bytes_per_block(), f32_->kv().layout().bytes_per_block());
  EXPECT_EQ(2 * f16_->estimate().kv_bytes_per_token, f32_->estimate().kv_bytes_per_token);
  // Layer 0's K and V come from the embeddings alone, so the f16 store holds exactly the f32
  // run's values rounded to nearest even.
  const KvLayout& l = f16_->kv().layout();
  int64_t mismatches = 0, nonzero = 0;
  for (int64_t p = 0; p < kPromptTokens; ++p) {
    const int32_t block = static_cast<int32_t>(kReferenceBlock + p / kBlock);
    const int64_t off = (p % kBlock) * l.row_elements();
    for (bool keys : {true, false}) {
      const auto* half = reinterpret_cast<const uint16_t*>(keys ? f16_->kv().KeyPlane(0, block)
                                                                : f16_->kv().ValuePlane(0, block));
      const float* full = keys ? f32_->kv().Keys(0, block) : f32_->kv().Values(0, block);
      for (int64_t i = off; i < off + l.row_elements(); ++i) {
        mismatches += half[i] != Fp32ToFp16(full[i]);
        nonzero += half[i] != 0;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(nonzero, kPromptTokens * l.row_elements());
}

TEST_F(KvF16Test, ChunkedPromptsGiveIdenticalBits) {
  // Whole-prompt chunkings of 5 and 64 tokens, then decoding the last 40 positions one by
  // one, each reading K/V written by earlier steps.
  for (int64_t c : {5, 64}) {
    int mismatches = 0;
    for (int64_t first = 0; first < kPromptTokens; first += c) {
      const int64_t n = std::min(c, kPromptTokens - first);
      auto out = f16_->runner().Step(Batch{{Chunk(first, n, LogitsWanted::kAll)}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      if (!SameBits(out->logits, ReferenceRows(first, n))) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "chunk size " << c;
    EXPECT_TRUE(ScratchKvMatchesReference(0, kPromptTokens)) << "chunk size " << c;
  }
  const int64_t decode_from = kPromptTokens - 40;
  CopyReferencePrefix(decode_from);
  int mismatches = 0;
  for (int64_t p = decode_from; p < kPromptTokens; ++p) {
    auto out = f16_->runner().Step(Batch{{Chunk(p, 1, LogitsWanted::kLast)}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    if (!SameBits(out->logits, ReferenceRows(p, 1))) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_TRUE(ScratchKvMatchesReference(decode_from, 40));
}

TEST_F(KvF16Test, CompanySequencesDoNotChangeBits) {
  const int64_t first = 200, n = 8;
  std::mt19937 rng(29);
  for (int b : {2, 9, 33}) {
    CopyReferencePrefix(first);
    const int target_index = static_cast<int>(rng() % b);
    const Batch batch = testing::CompanionBatch(Chunk(first, n, LogitsWanted::kAll), b,
                                                target_index, *prompt_, kCompanions, rng);
    auto out = f16_->runner().Step(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::vector<float> got = testing::RowsOfSequence(*out, target_index);
    EXPECT_TRUE(SameBits(got, ReferenceRows(first, n))) << "batch of " << b;
    EXPECT_TRUE(ScratchKvMatchesReference(first, n)) << "batch of " << b;
  }
}

TEST_F(KvF16Test, LogitsAreCloseToF32Kv) {
  std::vector<double> errors;  // per position: max |d logit| / RMS logit (of the f32 run)
  double max_abs = 0;
  int flips = 0;
  double largest_flip_gap = 0;
  const int64_t V = n_vocab();
  for (int64_t p = 0; p < kPromptTokens; ++p) {
    const float* a = reference_f32_->data() + p * V;
    const float* b = reference_f16_->data() + p * V;
    double sq = 0, err = 0;
    for (int64_t i = 0; i < V; ++i) {
      sq += static_cast<double>(a[i]) * a[i];
      err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    }
    max_abs = std::max(max_abs, err);
    errors.push_back(err / std::sqrt(sq / static_cast<double>(V)));
    const std::span<const float> ra(a, V), rb(b, V);
    if (ArgMax(ra) != ArgMax(rb)) {
      ++flips;
      largest_flip_gap = std::max(largest_flip_gap, TopTwoGap(ra));
      EXPECT_LT(TopTwoGap(ra), kTieGap) << "argmax differs at position " << p;
    }
  }
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::printf(
      "f16 vs f32 KV, %lld positions: max |d logit| / RMS logit: median %.4f, max %.4f; "
      "largest |d logit| %.4f; %d argmax flips, at f32 top-2 gaps up to %.4f\n",
      static_cast<long long>(kPromptTokens), median, sorted.back(), max_abs, flips,
      largest_flip_gap);
  EXPECT_LE(median, kMaxMedianRelativeError);
  EXPECT_LE(sorted.back(), kMaxRelativeError);
  EXPECT_GT(sorted.back(), 0.0) << "f16 KV should not give f32's exact logits";
}

// Per position of the fixture's prompts: max |d logit| / RMS logit against the float64
// reference, over the recorded ids (as forward_reference_test measures it).
std::vector<double> ErrorsAgainstReference(LocalModel& model, const nlohmann::json& fixture,
                                           int32_t first_block) {
  const std::vector<int64_t> subset = fixture["subset_ids"].get<std::vector<int64_t>>();
  const int64_t n_vocab = model.runner().shape().n_vocab;
  std::vector<double> errors;
  for (const auto& prompt : fixture["prompts"]) {
    SequenceSpan span;
    span.tokens = prompt["ids"].get<std::vector<int32_t>>();
    span.block_table = testing::BlockRange(first_block, kPromptBlocks);
    span.logits = LogitsWanted::kAll;
    auto out = model.runner().Step(Batch{{span}});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return errors;
    for (size_t i = 0; i < span.tokens.size(); ++i) {
      const auto& ref = prompt["positions"][i];
      errors.push_back(testing::MaxLogitError(out->Row(i), ref, subset) /
                       testing::RmsLogit(ref, n_vocab));
    }
  }
  std::sort(errors.begin(), errors.end());
  return errors;
}

TEST_F(KvF16Test, F16KvIsAsCloseToTheFloat64ReferenceAsF32Kv) {
  const nlohmann::json fixture = testing::LoadForwardReference();
  const std::vector<double> e16 = ErrorsAgainstReference(*f16_, fixture, kScratchBlock);
  const std::vector<double> e32 = ErrorsAgainstReference(*f32_, fixture, kScratchBlock);
  ASSERT_EQ(e16.size(), e32.size());
  ASSERT_FALSE(e16.empty());
  const double median16 = e16[e16.size() / 2], median32 = e32[e32.size() / 2];
  std::printf(
      "against the float64 reference, %zu positions: max |d logit| / RMS logit: f16 KV median "
      "%.4f max %.4f; f32 KV median %.4f max %.4f\n",
      e16.size(), median16, e16.back(), median32, e32.back());
  EXPECT_LE(e16.back(), kMaxReferenceError);
  EXPECT_LE(median16, kMaxReferenceMedianError);
  EXPECT_LE(median16, 1.5 * median32);
}

// q8_0 K/V (34 bytes per 32 values, about half of f16): the same canonical attention on
// exactly widened values, so chunking must not change a bit, and the accuracy bounds of
// forward_reference_test must hold (measured: see the printed line).
TEST_F(KvF16Test, Q8_0KvIsBatchInvariantAndWithinTheReferenceBounds) {
  std::unique_ptr<LocalModel> q8(Open(KvDtype::kQ8_0));
  ASSERT_NE(q8, nullptr);
  const KvLayout& layout = q8->kv().layout();
  EXPECT_EQ(layout.dtype, KvDtype::kQ8_0);
  EXPECT_EQ(layout.head_bytes(), static_cast<size_t>(layout.head_dim / 32 * 34));
  EXPECT_LT(layout.bytes_per_block(), f16_->kv().layout().bytes_per_block() * 55 / 100);

  // The prompt in one step (reference blocks), then in chunks of 37 (scratch blocks).
  auto whole = q8->runner().Step(Batch{{testing::PromptSpan(
      *prompt_, 0, kPromptTokens, kReferenceBlock, kPromptBlocks, LogitsWanted::kAll)}});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  const std::vector<float> reference(whole->logits.begin(), whole->logits.end());
  int mismatches = 0;
  for (int64_t first = 0; first < kPromptTokens; first += 37) {
    const int64_t n = std::min<int64_t>(37, kPromptTokens - first);
    auto out = q8->runner().Step(Batch{{testing::PromptSpan(*prompt_, first, n, kScratchBlock,
                                                            kPromptBlocks, LogitsWanted::kAll)}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::span<const float> want =
        std::span<const float>(reference).subspan(first * n_vocab(), n * n_vocab());
    if (!SameBits(out->logits, want)) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);

  const nlohmann::json fixture = testing::LoadForwardReference();
  const std::vector<double> e8 = ErrorsAgainstReference(*q8, fixture, kScratchBlock);
  ASSERT_FALSE(e8.empty());
  const double median8 = e8[e8.size() / 2];
  std::printf(
      "q8_0 KV against the float64 reference, %zu positions: max |d logit| / RMS logit: median "
      "%.4f max %.4f\n",
      e8.size(), median8, e8.back());
  EXPECT_LE(e8.back(), kMaxReferenceError);
  EXPECT_LE(median8, kMaxReferenceMedianError);
}

TEST_F(KvF16Test, GreedyDecodingPicksTheF32Tokens) {
  Batch b16, b32;
  SequenceSpan span;
  span.sequence_id = 7;
  span.tokens = *greedy_prompt_;
  span.block_table = testing::BlockRange(kScratchBlock, kPromptBlocks);
  b16.sequences = {span};
  b32.sequences = {span};
  auto o16 = f16_->runner().Step(b16);
  auto o32 = f32_->runner().Step(b32);
  ASSERT_TRUE(o16.ok() && o32.ok());
  int64_t position = static_cast<int64_t>(span.tokens.size());
  ASSERT_LE(position + kGreedySteps, kPromptTokens);
  int matched = 0;
  for (int step = 0; step < kGreedySteps; ++step) {
    const auto t16 = static_cast<int32_t>(ArgMax(o16->Row(0)));
    const auto t32 = static_cast<int32_t>(ArgMax(o32->Row(0)));
    if (t16 != t32) {
      EXPECT_LT(TopTwoGap(o32->Row(0)), kTieGap)
          << "step " << step << ": f16 KV picks " << t16 << ", f32 KV " << t32;
      break;
    }
    ++matched;
    for (Batch* b : {&b16, &b32}) {
      b->sequences[0].tokens = {t16};
      b->sequences[0].first_position = position;
    }
    ++position;
    o16 = f16_->runner().Step(b16);
    o32 = f32_->runner().Step(b32);
    ASSERT_TRUE(o16.ok() && o32.ok());
  }
  std::printf("greedy tokens identical with f16 and f32 KV: %d of %d\n", matched, kGreedySteps);
}

}  // namespace
}  // namespace pier::engine
