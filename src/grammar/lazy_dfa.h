// LazyDfa: the subset construction of an Nfa, built one transition at a time as decoding
// asks for it, so a constraint pays only for the states its outputs visit.
//
// A DFA state is the set of NFA states that have byte moves (or accept) reachable after the
// bytes read so far; two byte strings that leave the same set are the same state, which is
// what lets a token mask be cached per state (grammar.h). Bytes that no NFA edge tells apart
// share one class, so a state's transition row holds one entry per class, not 256.
//
// State 0 is the dead state: no string continues from it. Past max_states the DFA stops
// growing: Next() answers kOverflow and the caller ends the request with an error rather than
// decode under a wrong mask.
//
// Thread-safety: Next() mutates the tables; one thread at a time (the engine thread).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/nfa.h"

namespace pier::grammar {

class LazyDfa {
 public:
  static constexpr int32_t kDead = 0;
  static constexpr int32_t kOverflow = -1;

  explicit LazyDfa(std::shared_ptr<const Nfa> nfa, size_t max_states = 1 << 16);

  int32_t start() const { return start_; }
  // The state after reading `byte` in `state` (not kOverflow): kDead, kOverflow or a state.
  int32_t Next(int32_t state, uint8_t byte);
  // The string read so far is a whole match.
  bool accepting(int32_t state) const { return info_[state].accepting; }
  // Some byte can still be read.
  bool has_moves(int32_t state) const { return info_[state].has_moves; }
  size_t num_states() const { return info_.size(); }
  int32_t num_byte_classes() const { return num_classes_; }

 private:
  struct StateInfo {
    bool accepting = false;
    bool has_moves = false;
  };

  int32_t Intern(std::vector<int32_t> nfa_states);
  // Adds everything reachable from `seeds` by epsilon moves, keeping states that read or accept.
  std::vector<int32_t> Closure(const std::vector<int32_t>& seeds);

  std::shared_ptr<const Nfa> nfa_;
  size_t max_states_;
  std::array<uint8_t, 256> byte_class_{};
  int32_t num_classes_ = 0;
  std::vector<std::vector<int32_t>> sets_;           // [state] -> sorted NFA states
  std::vector<StateInfo> info_;                      // [state]
  std::vector<int32_t> next_;                        // [state * num_classes + class]; -2 unknown
  std::unordered_map<std::string, int32_t> by_set_;  // packed set -> state
  std::vector<uint32_t> visit_mark_;                 // [nfa state], for Closure
  uint32_t visit_generation_ = 0;
  int32_t start_ = 0;
};

}  // namespace pier::grammar
