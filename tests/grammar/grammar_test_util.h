// Helpers for the grammar tests: run an Expr over a byte string, and draw random members of
// its language by walking the DFA.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/expr.h"
#include "grammar/lazy_dfa.h"
#include "grammar/nfa.h"

namespace pier::grammar::testing {

class Language {
 public:
  explicit Language(const ExprPtr& e)
      : nfa_(std::make_shared<const Nfa>(CompileNfa(*e).value())), dfa_(nfa_) {}

  bool Matches(std::string_view s) {
    int32_t state = dfa_.start();
    for (char c : s) {
      state = dfa_.Next(state, static_cast<uint8_t>(c));
      if (state <= 0) return false;
    }
    return dfa_.accepting(state);
  }

  // Draws a random member of the language into `out`: each byte uniformly among those that
  // keep the walk alive, stopping in an accepting state with probability stop_p per step.
  // Every live state of these languages can still finish (the builders leave no dead ends),
  // so this fails (returns false) only when max_bytes is reached first.
  bool Sample(std::mt19937_64* rng, std::string* out, double stop_p = 0.08,
              size_t max_bytes = 4000) {
    out->clear();
    int32_t state = dfa_.start();
    std::uniform_real_distribution<double> coin(0, 1);
    while (true) {
      if (dfa_.accepting(state) && (!dfa_.has_moves(state) || coin(*rng) < stop_p)) return true;
      if (out->size() >= max_bytes) return false;
      std::vector<uint8_t> live;
      for (int b = 0; b < 256; ++b) {
        const int32_t next = dfa_.Next(state, static_cast<uint8_t>(b));
        if (next > 0) live.push_back(static_cast<uint8_t>(b));
      }
      if (live.empty()) return false;
      const uint8_t b = live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(*rng)];
      out->push_back(static_cast<char>(b));
      state = dfa_.Next(state, b);
    }
  }

  LazyDfa& dfa() { return dfa_; }

 private:
  std::shared_ptr<const Nfa> nfa_;
  LazyDfa dfa_;
};

}  // namespace pier::grammar::testing
