#include "engine/sampling/sampler.h"

#include <algorithm>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <cmath>
#include <limits>
#include <numeric>
#include <ranges>
#include <string>

#include "engine/sampling/deterministic_exp.h"

namespace pier::sampling {
namespace {

constexpr double kFloatMax = std::numeric_limits<float>::max();

// Per-thread scratch, sized to the largest vocabulary seen on this thread.
struct Scratch {
  std::vector<double> weight;  // [vocab] exp((logit - max) / temperature), the best has 1
  std::vector<int32_t> order;  // [vocab] token ids; a prefix is sorted by rank
  std::vector<int32_t> kept;   // [<= vocab] ids left after truncation, ascending
};

Scratch& ThreadScratch(size_t vocab) {
  thread_local Scratch scratch;
  if (scratch.weight.size() < vocab) {
    scratch.weight.resize(vocab);
    scratch.order.resize(vocab);
  }
  return scratch;
}

// Rejects NaN and +inf, and a row with no finite logit; -inf (a masked token) is allowed.
// -O2's "very cheap" vectorizer leaves these two passes over the vocabulary scalar (a 262k
// vocabulary: 4% of a 16-sequence Gemma 3 decode step); they only compare and count, so the
// ordinary cost model vectorizes them without changing any result.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("vect-cost-model=cheap")
#endif

Status CheckLogits(std::span<const float> logits) {
  // One branch-free pass (a 262k vocabulary is read for every token); the offender is looked
  // for only when there is one.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  size_t below_inf = 0, above_minus_inf = 0;  // integer sums: the loop vectorizes
  for (const float l : logits) {
    below_inf += l < kInf ? 1 : 0;  // false for NaN and +inf
    above_minus_inf += l > -kInf ? 1 : 0;
  }
  const bool any_finite = above_minus_inf > 0;
  if (below_inf != logits.size()) {
    for (size_t i = 0; i < logits.size(); ++i) {
      const float l = logits[i];
      if (std::isnan(l) || l == kInf) {
        return InternalError("logit of token " + std::to_string(i) + " is " +
                             (std::isnan(l) ? "NaN" : "+inf") +
                             "; the model produced invalid output");
      }
    }
  }
  if (!any_finite) return InternalError("every logit is -inf; there is no token to sample");
  return Status::Ok();
}

// The first i with p[i] == value (one of the n values is).
int32_t FirstIndexOf(const float* p, size_t n, float value) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(value);
  for (; i + 4 <= n; i += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + i), target));
    if (hit != 0) return static_cast<int32_t>(i + static_cast<size_t>(__builtin_ctz(hit)));
  }
#endif
  for (; i < n; ++i) {
    if (p[i] == value) return static_cast<int32_t>(i);
  }
  return 0;  // not reached: the value is one of them
}

// Lowest id among the largest logits (no NaN: CheckLogits ran): the largest value (vector
// maxima, exact), then the first id holding it. Equal values, -0 and +0 included, compare
// equal, so the lowest id among them wins, as a scan keeping the first strictly larger one.
int32_t Argmax(std::span<const float> logits) {
  const float* p = logits.data();
  const size_t n = logits.size();
  size_t i = 0;
  float max = p[0];
#if defined(__SSE2__)
  if (n >= 8) {
    __m128 m = _mm_loadu_ps(p);
    for (i = 4; i + 4 <= n; i += 4) m = _mm_max_ps(m, _mm_loadu_ps(p + i));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    max = _mm_cvtss_f32(m);
  }
#endif
  for (; i < n; ++i) max = p[i] > max ? p[i] : max;
  return FirstIndexOf(p, n, max);
}

// CheckLogits and Argmax in one pass less: the checks' counts ride along Argmax's pass for the
// maximum (a NaN makes the maximum meaningless, but then the row is refused anyway).
Result<int32_t> CheckedArgmax(std::span<const float> logits) {
  const float* p = logits.data();
  const size_t n = logits.size();
  size_t i = 0;
  float max = p[0];
  size_t below_inf = 0, above_minus_inf = 0;
#if defined(__SSE2__)
  if (n >= 8) {
    const __m128 inf = _mm_set1_ps(std::numeric_limits<float>::infinity());
    const __m128 minus_inf = _mm_set1_ps(-std::numeric_limits<float>::infinity());
    __m128 m = _mm_loadu_ps(p);
    __m128i below = _mm_setzero_si128(), above = _mm_setzero_si128();  // lane counts, negated
    for (i = 0; i + 4 <= n; i += 4) {
      const __m128 v = _mm_loadu_ps(p + i);
      m = _mm_max_ps(m, v);
      below = _mm_add_epi32(below, _mm_castps_si128(_mm_cmplt_ps(v, inf)));
      above = _mm_add_epi32(above, _mm_castps_si128(_mm_cmpgt_ps(v, minus_inf)));
    }
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    max = _mm_cvtss_f32(m);
    int32_t lanes[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), below);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes + 4), above);
    for (int l = 0; l < 4; ++l) {
      below_inf += static_cast<size_t>(-static_cast<int64_t>(lanes[l]));
      above_minus_inf += static_cast<size_t>(-static_cast<int64_t>(lanes[4 + l]));
    }
  }
