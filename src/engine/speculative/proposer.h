// Proposer: where speculative decoding's proposed tokens come from.
//
// Speculation (issue #48) lets a decoding sequence compute, in one step, its last token and
// a few tokens proposed to follow it; the target model's logits at each of those positions
// then decide, position after position, which proposals are kept (core/engine_speculative.
// cpp). Whatever the proposals, the output is the output without them: every kept token is
// the token the sampler draws from the same logits (batch invariance makes them the same
// bits), and a proposal is kept only while it equals that token. A proposer only changes how
// many tokens one step yields.
//
// Two proposers: prompt lookup (ngram_proposer.h: continuations of an earlier occurrence of
// the latest tokens, no model) and a draft model (serving/draft_proposer.h: a smaller served
// model with the same vocabulary, asked for its greedy continuation).
//
// Thread-safety: called by the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pier::engine {

// One sequence to propose for: its tokens so far (prompt and generated) and the most tokens
// wanted.
struct ProposalRequest {
  int64_t sequence_id = 0;
  std::span<const int32_t> tokens;
  int32_t max_tokens = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Proposals for each request, in order (each at most its max_tokens; empty: none). The
  // engine asks for every sequence of a step at once, so a draft model runs them as one batch.
  virtual std::vector<std::vector<int32_t>> Propose(std::span<const ProposalRequest> requests) = 0;
  // The sequence has ended (a proposer that keeps state per sequence drops it).
  virtual void Forget(int64_t /*sequence_id*/) {}
};

enum class SpeculativeMethod : uint8_t {
  kOff,    // no speculation
  kNgram,  // prompt lookup (NgramProposer)
  kDraft,  // a draft model (SpeculativeOptions::proposer)
};
std::string_view SpeculativeMethodName(SpeculativeMethod method);

struct SpeculativeOptions {
  SpeculativeMethod method = SpeculativeMethod::kOff;
  // The most tokens proposed for one sequence in one step (1..32).
  int32_t max_tokens = 8;
  // Prompt lookup: the longest and shortest suffix searched for earlier in the sequence.
  int32_t ngram_max = 4;
  int32_t ngram_min = 2;
  // kDraft: the draft's proposer (its served name in draft_model, for display).
  std::shared_ptr<Proposer> proposer;
  std::string draft_model;
  // true: each step's proposal lengths follow the measured cost of a step's tokens and each
  // sequence's recent acceptance (speculation_planner.h), down to none under load. false:
  // every decoding sequence gets max_tokens proposals whenever the proposer has them (tests
  // exercise verification on every step).
  bool adaptive = true;
};

}  // namespace pier::engine
