#include "engine/sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <limits>

namespace pier::sampling {
namespace {

Status ValidateWith(void (*change)(SamplingParams&)) {
  SamplingParams p;
  change(p);
  return p.Validate();
}

void ExpectInvalid(const Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), message);
}

TEST(SamplingParamsTest, DefaultsAndBoundaryValuesAreValid) {
  EXPECT_TRUE(SamplingParams().Validate().ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logprobs = 20;
  EXPECT_TRUE(p.Validate().ok());
  p.logprobs = 0;
  p.min_p = 0.0f;
  EXPECT_TRUE(p.Validate().ok());
}

TEST(SamplingParamsTest, RejectsEachOutOfRangeFieldWithItsValue) {
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.temperature = -0.5f; }),
                "temperature must be a finite number >= 0 (0 = greedy), got -0.5");
  ExpectInvalid(ValidateWith([](SamplingParams& p) {
                  p.temperature = std::numeric_limits<float>::quiet_NaN();
                }),
                "temperature must be a finite number >= 0 (0 = greedy), got nan");
  ExpectInvalid(ValidateWith([](SamplingParams& p) {
                  p.temperature = std::numeric_limits<float>::infinity();
                }),
                "temperature must be a finite number >= 0 (0 = greedy), got inf");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.top_k = -1; }),
                "top_k must be >= 0 (0 = off), got -1");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.top_p = 1.5f; }),
                "top_p must be in (0, 1], got 1.5");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.top_p = 0.0f; }),
                "top_p must be in (0, 1], got 0");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.min_p = -0.1f; }),
                "min_p must be in [0, 1], got -0.1");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
                "repetition_penalty must be a finite number > 0 (1 = off), got 0");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
                "presence_penalty must be in [-2, 2], got 2.5");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.frequency_penalty = -3.0f; }),
                "frequency_penalty must be in [-2, 2], got -3");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.logprobs = 21; }),
                "logprobs must be in [0, 20], got 21");
  ExpectInvalid(ValidateWith([](SamplingParams& p) { p.logprobs = -1; }),
                "logprobs must be in [0, 20], got -1");
}

}  // namespace
}  // namespace pier::sampling
