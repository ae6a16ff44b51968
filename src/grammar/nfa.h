// Nfa: an Expr compiled into a Thompson automaton over bytes (epsilon moves and byte-range
// moves), the input of the lazy DFA.
//
// A repeat with no upper bound compiles its item once, with a loop back, so an object of
// many properties or a list of many items costs the states of one item; a bounded repeat
// {m,n} costs n copies, which is why CompileNfa takes a state limit: a schema too large to
// compile is refused with that limit named, not left to eat memory.
//
// Thread-safety: an Nfa is immutable after CompileNfa and may be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "grammar/expr.h"

namespace pier::grammar {

struct NfaEdge {
  uint8_t lo = 0;
  uint8_t hi = 0;  // inclusive
  int32_t target = -1;
};

struct NfaState {
  std::vector<int32_t> epsilon;  // moves that read nothing
  std::vector<NfaEdge> edges;    // moves that read one byte in [lo, hi]
};

struct Nfa {
  std::vector<NfaState> states;
  int32_t start = 0;
  int32_t accept = 0;  // the one accepting state; it has no moves of its own
};

inline constexpr size_t kDefaultMaxNfaStates = 1 << 18;

// INVALID_ARGUMENT when `expr` matches nothing; RESOURCE_EXHAUSTED when it needs more than
// max_states states.
[[nodiscard]] Result<Nfa> CompileNfa(const Expr& expr, size_t max_states = kDefaultMaxNfaStates);

}  // namespace pier::grammar
