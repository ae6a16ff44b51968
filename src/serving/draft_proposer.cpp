#include "serving/draft_proposer.h"

#include <memory>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace pier::serving {

DraftProposer::DraftProposer(ModelRef draft, std::string target)
    : draft_(std::move(draft)), target_(std::move(target)) {}

std::vector<std::vector<int32_t>> DraftProposer::Propose(
    std::span<const engine::ProposalRequest> requests) {
  std::vector<std::vector<int32_t>> proposals(requests.size());
  std::vector<std::shared_ptr<engine::RequestHandle>> handles(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const engine::ProposalRequest& r = requests[i];
    // A sequence longer than the draft holds gets no proposal (the target goes on alone).
    if (r.max_tokens <= 0 ||
        static_cast<int64_t>(r.tokens.size()) + r.max_tokens > draft_->max_request_tokens) {
      continue;
    }
    engine::Request request;
    request.id = "speculative:" + target_ + ":" + std::to_string(r.sequence_id) + ":" +
                 std::to_string(next_.fetch_add(1));
    request.prompt_tokens.assign(r.tokens.begin(), r.tokens.end());
    request.sampling.temperature = 0;
    request.max_tokens = r.max_tokens;
    request.ignore_eos = true;  // the target decides where the text ends
    request.skip_special_tokens = false;
    request.priority = engine::Priority::kHigh;
    Result<std::shared_ptr<engine::RequestHandle>> handle = draft_->client->Submit(request);
    if (handle.ok()) handles[i] = std::move(handle).value();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (handles[i] == nullptr) continue;
    for (const engine::Event& e : handles[i]->WaitAll()) {
      if (e.token >= 0) proposals[i].push_back(e.token);
    }
  }
  return proposals;
}

Status CheckDraftModel(const ServedModel& draft, const std::string& target_id,
                       int64_t target_vocab) {
  if (draft.kind != ModelKind::kGenerate || draft.tokenizer == nullptr) {
    return InvalidArgumentError("speculative draft model " + draft.id +
                                " is not an LLM (an embedding or tensor model cannot draft)");
  }
  const int64_t draft_vocab = draft.tokenizer->vocab_size();
  if (draft_vocab != target_vocab) {
    return InvalidArgumentError("speculative draft model " + draft.id + " has a vocabulary of " +
                                std::to_string(draft_vocab) + " tokens, " + target_id + " one of " +
                                std::to_string(target_vocab) +
                                ": a draft must share its target's vocabulary");
  }
  return Status::Ok();
}

}  // namespace pier::serving
