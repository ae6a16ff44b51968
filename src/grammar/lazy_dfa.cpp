#include "grammar/lazy_dfa.h"

#include <algorithm>
#include <utility>

namespace pier::grammar {
namespace {

constexpr int32_t kUnknown = -2;

std::string Pack(const std::vector<int32_t>& set) {
  return std::string(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
}

}  // namespace

LazyDfa::LazyDfa(std::shared_ptr<const Nfa> nfa, size_t max_states)
    : nfa_(std::move(nfa)), max_states_(std::max<size_t>(max_states, 2)) {
  // Byte classes: bytes between two consecutive edge boundaries behave alike everywhere.
  std::array<bool, 257> boundary{};
  boundary[0] = true;
  for (const NfaState& s : nfa_->states) {
    for (const NfaEdge& e : s.edges) {
      boundary[e.lo] = true;
      boundary[static_cast<size_t>(e.hi) + 1] = true;
    }
  }
  int32_t cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (boundary[static_cast<size_t>(b)]) ++cls;
    byte_class_[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
  }
  num_classes_ = cls + 1;
  visit_mark_.assign(nfa_->states.size(), 0);

  // State 0: dead.
  sets_.emplace_back();
  info_.push_back({});
  next_.assign(static_cast<size_t>(num_classes_), kDead);
  by_set_.emplace(std::string(), kDead);
  start_ = Intern(Closure({nfa_->start}));
}

std::vector<int32_t> LazyDfa::Closure(const std::vector<int32_t>& seeds) {
  if (++visit_generation_ == 0) {
    std::fill(visit_mark_.begin(), visit_mark_.end(), 0);
    visit_generation_ = 1;
  }
  std::vector<int32_t> stack = seeds;
  std::vector<int32_t> kept;
  for (int32_t s : seeds) visit_mark_[static_cast<size_t>(s)] = visit_generation_;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    const NfaState& state = nfa_->states[static_cast<size_t>(s)];
    if (!state.edges.empty() || s == nfa_->accept) kept.push_back(s);
    for (int32_t t : state.epsilon) {
      if (visit_mark_[static_cast<size_t>(t)] == visit_generation_) continue;
      visit_mark_[static_cast<size_t>(t)] = visit_generation_;
      stack.push_back(t);
    }
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

int32_t LazyDfa::Intern(std::vector<int32_t> nfa_states) {
  std::string key = Pack(nfa_states);
  if (auto it = by_set_.find(key); it != by_set_.end()) return it->second;
  if (info_.size() >= max_states_) return kOverflow;
  const auto id = static_cast<int32_t>(info_.size());
  StateInfo info;
  for (int32_t s : nfa_states) {
    if (s == nfa_->accept) info.accepting = true;
    if (!nfa_->states[static_cast<size_t>(s)].edges.empty()) info.has_moves = true;
  }
  info_.push_back(info);
  sets_.push_back(std::move(nfa_states));
  next_.resize(next_.size() + static_cast<size_t>(num_classes_), kUnknown);
  by_set_.emplace(std::move(key), id);
  return id;
}

int32_t LazyDfa::Next(int32_t state, uint8_t byte) {
  const size_t slot =
      static_cast<size_t>(state) * static_cast<size_t>(num_classes_) + byte_class_[byte];
  if (next_[slot] != kUnknown) return next_[slot];
  std::vector<int32_t> seeds;
  for (int32_t s : sets_[static_cast<size_t>(state)]) {
    for (const NfaEdge& e : nfa_->states[static_cast<size_t>(s)].edges) {
      if (e.lo <= byte && byte <= e.hi) seeds.push_back(e.target);
    }
  }
  std::sort(seeds.begin(), seeds.end());
  seeds.erase(std::unique(seeds.begin(), seeds.end()), seeds.end());
  const int32_t target = seeds.empty() ? kDead : Intern(Closure(seeds));
  if (target == kOverflow) return kOverflow;  // not cached: the table did not grow
  // Intern may have grown next_; index again.
  next_[slot] = target;
  return target;
}

}  // namespace pier::grammar
