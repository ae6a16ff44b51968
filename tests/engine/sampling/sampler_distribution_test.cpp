// Statistical tests of the sampler's distributions. Seeds are fixed, so each test is
// deterministic; the bounds (5 standard deviations per token) say what a correct sampler must
// meet for any seed with overwhelming probability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/sampling/sampler.h"

namespace pier::sampling {
namespace {

constexpr int kDraws = 20000;

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    sum += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Logits whose softmax is exactly proportional to `weights`.
std::vector<float> LogitsFor(const std::vector<double>& weights) {
  std::vector<float> logits;
  for (double w : weights) logits.push_back(static_cast<float>(std::log(w)));
  return logits;
}

std::vector<int> Draw(const SamplingParams& params, const std::vector<float>& logits,
                      int draws = kDraws) {
  auto sampler = Sampler::Create(params, static_cast<int32_t>(logits.size()));
  EXPECT_TRUE(sampler.ok()) << sampler.status().ToString();
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> row = logits;  // penalties are off; Sample may still write in place
    auto r = sampler->Sample(row);
    EXPECT_TRUE(r.ok());
    ++counts[r->token];
  }
  return counts;
}

// Every token's frequency within 5 standard deviations of its expected probability; tokens with
// probability 0 never drawn.
void ExpectFrequencies(const std::vector<int>& counts, const std::vector<double>& expected,
                       int draws = kDraws) {
  ASSERT_EQ(counts.size(), expected.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    const double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    const double sigma = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(static_cast<double>(counts[i]) / draws, p, 5 * sigma) << "token " << i;
  }
}

std::vector<double> Renormalized(std::vector<double> p, const std::vector<int>& kept) {
  std::vector<double> out(p.size(), 0.0);
  double sum = 0.0;
  for (int i : kept) sum += p[i];
  for (int i : kept) out[i] = p[i] / sum;
  return out;
}

TEST(SamplerDistributionTest, TemperatureOneFollowsSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -3.0f};
  SamplingParams params;
  params.seed = 1;
  ExpectFrequencies(Draw(params, logits), Softmax(logits, 1.0));
}

TEST(SamplerDistributionTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f};
  for (float t : {0.5f, 2.0f}) {
    SamplingParams params;
    params.temperature = t;
    params.seed = 2;
    ExpectFrequencies(Draw(params, logits), Softmax(logits, t));
  }
}

TEST(SamplerDistributionTest, TopKNeverPicksOutsideTheKBest) {
  std::vector<float> logits(1000);
  uint64_t state = 12345;
  for (float& l : logits) l = static_cast<float>(SplitMix64(&state) % 1000) / 250.0f;
  std::vector<int> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  ASSERT_GT(logits[ids[4]], logits[ids[5]]) << "test logits need a clean top 5";
  std::vector<int> top5(ids.begin(), ids.begin() + 5);

  SamplingParams params;
  params.top_k = 5;
  params.seed = 3;
  ExpectFrequencies(Draw(params, logits), Renormalized(Softmax(logits, 1.0), top5));
}

TEST(SamplerDistributionTest, TopKBreaksTiesTowardLowerIds) {
  SamplingParams params;
  params.top_k = 2;
  params.seed = 4;
  // Ids 1, 3 and 5 tie for best: top-2 keeps 1 and 3.
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 5.0f, 2.0f, 5.0f};
  ExpectFrequencies(Draw(params, logits, 4000), {0, 0.5, 0, 0.5, 0, 0}, 4000);
}

TEST(SamplerDistributionTest, TopPKeepsTheShortestPrefixReachingP) {
  // Probabilities 0.05, 0.5, 0.15, 0.3 (shuffled ids so id order is not rank order).
  const std::vector<double> p = {0.05, 0.5, 0.15, 0.3};
  const auto logits = LogitsFor(p);
  SamplingParams params;
  params.seed = 5;
  params.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3: keeps ids 1 and 3
  ExpectFrequencies(Draw(params, logits), Renormalized(p, {1, 3}));
  params.top_p = 0.85f;  // 0.8 < 0.85 <= 0.95: adds id 2
  ExpectFrequencies(Draw(params, logits), Renormalized(p, {1, 3, 2}));
  params.top_p = 0.5f;  // the best token alone reaches 0.5
  ExpectFrequencies(Draw(params, logits, 1000), {0, 1, 0, 0}, 1000);
}

