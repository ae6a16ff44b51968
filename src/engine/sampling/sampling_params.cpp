#include "engine/sampling/sampling_params.h"

#include <charconv>
#include <cmath>
#include <string>

namespace pier::sampling {
namespace {

// Shortest decimal text that reads back as the same float ("1.5", "-0.1", "nan", "inf").
std::string FloatText(float value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return "?";
  return std::string(buf, end);
}

Status OutOfRange(const char* name, const char* range, const std::string& value) {
  return InvalidArgumentError(std::string(name) + " must be " + range + ", got " + value);
}

}  // namespace

Status SamplingParams::Validate() const {
  // Comparisons are written so that NaN fails them.
  if (!(temperature >= 0.0f) || std::isinf(temperature)) {
    return OutOfRange("temperature", "a finite number >= 0 (0 = greedy)", FloatText(temperature));
  }
  if (top_k < 0) {
    return OutOfRange("top_k", ">= 0 (0 = off)", std::to_string(top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return OutOfRange("top_p", "in (0, 1]", FloatText(top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return OutOfRange("min_p", "in [0, 1]", FloatText(min_p));
  }
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty)) {
    return OutOfRange("repetition_penalty", "a finite number > 0 (1 = off)",
                      FloatText(repetition_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", "in [-2, 2]", FloatText(presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]", FloatText(frequency_penalty));
  }
  if (logprobs.has_value() && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return OutOfRange("logprobs", "in [0, 20]", std::to_string(*logprobs));
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) return OutOfRange("logit_bias token id", ">= 0", std::to_string(token));
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return OutOfRange("logit_bias", "in [-100, 100]", FloatText(bias));
    }
  }
  return Status::Ok();
}

}  // namespace pier::sampling
