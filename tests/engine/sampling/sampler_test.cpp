#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace pier::sampling {
namespace {

Sampler MakeSampler(const SamplingParams& params, int32_t vocab) {
  auto sampler = Sampler::Create(params, vocab);
  EXPECT_TRUE(sampler.ok()) << sampler.status().ToString();
  return std::move(sampler).value();
}

SampleResult SampleOk(Sampler& sampler, std::vector<float> logits) {
  auto r = sampler.Sample(logits);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<float> RandomLogits(uint64_t seed, int vocab) {
  Xoshiro256StarStar rng(seed);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = static_cast<float>(rng.NextDouble() * 8.0 - 4.0);
  return logits;
}

TEST(SamplerTest, GreedyPicksTheArgmaxAndBreaksTiesTowardTheLowestId) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler = MakeSampler(params, 6);
  EXPECT_EQ(SampleOk(sampler, {0.0f, 1.0f, 3.0f, -1.0f, 2.0f, 0.5f}).token, 2);
  EXPECT_EQ(SampleOk(sampler, {0.0f, 4.0f, 1.0f, 4.0f, 4.0f, 0.5f}).token, 1);
}

// Large vocabularies (the argmax runs in 8 interleaved lanes): ties placed in several lanes,
// before and after each other, in the tail past the last whole group of 8, and -inf rows.
TEST(SamplerTest, GreedyOverLargeVocabulariesIsTheLowestIdOfTheMaximum) {
  for (int vocab : {16, 17, 1000, 262147}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      std::vector<float> logits = RandomLogits(seed, vocab);
      Xoshiro256StarStar rng(seed * 31);
      const float top = 4.5f;
      const int ties = static_cast<int>(seed % 4);
      for (int t = 0; t <= ties; ++t) logits[rng.Next() % vocab] = top;
      if (seed == 5) logits[vocab - 1] = top;  // in the tail
      if (seed == 6) std::fill(logits.begin(), logits.end() - 3, -INFINITY);
      const int32_t want = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                logits.begin());  // the first maximum
      SamplingParams params;
      params.temperature = 0.0f;
      Sampler sampler = MakeSampler(params, vocab);
      EXPECT_EQ(SampleOk(sampler, logits).token, want) << "vocab " << vocab << " seed " << seed;
    }
  }
}

TEST(SamplerTest, GreedyIgnoresSeedAndTruncation) {
  const auto logits = RandomLogits(1, 500);
  int32_t expected = -1;
  for (uint64_t seed : {0ULL, 1ULL, 99ULL}) {
    SamplingParams params;
    params.temperature = 0.0f;
    params.seed = seed;
    params.top_p = 0.3f;
    params.top_k = 3;
    params.min_p = 0.9f;
    Sampler sampler = MakeSampler(params, 500);
    const int32_t token = SampleOk(sampler, logits).token;
    if (expected < 0) expected = token;
    EXPECT_EQ(token, expected);
  }
  EXPECT_EQ(logits[expected], *std::max_element(logits.begin(), logits.end()));
}

