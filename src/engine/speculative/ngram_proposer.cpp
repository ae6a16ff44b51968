#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

namespace pier::engine {

std::vector<int32_t> LookupContinuation(std::span<const int32_t> tokens, int32_t ngram_min,
                                        int32_t ngram_max, int32_t max_tokens) {
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(ngram_max, len - 1); n >= std::max(1, ngram_min); --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // The latest occurrence with max_tokens tokens after it: the nearest context is the
    // likeliest to go on the same way, but an occurrence a few tokens back (a phrase the
    // output repeats) runs into the sequence's end at once, while the same words in the
    // source being copied go on; failing a whole one, the longest continuation.
    // Start s of an occurrence ends before the suffix itself (s + n <= len - 1), so at least
    // one token follows it.
    int64_t best = -1;
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (tokens[static_cast<size_t>(s + n - 1)] != suffix.back()) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + s)) continue;
      best = s;  // each earlier one has a longer continuation
      if (s + n + max_tokens <= len) break;
    }
    if (best >= 0) {
      const int64_t from = best + n;
      const int64_t to = std::min<int64_t>(len, from + max_tokens);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

std::vector<std::vector<int32_t>> NgramProposer::Propose(
    std::span<const ProposalRequest> requests) {
  std::vector<std::vector<int32_t>> proposals;
  proposals.reserve(requests.size());
  for (const ProposalRequest& r : requests) {
    proposals.push_back(LookupContinuation(r.tokens, ngram_min_, ngram_max_, r.max_tokens));
  }
  return proposals;
}

std::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kOff:
      return "off";
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraft:
      return "draft";
  }
  return "off";
}

}  // namespace pier::engine
