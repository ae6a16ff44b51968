// Grammar and GrammarMatcher: a constraint applied to decoding, as a mask over the vocabulary
// before each sampled token.
//
// A Grammar is a compiled constraint (Expr -> Nfa -> LazyDfa) bound to one model's
// TokenVocabulary. The tokens allowed in a DFA state are found by one walk over the
// vocabulary trie, following DFA transitions byte by byte and skipping every subtree where
// the DFA dies; that answers for tokens that cross grammar boundaries (`"}` closing a string
// and an object) as for any other, and the mask is cached per state, so a schema's second
// request, and most steps of its first, cost one lookup. End-of-generation tokens are allowed
// exactly in accepting states.
//
// A GrammarMatcher is one output's position in a Grammar (one per choice of a request). The
// mask depends only on that output's own tokens, never on the batch, so constrained outputs
// keep Pier's batch invariance.
//
// Thread-safety: a Grammar caches as it goes; it and its matchers belong to one thread at a
// time (the engine thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "grammar/expr.h"
#include "grammar/lazy_dfa.h"
#include "grammar/nfa.h"
#include "grammar/token_vocabulary.h"

namespace pier::grammar {

struct GrammarLimits {
  size_t max_nfa_states = kDefaultMaxNfaStates;
  size_t max_dfa_states = 1 << 16;
  size_t max_cached_mask_bytes = size_t{64} << 20;  // masks past this are recomputed
};

class Grammar {
 public:
  // INVALID_ARGUMENT when `expr` matches nothing; RESOURCE_EXHAUSTED past the NFA limit.
  [[nodiscard]] static Result<std::shared_ptr<Grammar>> Create(
      const Expr& expr, std::shared_ptr<const TokenVocabulary> vocabulary,
      const GrammarLimits& limits = {});

  int32_t start() const { return dfa_.start(); }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }

  // Bit t (word t / 64, bit t % 64) is set when token t may come next in `state`.
  // RESOURCE_EXHAUSTED when the DFA outgrew its limit.
  [[nodiscard]] Result<std::span<const uint64_t>> AllowedTokens(int32_t state);
  // The state after `token`; LazyDfa::kDead when the token is not allowed.
  [[nodiscard]] Result<int32_t> Advance(int32_t state, int32_t token);
  // The output so far is a whole match.
  bool IsAccepting(int32_t state) const { return dfa_.accepting(state); }
  // A whole match that nothing may extend: the output is finished.
  bool IsComplete(int32_t state) const { return dfa_.accepting(state) && !dfa_.has_moves(state); }

  size_t num_dfa_states() const { return dfa_.num_states(); }
  size_t num_nfa_states() const { return nfa_->states.size(); }
  size_t num_cached_masks() const { return masks_.size(); }

 private:
  Grammar(std::shared_ptr<const Nfa> nfa, std::shared_ptr<const TokenVocabulary> vocabulary,
          const GrammarLimits& limits);
  [[nodiscard]] Status ComputeMask(int32_t state, std::vector<uint64_t>* mask);

  std::shared_ptr<const Nfa> nfa_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  GrammarLimits limits_;
  LazyDfa dfa_;
  std::unordered_map<int32_t, std::vector<uint64_t>> masks_;  // [state] -> [words]
  std::vector<uint64_t> scratch_mask_;                        // when the cache is full
  std::vector<int32_t> walk_states_;                          // [depth]
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<Grammar> grammar);

  // Sets the logits [vocab_size] of every token the constraint refuses to -inf.
  // RESOURCE_EXHAUSTED when the DFA outgrew its limit; FAILED_PRECONDITION when no token of
  // this vocabulary can continue the output.
  [[nodiscard]] Status MaskLogits(std::span<float> logits);
  // Moves past `token`; INVALID_ARGUMENT when the constraint does not allow it.
  [[nodiscard]] Status Accept(int32_t token);
  // Nothing may follow: the output is a whole match.
  bool complete() const { return grammar_->IsComplete(state_); }
  bool accepting() const { return grammar_->IsAccepting(state_); }

 private:
  std::shared_ptr<Grammar> grammar_;
  int32_t state_;
};

}  // namespace pier::grammar