TEST(SamplerTest, SameSeedGivesTheSameTokensAndOtherSeedsDiffer) {
  auto run = [](uint64_t seed) {
    SamplingParams params;
    params.seed = seed;
    params.temperature = 1.3f;
    params.top_p = 0.95f;
    params.top_k = 40;
    params.min_p = 0.01f;
    params.frequency_penalty = 0.3f;
    Sampler sampler = MakeSampler(params, 2000);
    std::vector<int32_t> tokens;
    for (int step = 0; step < 200; ++step)
      tokens.push_back(SampleOk(sampler, RandomLogits(step, 2000)).token);
    return tokens;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, OtherSamplersOnTheSameThreadDoNotChangeARequestsTokens) {
  SamplingParams params;
  params.seed = 11;
  Sampler alone = MakeSampler(params, 300);
  std::vector<int32_t> expected;
  for (int step = 0; step < 50; ++step)
    expected.push_back(SampleOk(alone, RandomLogits(step, 300)).token);

  Sampler a = MakeSampler(params, 300);
  SamplingParams other;
  other.seed = 12;
  other.top_k = 5;
  Sampler b = MakeSampler(other, 1000);  // a larger vocabulary resizes the shared scratch
  for (int step = 0; step < 50; ++step) {
    SampleOk(b, RandomLogits(1000 + step, 1000));
    EXPECT_EQ(SampleOk(a, RandomLogits(step, 300)).token, expected[step]) << "step " << step;
  }
}

TEST(SamplerTest, PenaltiesChangeLogitsExactlyAsDefined) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 0.25f;
  params.frequency_penalty = 0.5f;
  Sampler sampler = MakeSampler(params, 6);
  const std::vector<int32_t> prompt = {0, 1, 1};
  ASSERT_TRUE(sampler.AddPromptTokens(prompt).ok());

  // Two greedy samples of token 4, then look at the penalized logits of a third step.
  EXPECT_EQ(SampleOk(sampler, {0, 0, 0, 0, 9, 0}).token, 4);
  EXPECT_EQ(SampleOk(sampler, {0, 0, 0, 0, 9, 0}).token, 4);
  EXPECT_EQ(sampler.OutputCount(4), 2);

  std::vector<float> logits = {3.0f, -2.0f, 1.0f, 5.0f, 4.0f, -1.0f};
  auto r = sampler.Sample(logits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(logits[0], 1.5f);   // prompt token, positive: divided by 2
  EXPECT_EQ(logits[1], -4.0f);  // prompt token, negative: multiplied by 2
  EXPECT_EQ(logits[2], 1.0f);   // unseen
  EXPECT_EQ(logits[3], 5.0f);   // unseen
  EXPECT_EQ(logits[4], 0.75f);  // output twice: 4 / 2 - (0.5 * 2 + 0.25)
  EXPECT_EQ(logits[5], -1.0f);  // unseen
  EXPECT_EQ(r->token, 3);
}

TEST(SamplerTest, ExtremeRepetitionPenaltyKeepsLogitsFinite) {
  SamplingParams params;
  params.repetition_penalty = 1e-38f;
  params.logprobs = 2;
  Sampler sampler = MakeSampler(params, 3);
  const std::vector<int32_t> prompt = {0, 1};
  ASSERT_TRUE(sampler.AddPromptTokens(prompt).ok());
  std::vector<float> logits = {5.0f, -5.0f, 1.0f};
  auto r = sampler.Sample(logits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(logits[0], std::numeric_limits<float>::max());
  EXPECT_EQ(logits[1], static_cast<float>(-5.0 * static_cast<double>(1e-38f)));
  EXPECT_EQ(r->token, 0);
  EXPECT_EQ(*r->logprob, 0.0f);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesIgnorePromptTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 1.0f;
  params.frequency_penalty = 1.0f;
  Sampler sampler = MakeSampler(params, 3);
  const std::vector<int32_t> prompt = {0, 1, 2};
  ASSERT_TRUE(sampler.AddPromptTokens(prompt).ok());
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(sampler.Sample(logits).ok());
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  // Now token 2 is in the output once: 3 - (1 + 1).
  logits = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(sampler.Sample(logits)->token, 1);
  EXPECT_EQ(logits[2], 1.0f);
}

TEST(SamplerTest, NegativePenaltiesEncourageRepeats) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = -1.0f;
  Sampler sampler = MakeSampler(params, 2);
  EXPECT_EQ(SampleOk(sampler, {1.0f, 1.5f}).token, 1);
  std::vector<float> logits = {2.0f, 1.5f};
  EXPECT_EQ(sampler.Sample(logits)->token, 1);  // 1.5 + 1 = 2.5 beats 2
  EXPECT_EQ(logits[1], 2.5f);
}

TEST(SamplerTest, LogprobsAreTheLogSoftmaxOfThePenalizedLogits) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, -3.0f, 1.5f, 0.25f, 3.0f};
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  for (float temperature : {0.0f, 0.5f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 3;
    params.logprobs = 10;
    params.seed = 5;
    Sampler sampler = MakeSampler(params, 10);
    const SampleResult r = SampleOk(sampler, logits);
    ASSERT_TRUE(r.logprob.has_value());
    EXPECT_NEAR(*r.logprob, std::log(std::exp(static_cast<double>(logits[r.token])) / sum), 1e-6)
        << "temperature and truncation do not change reported logprobs";
    ASSERT_EQ(r.top_logprobs.size(), 10u);
    double total = 0.0;
    for (size_t j = 0; j < r.top_logprobs.size(); ++j) {
      const TokenLogprob& t = r.top_logprobs[j];
      EXPECT_NEAR(t.logprob, logits[t.token] - std::log(sum), 1e-6);
      total += std::exp(static_cast<double>(t.logprob));
      if (t.token == r.token) {
        EXPECT_EQ(t.logprob, *r.logprob);
      }
      if (j > 0) {
        const TokenLogprob& prev = r.top_logprobs[j - 1];
        EXPECT_TRUE(prev.logprob > t.logprob ||
                    (prev.logprob == t.logprob && prev.token < t.token));
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-6);
    EXPECT_EQ(r.top_logprobs[0].token, 9);
    EXPECT_EQ(r.top_logprobs[1].token, 1);  // ties with 3: lower id first
    EXPECT_EQ(r.top_logprobs[2].token, 3);
  }
}

TEST(SamplerTest, LogitBiasIsAddedAfterThePenaltiesAndShowsInTheLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f,
                                     -std::numeric_limits<float>::infinity()};
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = 0;
  params.logit_bias = {{1, -100.0f}, {3, 2.5f}, {3, 0.25f}, {4, 100.0f}};
  Sampler sampler = MakeSampler(params, 5);
  const SampleResult r = SampleOk(sampler, logits);
  // 1 is all but banned (3 - 100); 3 gets 2.75 (repeats add up); the masked 4 stays masked.
  EXPECT_EQ(r.token, 3);
  const std::vector<double> biased = {1.0, 3.0 - 100.0, 2.0, 2.75};
  double sum = 0.0;
  for (double l : biased) sum += std::exp(l);
  ASSERT_TRUE(r.logprob.has_value());
  EXPECT_NEAR(*r.logprob, 2.75 - std::log(sum), 1e-6);

  // The penalty applies first, then the bias: with repetition penalty 2 and bias +3 on token
  // 2 (logit 2), its second turn is 2 / 2 + 3 = 4 > 3 (bias first would give 5 / 2 = 2.5).
  params.logit_bias = {{2, 3.0f}};
  params.repetition_penalty = 2.0f;
  Sampler penalized = MakeSampler(params, 5);
  EXPECT_EQ(SampleOk(penalized, logits).token, 2);
  EXPECT_EQ(SampleOk(penalized, logits).token, 2);
}

