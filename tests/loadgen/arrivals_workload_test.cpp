// Arrival times (Poisson and gamma processes) and the random workload's lengths and prompts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "loadgen/arrivals.h"
#include "loadgen/workload.h"

namespace pier::loadgen {
namespace {

struct GapMoments {
  double mean = 0;
  double variance = 0;
};

GapMoments Moments(const std::vector<double>& offsets) {
  std::vector<double> gaps;
  for (size_t i = 1; i < offsets.size(); ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
  GapMoments m;
  for (double g : gaps) m.mean += g;
  m.mean /= static_cast<double>(gaps.size());
  for (double g : gaps) m.variance += (g - m.mean) * (g - m.mean);
  m.variance /= static_cast<double>(gaps.size());
  return m;
}

TEST(ArrivalsTest, PoissonGapsHaveMeanAndVarianceOfTheRate) {
  constexpr double kRate = 8.0;
  auto offsets = ArrivalOffsets(200001, kRate, 1.0, 42);
  ASSERT_TRUE(offsets.ok());
  EXPECT_EQ((*offsets)[0], 0);
  EXPECT_TRUE(std::is_sorted(offsets->begin(), offsets->end()));
  const GapMoments m = Moments(*offsets);
  // Exponential gaps: mean 1/rate, variance 1/rate^2. 200k samples: ~0.2% standard error.
  EXPECT_NEAR(m.mean, 1 / kRate, 0.01 / kRate);
  EXPECT_NEAR(m.variance, 1 / (kRate * kRate), 0.03 / (kRate * kRate));
  // Whole-run rate: requests over the time they span.
  EXPECT_NEAR(200000 / offsets->back(), kRate, 0.01 * kRate);
}

TEST(ArrivalsTest, PoissonCountsPerSecondHaveEqualMeanAndVariance) {
  constexpr double kRate = 5.0;
  auto offsets = ArrivalOffsets(100000, kRate, 1.0, 7);
  ASSERT_TRUE(offsets.ok());
  const auto seconds = static_cast<size_t>(offsets->back());
  std::vector<double> counts(seconds, 0);
  for (double t : *offsets) {
    if (static_cast<size_t>(t) < seconds) counts[static_cast<size_t>(t)] += 1;
  }
  double mean = 0, variance = 0;
  for (double c : counts) mean += c;
  mean /= static_cast<double>(counts.size());
  for (double c : counts) variance += (c - mean) * (c - mean);
  variance /= static_cast<double>(counts.size());
  EXPECT_NEAR(mean, kRate, 0.05 * kRate);
  EXPECT_NEAR(variance, kRate, 0.1 * kRate);  // Poisson counts: variance = mean
}

TEST(ArrivalsTest, BurstinessKeepsTheRateAndScalesTheVariance) {
  constexpr double kRate = 10.0;
  for (double burstiness : {0.25, 4.0}) {
    auto offsets = ArrivalOffsets(200001, kRate, burstiness, 3);
    ASSERT_TRUE(offsets.ok());
    const GapMoments m = Moments(*offsets);
    // Gamma(k, 1/(rate k)): mean 1/rate, variance 1/(k rate^2).
    const double variance = 1 / (burstiness * kRate * kRate);
    EXPECT_NEAR(m.mean, 1 / kRate, 0.01 / kRate) << burstiness;
    EXPECT_NEAR(m.variance, variance, 0.05 * variance) << burstiness;
  }
}

TEST(ArrivalsTest, SameSeedSameTimesOtherSeedOtherTimes) {
  EXPECT_EQ(*ArrivalOffsets(100, 3.0, 1.0, 5), *ArrivalOffsets(100, 3.0, 1.0, 5));
  EXPECT_NE(*ArrivalOffsets(100, 3.0, 1.0, 5), *ArrivalOffsets(100, 3.0, 1.0, 6));
}

TEST(ArrivalsTest, InfiniteRateSendsEverythingAtOnce) {
  auto offsets = ArrivalOffsets(50, std::numeric_limits<double>::infinity(), 1.0, 1);
  ASSERT_TRUE(offsets.ok());
  EXPECT_EQ(*offsets, std::vector<double>(50, 0.0));
}

TEST(ArrivalsTest, RejectsNonPositiveRateAndBurstiness) {
  EXPECT_FALSE(ArrivalOffsets(10, 0, 1, 1).ok());
  EXPECT_FALSE(ArrivalOffsets(10, -2, 1, 1).ok());
  EXPECT_FALSE(ArrivalOffsets(10, std::nan(""), 1, 1).ok());
  EXPECT_FALSE(ArrivalOffsets(10, 1, 0, 1).ok());
}

TEST(WorkloadTest, LengthsAreUniformOverVllmsRange) {
  WorkloadOptions options;
  options.num_prompts = 4000;
  options.input_len = 100;
  options.output_len = 10;
  options.range_ratio = 0.25;
  auto workload = MakeRandomWorkload(options);
  ASSERT_TRUE(workload.ok());
  std::set<int> inputs, outputs;
  for (const WorkloadRequest& r : *workload) {
    inputs.insert(r.input_len);
    outputs.insert(r.output_len);
    // Text prompts: one word per token asked.
    EXPECT_EQ(std::count(r.prompt_text.begin(), r.prompt_text.end(), ' ') + 1, r.input_len);
  }
  // [floor(75), ceil(125)] and [floor(7.5), ceil(12.5)], every value drawn.
  EXPECT_EQ(*inputs.begin(), 75);
  EXPECT_EQ(*inputs.rbegin(), 125);
  EXPECT_EQ(inputs.size(), 51u);
  EXPECT_EQ(*outputs.begin(), 7);
  EXPECT_EQ(*outputs.rbegin(), 13);
}

TEST(WorkloadTest, ZeroRangeGivesExactLengthsAndDistinctPrompts) {
  WorkloadOptions options;
  options.num_prompts = 20;
  options.input_len = 32;
  options.output_len = 8;
  auto workload = MakeRandomWorkload(options);
  ASSERT_TRUE(workload.ok());
  std::set<std::string> prompts;
  for (const WorkloadRequest& r : *workload) {
    EXPECT_EQ(r.input_len, 32);
    EXPECT_EQ(r.output_len, 8);
    prompts.insert(r.prompt_text);
    std::istringstream words(r.prompt_text);
    std::string word;
    const auto& vocabulary = PromptWords();
    while (words >> word) {
      EXPECT_NE(std::find(vocabulary.begin(), vocabulary.end(), word), vocabulary.end()) << word;
    }
  }
  EXPECT_EQ(prompts.size(), 20u);
}

TEST(WorkloadTest, TokenIdPromptsStayInTheirRange) {
  WorkloadOptions options;
  options.num_prompts = 50;
  options.input_len = 64;
  options.format = PromptFormat::kTokenIds;
  options.token_id_min = 500;
  options.token_id_max = 510;
  auto workload = MakeRandomWorkload(options);
  ASSERT_TRUE(workload.ok());
  std::set<int32_t> seen;
  for (const WorkloadRequest& r : *workload) {
    EXPECT_TRUE(r.prompt_text.empty());
    ASSERT_EQ(r.prompt_ids.size(), 64u);
    seen.insert(r.prompt_ids.begin(), r.prompt_ids.end());
  }
  EXPECT_EQ(*seen.begin(), 500);
  EXPECT_EQ(*seen.rbegin(), 509);
}

TEST(WorkloadTest, RejectsBadOptions) {
  WorkloadOptions options;
  options.range_ratio = 1.0;
  EXPECT_FALSE(MakeRandomWorkload(options).ok());
  options.range_ratio = 0;
  options.input_len = 0;
  EXPECT_FALSE(MakeRandomWorkload(options).ok());
  options.input_len = 10;
  options.format = PromptFormat::kTokenIds;
  options.token_id_min = 5;
  options.token_id_max = 5;
  EXPECT_FALSE(MakeRandomWorkload(options).ok());
}

}  // namespace
}  // namespace pier::loadgen
