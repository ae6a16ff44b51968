// The engine's speculative decoding (issue #48; speculative/proposer.h says what it
// promises): the cost measurements the planner starts from, each step's proposals, and the
// verification of a step's proposed positions.
//
// Verification is the plain sampler walking the rows in order. Row 0 is the logits after the
// sequence's last token, exactly those a plain decode step would have computed (batch
// invariance); the sampler draws from it as it always does (same penalties, same mask, same
// random stream); when that token equals the first proposal, the K/V already written for the
// proposal are the token's, and row 1 is the logits after it, and so on. The first token that
// differs from its proposal (or the token after the last proposal) is appended as a plain
// sample is; the positions after it held rejected proposals and are given back. Greedy and
// seeded sampling alike produce exactly the tokens, logprobs and stops of the plain path.
#include <algorithm>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/engine_state.h"
#include "grammar/constraint.h"

namespace pier::engine {

void Engine::CalibrateSpeculation() {
  // Steps of 1 .. max_tokens + 1 tokens with a logits row each (a decode and its proposals),
  // after a short prompt, in scratch blocks given back at the end. What this measures is the
  // device's: the planner's first guess, refined by every step the engine runs.
  const int64_t bs = blocks_.block_size();
  const int64_t prompt = 32;
  const int64_t longest = options_.speculative.max_tokens + 1;
  const int64_t n_blocks = (prompt + longest + bs - 1) / bs *
                           std::max<int64_t>(1, runner_->shape().kv_groups.n_groups());
  std::vector<int32_t> table;
  for (int64_t i = 0; i < n_blocks; ++i) {
    Result<int32_t> block = blocks_.Allocate();
    if (!block.ok()) break;
    table.push_back(*block);
  }
  auto give_back = [&] {
    for (int32_t b : table) blocks_.Release(b);
  };
  if (static_cast<int64_t>(table.size()) < n_blocks ||
      longest > std::min(options_.scheduler.max_seqs, options_.scheduler.max_batched_tokens)) {
    give_back();  // no room now: the planner learns from the steps it sees
    return;
  }
  auto step = [&](int64_t first, int64_t n, LogitsWanted wanted) -> double {
    SequenceSpan span;
    span.sequence_id = 0;
    span.tokens.assign(static_cast<size_t>(n), 1);
    span.first_position = first;
    span.block_table = table;
    span.logits = wanted;
    const TimestampUs t0 = NowUs();
    Result<StepOutput> out = runner_->Step(Batch{{std::move(span)}, nullptr});
    return out.ok() ? static_cast<double>(NowUs() - t0) : -1;
  };
  if (step(0, prompt, LogitsWanted::kLast) < 0) {
    give_back();
    return;
  }
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t n = 1; n <= longest; ++n) {
      const double us = step(prompt, n, n == 1 ? LogitsWanted::kLast : LogitsWanted::kAll);
      if (us > 0) planner_->cost().Observe(n, us);
    }
  }
  give_back();
}