TEST(SamplerDistributionTest, TopPIsMeasuredOnTheTopKSet) {
  const std::vector<double> p = {0.4, 0.3, 0.2, 0.1};
  const auto logits = LogitsFor(p);
  SamplingParams params;
  params.seed = 6;
  params.top_p = 0.75f;
  // Without top-k: 0.4 + 0.3 < 0.75, so three tokens stay.
  ExpectFrequencies(Draw(params, logits), Renormalized(p, {0, 1, 2}));
  // With top-k 3 the mass is 0.9 and 0.7 >= 0.75 * 0.9: two tokens stay.
  params.top_k = 3;
  ExpectFrequencies(Draw(params, logits), Renormalized(p, {0, 1}));
}

TEST(SamplerDistributionTest, TopPOverALargeVocabularyCutsWhereTheMassIsReached) {
  // 3000 tokens with slowly falling logits: the kept prefix is longer than the first sorting
  // window, so the window has to grow.
  constexpr int kVocab = 3000;
  std::vector<float> logits(kVocab);
  for (int i = 0; i < kVocab; ++i)
    logits[(i * 7919) % kVocab] = -0.002f * i;  // rank i at a scattered id
  const auto p = Softmax(logits, 1.0);
  std::vector<int> by_rank(kVocab);
  for (int i = 0; i < kVocab; ++i) by_rank[i] = (i * 7919) % kVocab;
  double cumulative = 0.0;
  int n = 0;
  while (cumulative < 0.9) cumulative += p[by_rank[n++]];
  ASSERT_GT(n, 600);
  std::vector<bool> kept(kVocab, false);
  for (int i = 0; i < n; ++i) kept[by_rank[i]] = true;

  SamplingParams params;
  params.seed = 7;
  params.top_p = 0.9f;
  const auto counts = Draw(params, logits, 2000);
  int deepest_rank = 0;
  for (int r = 0; r < kVocab; ++r) {
    const int id = by_rank[r];
    if (!kept[id]) {
      EXPECT_EQ(counts[id], 0) << "rank " << r << " is past the top-p cut at " << n;
    } else if (counts[id] > 0) {
      deepest_rank = r;
    }
  }
  EXPECT_GT(deepest_rank, n - 50) << "draws should reach close to the cut";
}

TEST(SamplerDistributionTest, MinPDropsTokensBelowAFractionOfTheBest) {
  const std::vector<double> p = {0.1, 0.5, 0.05, 0.2, 0.15};
  const auto logits = LogitsFor(p);
  SamplingParams params;
  params.seed = 8;
  params.min_p = 0.25f;  // keeps p >= 0.125: ids 1, 3, 4
  ExpectFrequencies(Draw(params, logits), Renormalized(p, {1, 3, 4}));
  params.min_p = 1.0f;  // only the best
  ExpectFrequencies(Draw(params, logits, 1000), {0, 1, 0, 0, 0}, 1000);
}

TEST(SamplerDistributionTest, MinPAppliesAfterTemperature) {
  const std::vector<double> p = {0.5, 0.2, 0.15, 0.1, 0.05};
  const auto logits = LogitsFor(p);
  SamplingParams params;
  params.seed = 9;
  params.temperature = 2.0f;  // ratios to the best become sqrt(0.4), sqrt(0.3), ...
  params.min_p = 0.5f;        // keeps sqrt(ratio) >= 0.5, i.e. ratio >= 0.25: ids 0, 1, 2
  const auto q = Softmax(logits, 2.0);
  ExpectFrequencies(Draw(params, logits), Renormalized(q, {0, 1, 2}));
}

TEST(SamplerDistributionTest, MaskedTokensAreNeverDrawn) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {kNegInf, 0.0f, kNegInf, 0.0f};
  SamplingParams params;
  params.seed = 10;
  ExpectFrequencies(Draw(params, logits, 4000), {0, 0.5, 0, 0.5}, 4000);
}

}  // namespace
}  // namespace pier::sampling