TEST(SamplerTest, LogitBiasOutsideTheVocabularyOrRangeIsRefused) {
  SamplingParams params;
  params.logit_bias = {{5, 1.0f}};
  auto outside = Sampler::Create(params, 5);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside the vocabulary"), std::string::npos);
  params.logit_bias = {{1, 100.5f}};
  EXPECT_FALSE(Sampler::Create(params, 5).ok());
  params.logit_bias = {{1, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_FALSE(Sampler::Create(params, 5).ok());
  params.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(Sampler::Create(params, 5).ok());
  params.logit_bias = {{4, -100.0f}, {0, 100.0f}};
  EXPECT_TRUE(Sampler::Create(params, 5).ok());
}

TEST(SamplerTest, LogprobsIncludeThePenalties) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 2.0f;
  params.logprobs = 2;
  Sampler sampler = MakeSampler(params, 2);
  SampleOk(sampler, {1.0f, 0.0f});  // token 0 now penalized by 2
  const SampleResult r = SampleOk(sampler, {1.0f, 0.0f});
  EXPECT_EQ(r.token, 1);
  const double lse = std::log(std::exp(-1.0) + std::exp(0.0));
  EXPECT_NEAR(*r.logprob, 0.0 - lse, 1e-6);
  EXPECT_EQ(r.top_logprobs[1].token, 0);
  EXPECT_NEAR(r.top_logprobs[1].logprob, -1.0 - lse, 1e-6);
}

TEST(SamplerTest, LogprobsAreOnlyComputedWhenAsked) {
  SamplingParams params;
  Sampler none = MakeSampler(params, 4);
  SampleResult r = SampleOk(none, {0, 1, 2, 3});
  EXPECT_FALSE(r.logprob.has_value());
  EXPECT_TRUE(r.top_logprobs.empty());

  params.logprobs = 0;
  Sampler chosen_only = MakeSampler(params, 4);
  r = SampleOk(chosen_only, {0, 1, 2, 3});
  EXPECT_TRUE(r.logprob.has_value());
  EXPECT_TRUE(r.top_logprobs.empty());
}

TEST(SamplerTest, RejectsInvalidParamsVocabularyAndPromptTokens) {
  SamplingParams params;
  params.top_p = 1.5f;
  auto bad = Sampler::Create(params, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "top_p must be in (0, 1], got 1.5");

  EXPECT_FALSE(Sampler::Create(SamplingParams(), 0).ok());

  Sampler sampler = MakeSampler(SamplingParams(), 10);
  const std::vector<int32_t> prompt = {3, 10};
  const Status s = sampler.AddPromptTokens(prompt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prompt token id 10 is outside [0, 10)");
}

TEST(SamplerTest, ReportsBrokenLogitsInsteadOfSampling) {
  Sampler sampler = MakeSampler(SamplingParams(), 3);
  std::vector<float> nan_row = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  auto r = sampler.Sample(nan_row);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("token 1 is NaN"), std::string::npos);

  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> inf_row = {0.0f, 0.0f, kInf};
  EXPECT_FALSE(sampler.Sample(inf_row).ok());
  std::vector<float> masked_row = {-kInf, -kInf, -kInf};
  EXPECT_FALSE(sampler.Sample(masked_row).ok());
}

// SampleReadOnly (the engine's path when nothing modifies the row): the same tokens, logprobs
// and errors as Sample, greedy (one fused check-and-maximum pass) or drawn, on rows with ties,
// -0 and +0, masked tokens and a tail past the vector width; a row with penalties or a bias
// goes through Sample.
TEST(SamplerTest, ReadOnlySamplingMatchesSample) {
  for (int vocab : {3, 17, 1000, 262147}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      std::vector<float> logits = RandomLogits(seed, vocab);
      Xoshiro256StarStar rng(seed * 7);
      for (int t = 0; t < static_cast<int>(seed % 3) + 1; ++t) logits[rng.Next() % vocab] = 6.0f;
      if (seed == 2) logits[vocab - 1] = 9.0f;  // in the tail
      if (seed == 3) {
        std::fill(logits.begin(), logits.end(), -0.0f);
        logits[vocab / 2] = 0.0f;  // +0 == -0: the lowest id wins
      }
      if (seed == 4) std::fill(logits.begin(), logits.end() - 1, -INFINITY);
      for (float temperature : {0.0f, 0.7f}) {
        SamplingParams params;
        params.temperature = temperature;
        params.seed = seed;
        params.logprobs = 2;
        Sampler a = MakeSampler(params, vocab), b = MakeSampler(params, vocab);
        ASSERT_FALSE(a.ModifiesLogits());
        for (int step = 0; step < 3; ++step) {
          std::vector<float> copy = logits;
          const SampleResult want = SampleOk(a, copy);
          auto got = b.SampleReadOnly(logits);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_EQ(got->token, want.token) << vocab << " " << seed << " " << temperature;
          EXPECT_EQ(got->logprob, want.logprob);
          EXPECT_EQ(got->top_logprobs.size(), want.top_logprobs.size());
        }
      }
    }
  }
  SamplingParams penalized;
  penalized.repetition_penalty = 1.1;
  EXPECT_TRUE(MakeSampler(penalized, 4).ModifiesLogits());
  SamplingParams biased;
  biased.logit_bias = {{1, 2.0f}};
  EXPECT_TRUE(MakeSampler(biased, 4).ModifiesLogits());
}

TEST(SamplerTest, ReadOnlySamplingReportsBrokenLogits) {
  const float kInf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    Sampler sampler = MakeSampler(params, 20);
    std::vector<float> row(20, 0.5f);
    row[13] = std::numeric_limits<float>::quiet_NaN();
    auto r = sampler.SampleReadOnly(row);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("token 13 is NaN"), std::string::npos);
    row[13] = 0.5f;
    row[18] = kInf;  // in the tail of the vector loop
    r = sampler.SampleReadOnly(row);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("token 18 is +inf"), std::string::npos);
    std::fill(row.begin(), row.end(), -kInf);
    r = sampler.SampleReadOnly(row);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("every logit is -inf"), std::string::npos);
  }
}

}  // namespace
}  // namespace pier::sampling