#endif
  for (; i < n; ++i) {
    max = p[i] > max ? p[i] : max;
    below_inf += p[i] < std::numeric_limits<float>::infinity() ? 1 : 0;
    above_minus_inf += p[i] > -std::numeric_limits<float>::infinity() ? 1 : 0;
  }
  if (below_inf != n || above_minus_inf == 0) {
    PIER_RETURN_IF_ERROR(CheckLogits(logits));  // names the offender
  }
  return FirstIndexOf(p, n, max);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// log sum_i exp(logits[i]), summed in id order in double.
double LogSumExp(std::span<const float> logits) {
  const double max = logits[Argmax(logits)];
  double sum = 0.0;
  for (float l : logits) sum += DeterministicExp(static_cast<double>(l) - max);
  return max + std::log(sum);
}

}  // namespace

Result<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size) {
  PIER_RETURN_IF_ERROR(params.Validate());
  if (vocab_size < 1) {
    return InvalidArgumentError("vocab_size must be >= 1, got " + std::to_string(vocab_size));
  }
  for (const auto& [token, bias] : params.logit_bias) {
    if (token >= vocab_size) {
      return InvalidArgumentError("logit_bias token id " + std::to_string(token) +
                                  " is outside the vocabulary (size " + std::to_string(vocab_size) +
                                  ")");
    }
  }
  return Sampler(params, vocab_size);
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {}

Status Sampler::AddPromptTokens(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size_) {
      return InvalidArgumentError("prompt token id " + std::to_string(t) + " is outside [0, " +
                                  std::to_string(vocab_size_) + ")");
    }
  }
  prompt_tokens_.insert(prompt_tokens_.end(), tokens.begin(), tokens.end());
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()),
                       prompt_tokens_.end());
  return Status::Ok();
}

