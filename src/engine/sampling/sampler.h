// Sampler: turns one request's logits into its next token, step after step.
//
// One Sampler per request. It owns the request's random generator (xoshiro256** seeded from
// SamplingParams::seed, see random.h) and the token history the penalties read: the prompt tokens
// (repetition penalty only) and the counts of the tokens it has sampled (all three penalties).
// The same logits and the same seed give the same tokens on any machine and whatever else runs:
// every sum runs sequentially in double in an order fixed by token ids, and probabilities come
// from DeterministicExp, not libm.
//
// Order of operations in Sample() (as vLLM and llama.cpp do it):
//   1. penalties, in place on the logits: repetition (prompt and output tokens), then
//      logit -= frequency_penalty * count + presence_penalty * (count > 0) (output tokens),
//      then logit += logit_bias[token];
//   2. temperature 0: argmax, ties to the lowest id; nothing else applies;
//   3. otherwise p ~ exp(logit / temperature); tokens are ranked by logit (ties to the lower id);
//      top-k keeps the k best; top-p keeps the shortest rank prefix of those whose mass reaches
//      top_p of their total; min-p drops tokens with p < min_p * p_max; one token is drawn from
//      what remains in proportion to p (one uniform draw, kept tokens walked in id order).
//
// Logprob convention: logprobs are the log-softmax of the logits after penalties (and logit
// bias) and before
// temperature and truncation, i.e. the model's own distribution with the request's penalties.
// They do not depend on temperature, top-k, top-p or min-p (vLLM's default "raw" mode with
// penalties; OpenAI does not define it more precisely).
//
// Thread-safety: a Sampler is used by one thread at a time. Its scratch buffers are per thread
// (thread_local in sampler.cpp), so many Samplers on one engine thread share one set.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/sampling/random.h"
#include "engine/sampling/sampling_params.h"

namespace pier::sampling {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  // Set when SamplingParams::logprobs is set: the sampled token's logprob (convention above).
  std::optional<float> logprob;
  // The SamplingParams::logprobs most likely tokens with their logprobs, most likely first,
  // ties to the lower id. Empty when logprobs is unset or 0.
  std::vector<TokenLogprob> top_logprobs;
};

// The log-softmax of `logits` (as they are: any penalties already applied) at `token`, and
// the `top_n` most likely tokens with theirs (most likely first, ties to the lower id): the
// logprob convention above, with the sampler's deterministic exp, so that every logprob Pier
// reports (sampled and prompt tokens alike) is the same on any machine.
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t top_n);

class Sampler {
 public:
  // INVALID_ARGUMENT when params do not validate or vocab_size < 1.
  static Result<Sampler> Create(const SamplingParams& params, int32_t vocab_size);

  // Records prompt tokens for the repetition penalty (not for presence/frequency penalties).
  // INVALID_ARGUMENT for a token id outside [0, vocab_size).
  Status AddPromptTokens(std::span<const int32_t> tokens);

  // Samples the next token from logits [vocab_size] and records it in the history.
  // On return the logits hold the penalized values (temperature is not applied in place).
  // INTERNAL when a logit is NaN or +inf, or every logit is -inf (a broken model or kernel).
  Result<SampleResult> Sample(std::span<float> logits);
  // Whether Sample changes the logits (repetition, presence or frequency penalties, logit
  // bias). When it
  // does not, SampleReadOnly samples the same token from a row the caller may not write (the
  // runner's, shared by a request's n choices), sparing a copy of the row; greedy then checks
  // and takes the maximum in one pass. PIER_CHECK: !ModifiesLogits().
  bool ModifiesLogits() const;
  Result<SampleResult> SampleReadOnly(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }
  // How many times the sampler has seen `token` among its own samples.
  int32_t OutputCount(int32_t token) const;

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size);

  void ApplyPenalties(std::span<float> logits) const;
  // The token (greedy_token when >= 0, else drawn at the temperature), recorded, with its
  // logprobs when asked for.
  SampleResult Pick(std::span<const float> logits, int32_t greedy_token);
  int32_t SampleWithTemperature(std::span<const float> logits);

  SamplingParams params_;
  int32_t vocab_size_;
  Xoshiro256StarStar rng_;
  std::vector<int32_t> prompt_tokens_;                  // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times sampled
};

}  // namespace pier::sampling
