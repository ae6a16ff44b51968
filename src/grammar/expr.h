// Expr: a regular language over bytes, built from small combinators; what every constraint
// (a JSON schema, a string pattern, a tool-call format) compiles to before it becomes an NFA.
//
// Regular on purpose: a JSON schema without recursion describes a regular language, and a
// recursive one (or free-form JSON) is unrolled to a stated depth, so that one lazily built
// DFA (lazy_dfa.h) can answer "which tokens may come next" from a single integer state and
// cache the answer per state.
//
// Builders simplify as they go: anything concatenated with Nothing() (the empty language) is
// Nothing, alternatives that are Nothing drop out, and Repeat(Nothing, 0, n) is Empty(). A
// recursion cut at its depth limit becomes Nothing, so a schema whose only strings are
// infinitely deep compiles to Nothing and is refused as having no base case.
//
// Thread-safety: Exprs are immutable once built and may be shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace pier::grammar {

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;  // inclusive
};

enum class ExprKind : uint8_t {
  kNothing,  // matches no string at all
  kEmpty,    // matches only ""
  kBytes,    // one byte inside any of `ranges`
  kSeq,      // children one after another
  kAlt,      // any one of the children
  kRepeat,   // children[0] between min and max times, children[1] (if any) between them
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind = ExprKind::kNothing;
  std::vector<ByteRange> ranges;  // kBytes
  std::vector<ExprPtr> children;  // kSeq, kAlt; kRepeat: [item] or [item, separator]
  int32_t min = 0;                // kRepeat
  int32_t max = 0;                // kRepeat; kUnbounded for no upper bound
};

inline constexpr int32_t kUnbounded = -1;

ExprPtr Nothing();
ExprPtr Empty();
ExprPtr Literal(std::string_view bytes);
ExprPtr Bytes(std::vector<ByteRange> ranges);
ExprPtr Byte(uint8_t b);
ExprPtr Seq(std::vector<ExprPtr> parts);
ExprPtr Alt(std::vector<ExprPtr> options);
ExprPtr Optional(ExprPtr e);
// item{min,max}; max == kUnbounded for item{min,}.
ExprPtr Repeat(ExprPtr item, int32_t min, int32_t max);
// item (separator item)*, with the number of items between min and max: lists and objects,
// compiled with one copy of `item` when max is unbounded.
ExprPtr SeparatedList(ExprPtr item, ExprPtr separator, int32_t min, int32_t max);

inline bool IsNothing(const ExprPtr& e) { return e->kind == ExprKind::kNothing; }

}  // namespace pier::grammar
