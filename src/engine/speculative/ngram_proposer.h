// NgramProposer: prompt lookup. The proposal for a sequence is what followed the most recent
// earlier occurrence of its latest n tokens that has a whole proposal after it (else the
// earliest, whose continuation is the longest), n from ngram_max down to ngram_min, the
// longest match first: text that copies from its input (a document rewritten with one field
// changed, a paragraph with a typo fixed, fields quoted from a text) goes on as its source did.
// No
// model, no state: a scan of the sequence's tokens, O(length x ngram_max) per proposal.
//
// Thread-safety: stateless; const methods.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/speculative/proposer.h"

namespace pier::engine {

// The continuation of the latest earlier occurrence of `tokens`' last n tokens, for the
// largest n in [ngram_min, ngram_max] that occurs, at most max_tokens long (empty: no match).
std::vector<int32_t> LookupContinuation(std::span<const int32_t> tokens, int32_t ngram_min,
                                        int32_t ngram_max, int32_t max_tokens);

class NgramProposer : public Proposer {
 public:
  NgramProposer(int32_t ngram_min, int32_t ngram_max)
      : ngram_min_(ngram_min), ngram_max_(ngram_max) {}
  std::vector<std::vector<int32_t>> Propose(std::span<const ProposalRequest> requests) override;

 private:
  int32_t ngram_min_;
  int32_t ngram_max_;
};

}  // namespace pier::engine
