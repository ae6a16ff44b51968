#include "grammar/grammar.h"

#include <limits>
#include <string>
#include <utility>

namespace pier::grammar {
namespace {

size_t MaskWords(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 63) / 64; }

void SetBit(std::vector<uint64_t>* mask, int32_t token) {
  (*mask)[static_cast<size_t>(token) / 64] |= uint64_t{1} << (static_cast<uint32_t>(token) % 64);
}

Status OverflowError(size_t max_states) {
  return ResourceExhaustedError("the constraint's automaton grew past " +
                                std::to_string(max_states) + " states while decoding");
}

}  // namespace

Grammar::Grammar(std::shared_ptr<const Nfa> nfa, std::shared_ptr<const TokenVocabulary> vocabulary,
                 const GrammarLimits& limits)
    : nfa_(std::move(nfa)),
      vocabulary_(std::move(vocabulary)),
      limits_(limits),
      dfa_(nfa_, limits.max_dfa_states) {}

Result<std::shared_ptr<Grammar>> Grammar::Create(const Expr& expr,
                                                 std::shared_ptr<const TokenVocabulary> vocabulary,
                                                 const GrammarLimits& limits) {
  PIER_ASSIGN_OR_RETURN(Nfa nfa, CompileNfa(expr, limits.max_nfa_states));
  return std::shared_ptr<Grammar>(
      new Grammar(std::make_shared<const Nfa>(std::move(nfa)), std::move(vocabulary), limits));
}

Status Grammar::ComputeMask(int32_t state, std::vector<uint64_t>* mask) {
  const TokenVocabulary& v = *vocabulary_;
  mask->assign(MaskWords(v.vocab_size()), 0);
  const std::vector<TokenVocabulary::Node>& nodes = v.nodes();
  const std::vector<int32_t>& ids = v.token_ids();
  walk_states_.resize(static_cast<size_t>(v.max_depth()) + 1);
  walk_states_[0] = state;
  size_t i = 0;
  while (i < nodes.size()) {
    const TokenVocabulary::Node& node = nodes[i];
    const int32_t next = dfa_.Next(walk_states_[static_cast<size_t>(node.depth - 1)], node.byte);
    if (next == LazyDfa::kOverflow) return OverflowError(limits_.max_dfa_states);
    if (next == LazyDfa::kDead) {
      i = static_cast<size_t>(node.subtree_end);
      continue;
    }
    walk_states_[static_cast<size_t>(node.depth)] = next;
    for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) {
      SetBit(mask, ids[static_cast<size_t>(k)]);
    }
    ++i;
  }
  if (dfa_.accepting(state)) {
    for (int32_t id : v.end_of_generation()) {
      if (id >= 0 && id < v.vocab_size()) SetBit(mask, id);
    }
  }
  return Status::Ok();
}

Result<std::span<const uint64_t>> Grammar::AllowedTokens(int32_t state) {
  if (auto it = masks_.find(state); it != masks_.end())
    return std::span<const uint64_t>(it->second);
  const size_t mask_bytes = MaskWords(vocabulary_->vocab_size()) * sizeof(uint64_t);
  if ((masks_.size() + 1) * mask_bytes > limits_.max_cached_mask_bytes) {
    PIER_RETURN_IF_ERROR(ComputeMask(state, &scratch_mask_));
    return std::span<const uint64_t>(scratch_mask_);
  }
  std::vector<uint64_t> mask;
  PIER_RETURN_IF_ERROR(ComputeMask(state, &mask));
  auto [it, inserted] = masks_.emplace(state, std::move(mask));
  return std::span<const uint64_t>(it->second);
}

Result<int32_t> Grammar::Advance(int32_t state, int32_t token) {
  const TokenVocabulary& v = *vocabulary_;
  if (token < 0 || token >= v.vocab_size()) return LazyDfa::kDead;
  if (v.IsEndOfGeneration(token)) return dfa_.accepting(state) ? state : LazyDfa::kDead;
  if (!v.writes_text(token)) return LazyDfa::kDead;
  for (char c : v.bytes(token)) {
    state = dfa_.Next(state, static_cast<uint8_t>(c));
    if (state == LazyDfa::kOverflow) return OverflowError(limits_.max_dfa_states);
    if (state == LazyDfa::kDead) return LazyDfa::kDead;
  }
  return state;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<Grammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->start()) {}

Status GrammarMatcher::MaskLogits(std::span<float> logits) {
  PIER_ASSIGN_OR_RETURN(std::span<const uint64_t> mask, grammar_->AllowedTokens(state_));
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), mask.size() * 64);
  bool any = false;
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask[w];
    any = any || bits != 0;
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, (w + 1) * 64);
    for (size_t t = w * 64; t < end; ++t) {
      if ((bits >> (t % 64) & 1) == 0) logits[t] = kRefused;
    }
  }
  for (size_t t = n; t < logits.size(); ++t) logits[t] = kRefused;
  if (!any) {
    return FailedPreconditionError(
        "no token of this model's vocabulary can continue the constrained output");
  }
  return Status::Ok();
}

Status GrammarMatcher::Accept(int32_t token) {
  PIER_ASSIGN_OR_RETURN(int32_t next, grammar_->Advance(state_, token));
  if (next == LazyDfa::kDead) {
    return InvalidArgumentError("token " + std::to_string(token) +
                                " is not allowed by the constraint here");
  }
  state_ = next;
  return Status::Ok();
}

}  // namespace pier::grammar
