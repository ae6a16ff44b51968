// DraftProposer: speculative decoding's draft model (engine/speculative/proposer.h): another
// served LLM with the target's vocabulary, asked for its greedy continuation of each
// sequence.
//
// Each step's proposals are one request per sequence to the draft's engine (its own client,
// so it batches them together and with its own traffic), the sequence's tokens as the prompt
// and the proposal length as max_tokens, greedy. The draft's prefix cache holds the full
// blocks of each sequence from the step before, so each call computes only the last partial
// block and the new tokens. The proposals are the draft's greedy tokens, not samples: with
// fixed proposals the target's own draw decides every token (proposer.h), so sampled output
// stays bit for bit the plain output too -- at the cost of fewer kept proposals on sampled
// requests than a rejection-sampling rule would keep.
//
// Ownership: holds a reference to the draft model (it stays loaded while the target lives).
// Thread-safety: Propose is called by the target's engine thread; the draft's client is
// thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/speculative/proposer.h"
#include "serving/model_registry.h"

namespace pier::serving {

class DraftProposer : public engine::Proposer {
 public:
  // `target`: the target model's id (it names the draft requests).
  DraftProposer(ModelRef draft, std::string target);
  std::vector<std::vector<int32_t>> Propose(
      std::span<const engine::ProposalRequest> requests) override;

 private:
  ModelRef draft_;
  std::string target_;
  std::atomic<int64_t> next_ = 0;
};

// The draft model `draft` for target `target_id` whose vocabulary has `target_vocab` tokens:
// INVALID_ARGUMENT when it is not an LLM (an embedding or tensor model) or its vocabulary size
// differs (naming both sizes).
[[nodiscard]] Status CheckDraftModel(const ServedModel& draft, const std::string& target_id,
                                     int64_t target_vocab);

}  // namespace pier::serving