void Engine::ProposeDrafts() {
  const SpeculativeOptions& spec = options_.speculative;
  // The step as it would run without proposals: its tokens, and which sequences decode in it.
  const StepPlan base = scheduler_.Plan();
  if (base.sequences.empty()) return;
  std::vector<DraftCandidate> candidates;
  std::vector<std::pair<Live*, Choice*>> owners;
  for (const ScheduledSequence& ss : base.sequences) {
    if (ss.admit || ss.n_tokens != 1) continue;
    auto it = by_sequence_.find(ss.id);
    if (it == by_sequence_.end()) continue;
    const std::span<const int32_t> tokens = scheduler_.Tokens(ss.id);
    if (static_cast<int64_t>(tokens.size()) - scheduler_.NumComputed(ss.id) != 1) continue;
    Live& live = *it->second.first;
    Choice& c = live.choices[it->second.second];
    if (c.done || c.generated == 0) continue;
    // Proposals past the request's last token would be computed for nothing.
    const int64_t left =
        std::min<int64_t>(live.request.max_tokens - c.generated,
                          max_request_tokens_ - static_cast<int64_t>(tokens.size())) -
        1;
    if (left <= 0) continue;
    candidates.push_back(
        {.sequence_id = ss.id,
         .max_tokens = static_cast<int32_t>(std::min<int64_t>(spec.max_tokens, left))});
    owners.emplace_back(&live, &c);
  }
  if (candidates.empty()) return;
  // Rows the step's workspace holds: one per running sequence, so the proposals get the slots
  // of sequences not running.
  int64_t rows_left = std::min(options_.scheduler.max_seqs, options_.scheduler.max_batched_tokens) -
                      static_cast<int64_t>(base.sequences.size());
  std::vector<int32_t> lengths;
  if (spec.adaptive) {
    lengths = planner_->Choose(base.num_tokens(), static_cast<int64_t>(base.sequences.size()),
                               candidates);
  } else {
    for (const DraftCandidate& d : candidates) lengths.push_back(d.max_tokens);
  }
  std::vector<ProposalRequest> requests;
  std::vector<size_t> asked;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(lengths[i], rows_left));
    if (n <= 0) {
      ++spec_skipped_;
      continue;
    }
    rows_left -= n;
    requests.push_back({.sequence_id = candidates[i].sequence_id,
                        .tokens = scheduler_.Tokens(candidates[i].sequence_id),
                        .max_tokens = n});
    asked.push_back(i);
  }
  if (requests.empty()) return;
  std::vector<std::vector<int32_t>> proposals = proposer_->Propose(requests);
  const int32_t n_vocab = static_cast<int32_t>(runner_->shape().n_vocab);
  for (size_t r = 0; r < requests.size() && r < proposals.size(); ++r) {
    std::vector<int32_t>& draft = proposals[r];
    if (static_cast<int64_t>(draft.size()) > requests[r].max_tokens) {
      draft.resize(static_cast<size_t>(requests[r].max_tokens));
    }
    // A proposal outside the vocabulary, or one the output constraint refuses, could never be
    // sampled: the proposal ends before it.
    Choice& c = *owners[asked[r]].second;
    std::optional<grammar::GrammarMatcher> matcher = c.constraint;
    for (size_t j = 0; j < draft.size(); ++j) {
      const bool valid = draft[j] >= 0 && draft[j] < n_vocab &&
                         (!matcher.has_value() || matcher->Accept(draft[j]).ok());
      if (!valid) {
        draft.resize(j);
        break;
      }
    }
    if (draft.empty()) {
      ++spec_skipped_;
      continue;
    }
    scheduler_.SetDraft(requests[r].sequence_id, std::move(draft));
  }
}

void Engine::VerifyDraft(Live& live, Choice& c, const StepOutput& out, size_t first_row,
                         std::span<const int32_t> draft) {
  const int64_t sequence_id = c.sequence_id;
  int32_t kept = 0;
  for (size_t j = 0; j <= draft.size(); ++j) {
    const int32_t proposed = j < draft.size() ? draft[j] : -1;
    int32_t sampled = -1;
    const bool next = SampleChoice(live, c, out.Row(first_row + j), proposed, &sampled);
    // A proposal equal to its sample is kept, also when that token ended the choice.
    if (proposed >= 0 && sampled == proposed) ++kept;
    if (!next) break;
  }
  // The positions after the last kept proposal held rejected ones: their blocks go back.
  if (!c.done) scheduler_.ReleaseBlocksPastEnd(sequence_id);
  ++spec_drafts_;
  spec_draft_tokens_ += static_cast<int64_t>(draft.size());
  spec_accepted_tokens_ += kept;
  for (int32_t j = 0; j < kept; ++j) ++spec_accepted_per_position_[static_cast<size_t>(j)];
  ++spec_accepted_lengths_[static_cast<size_t>(kept)];
  planner_->Record(sequence_id, static_cast<int32_t>(draft.size()), kept);
}

}  // namespace pier::engine
