// SamplingParams: how one request turns logits into tokens (plain data, copied freely).
//
// Defaults sample from the model's distribution unchanged (temperature 1, no truncation, no
// penalties). Validate() says precisely which field is out of range; the HTTP and CLI layers call
// it before a request reaches the engine, and Sampler::Create() calls it again.
// Thread-safety: a plain value; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pier::sampling {

inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr float kMaxLogitBias = 100.0f;  // OpenAI's bound, either sign

struct SamplingParams {
  // Divides the logits before truncation and sampling. 0 selects greedy decoding (argmax, ties to
  // the lowest token id), which ignores top_k, top_p, min_p and seed.
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 keeps all.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability reaches top_p; 1 keeps all.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the most likely token's; 0 keeps all.
  float min_p = 0.0f;
  // CTRL-style: a token already in the prompt or the output has its logit divided by this when
  // positive and multiplied by it when negative. 1 is off; > 1 discourages repeats.
  float repetition_penalty = 1.0f;
  // OpenAI-style, over output tokens only: logit -= presence_penalty * (count > 0)
  //                                               + frequency_penalty * count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Seeds the request's own random generator: the same seed and logits give the same tokens.
  uint64_t seed = 0;
  // Logprobs to return: unset returns none; 0 returns the sampled token's logprob; n in 1..20 adds
  // the n most likely tokens with theirs.
  std::optional<int32_t> logprobs;
  // OpenAI's logit_bias: (token id, bias) pairs, each bias in [-100, 100] added to that token's
  // logit after the penalties (-100 all but bans a token, 100 all but forces it). Ids must be
  // inside the vocabulary (Sampler::Create checks them); a repeated id adds up.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // OK, or INVALID_ARGUMENT naming the first field out of range and the value it had, e.g.
  // "top_p must be in (0, 1], got 1.5".
  Status Validate() const;
};

}  // namespace pier::sampling