int32_t Sampler::OutputCount(int32_t token) const {
  auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

void Sampler::ApplyPenalties(std::span<float> logits) const {
  const double rep = params_.repetition_penalty;
  const double presence = params_.presence_penalty;
  const double frequency = params_.frequency_penalty;
  // Each penalized logit is computed in double and rounded to float once; a tiny penalty cannot
  // push a finite logit to infinity.
  auto repetition = [rep](float l) {
    if (std::isinf(l)) return l;
    const double penalized = l > 0.0f ? static_cast<double>(l) / rep : l * rep;
    return static_cast<float>(std::clamp(penalized, -kFloatMax, kFloatMax));
  };
  if (rep != 1.0) {
    for (int32_t t : prompt_tokens_) {
      if (!output_counts_.contains(t)) logits[t] = repetition(logits[t]);
    }
  }
  for (const auto& [t, count] : output_counts_) {
    float l = rep != 1.0 ? repetition(logits[t]) : logits[t];
    if (presence != 0.0 || frequency != 0.0) {
      l = static_cast<float>(static_cast<double>(l) - (frequency * count + presence));
    }
    logits[t] = l;
  }
  // A masked token (-inf) stays masked; the sum is done in double and rounded once.
  for (const auto& [t, bias] : params_.logit_bias) {
    if (std::isinf(logits[t])) continue;
    const double biased = static_cast<double>(logits[t]) + static_cast<double>(bias);
    logits[t] = static_cast<float>(std::clamp(biased, -kFloatMax, kFloatMax));
  }
}

int32_t Sampler::SampleWithTemperature(std::span<const float> logits) {
  const size_t vocab = logits.size();
  Scratch& s = ThreadScratch(vocab);
  std::span<double> weight(s.weight.data(), vocab);  // set for the candidates only
  std::span<int32_t> order(s.order.data(), vocab);

  // Rank: larger logit first, then lower id. A strict total order, so every selection and sort
  // below has exactly one result whatever the standard library. order[0, sorted) holds the
  // `sorted` best tokens in rank order.
  auto ranks_before = [&logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::iota(order.begin(), order.end(), 0);
  size_t sorted = 0;
  auto sort_prefix = [&](size_t n) {
    if (n <= sorted) return;
    if (n <= 1024) {  // heap selection: about one comparison per token for small n
      std::partial_sort(order.begin() + sorted, order.begin() + n, order.end(), ranks_before);
    } else {  // O(vocab + n log n)
      if (n < vocab) {
        std::nth_element(order.begin() + sorted, order.begin() + n, order.end(), ranks_before);
      }
      std::sort(order.begin() + sorted, order.begin() + n, ranks_before);
    }
    sorted = n;
  };

  // top-k: the candidates are the k best tokens (all of them when top_k is 0).
  const size_t k = params_.top_k > 0 ? std::min(vocab, static_cast<size_t>(params_.top_k)) : vocab;
  if (k < vocab) sort_prefix(k);

  // weight = exp((logit - best logit) / temperature): 1 for the best token.
  const double temperature = params_.temperature;
  const double z_best =
      static_cast<double>(logits[k < vocab ? order[0] : Argmax(logits)]) / temperature;
  auto weight_of = [&](size_t i) {
    return DeterministicExp(static_cast<double>(logits[i]) / temperature - z_best);
  };
  if (k < vocab) {
    for (size_t j = 0; j < k; ++j) weight[order[j]] = weight_of(order[j]);
  } else {
    for (size_t i = 0; i < vocab; ++i) weight[i] = weight_of(i);
  }

  // top-p: the shortest rank prefix of the candidates whose mass reaches top_p of theirs.
  size_t prefix = k;
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    if (k < vocab) {
      for (size_t j = 0; j < k; ++j) mass += weight[order[j]];
    } else {
      for (double w : weight) mass += w;
    }
    const double target = static_cast<double>(params_.top_p) * mass;
    double cumulative = 0.0;
    size_t j = 0;
    for (size_t window = std::min<size_t>(k, 64); j < k; window = std::min(k, window * 8)) {
      sort_prefix(window);
      for (; j < window; ++j) {
        cumulative += weight[order[j]];
        if (cumulative >= target) break;
      }
      if (j < window) {
        prefix = j + 1;
        break;
      }
    }
  }

  // min-p (weight >= min_p, weights being relative to the best token), then the draw: walk the
  // kept tokens in id order until the cumulative weight passes u * (their total weight).
  const double min_p = params_.min_p;
  auto draw = [&](const auto& ids) {
    double total = 0.0;
    for (int32_t i : ids) {
      if (weight[i] >= min_p) total += weight[i];
    }
    const double target = rng_.NextDouble() * total;
    double cumulative = 0.0;
    int32_t last = -1;
    for (int32_t i : ids) {
      if (weight[i] < min_p || weight[i] == 0.0) continue;
      cumulative += weight[i];
      last = i;
      if (cumulative > target) return i;
    }
    PIER_CHECK(last >= 0, "the best token did not survive truncation");
    return last;
  };
  if (prefix < vocab) {
    std::vector<int32_t>& kept = s.kept;
    kept.assign(order.begin(), order.begin() + prefix);
    std::sort(kept.begin(), kept.end());
    return draw(kept);
  }
  return draw(std::views::iota(int32_t{0}, static_cast<int32_t>(vocab)));
}

Result<SampleResult> Sampler::Sample(std::span<float> logits) {
  PIER_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
             "Sample() got a logits row whose size is not the vocabulary size");
  PIER_RETURN_IF_ERROR(CheckLogits(logits));
  ApplyPenalties(logits);
  return Pick(logits, params_.temperature == 0.0f ? Argmax(logits) : -1);
}

bool Sampler::ModifiesLogits() const {
  return params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
         params_.frequency_penalty != 0.0 || !params_.logit_bias.empty();
}

Result<SampleResult> Sampler::SampleReadOnly(std::span<const float> logits) {
  PIER_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
             "Sample() got a logits row whose size is not the vocabulary size");
  PIER_CHECK(!ModifiesLogits(), "SampleReadOnly with penalties to apply");
  if (params_.temperature == 0.0f) {
    PIER_ASSIGN_OR_RETURN(const int32_t best, CheckedArgmax(logits));
    return Pick(logits, best);
  }
  PIER_RETURN_IF_ERROR(CheckLogits(logits));
  return Pick(logits, -1);
}

SampleResult Sampler::Pick(std::span<const float> logits, int32_t greedy_token) {
  SampleResult result;
  result.token = greedy_token >= 0 ? greedy_token : SampleWithTemperature(logits);
  ++output_counts_[result.token];

  if (params_.logprobs.has_value()) {
    const TokenLogprobs lp = ComputeLogprobs(logits, result.token, *params_.logprobs);
    result.logprob = lp.logprob;
    result.top_logprobs = lp.top;
  }
  return result;
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t top_n) {
  TokenLogprobs out;
  const double lse = LogSumExp(logits);
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  const size_t n = std::min(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (n == 0) return out;
  Scratch& s = ThreadScratch(logits.size());
  std::span<int32_t> order(s.order.data(), logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&logits](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  for (size_t j = 0; j < n; ++j) {
    const int32_t t = order[j];
    out.top.push_back({t, static_cast<float>(static_cast<double>(logits[t]) - lse)});
  }
  return out;
}

}  // namespace pier::sampling
