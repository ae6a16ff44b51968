#include "grammar/nfa.h"

#include <string>

namespace pier::grammar {
namespace {

struct Fragment {
  int32_t start = 0;
  int32_t end = 0;  // has no moves yet; the caller links it onwards
};

class NfaBuilder {
 public:
  explicit NfaBuilder(size_t max_states) : max_states_(max_states) {}

  bool overflowed() const { return overflowed_; }
  Nfa Take(Fragment top) {
    nfa_.start = top.start;
    nfa_.accept = top.end;
    return std::move(nfa_);
  }

  Fragment Compile(const Expr& e) {
    if (overflowed_) return {0, 0};
    switch (e.kind) {
      case ExprKind::kNothing:
        return {NewState(), NewState()};  // no path from start to end
      case ExprKind::kEmpty: {
        const int32_t s = NewState();
        return {s, s};
      }
      case ExprKind::kBytes: {
        const Fragment f{NewState(), NewState()};
        if (overflowed_) return f;
        for (const ByteRange& r : e.ranges) {
          nfa_.states[f.start].edges.push_back({r.lo, r.hi, f.end});
        }
        return f;
      }
      case ExprKind::kSeq: {
        Fragment whole = Compile(*e.children[0]);
        for (size_t i = 1; i < e.children.size() && !overflowed_; ++i) {
          const Fragment next = Compile(*e.children[i]);
          Link(whole.end, next.start);
          whole.end = next.end;
        }
        return whole;
      }
      case ExprKind::kAlt: {
        const Fragment f{NewState(), NewState()};
        for (const ExprPtr& c : e.children) {
          if (overflowed_) break;
          const Fragment option = Compile(*c);
          Link(f.start, option.start);
          Link(option.end, f.end);
        }
        return f;
      }
      case ExprKind::kRepeat:
        return e.children.size() == 1 ? CompileRepeat(*e.children[0], e.min, e.max)
                                      : CompileList(*e.children[0], *e.children[1], e.min, e.max);
    }
    return {0, 0};
  }

 private:
  int32_t NewState() {
    if (nfa_.states.size() >= max_states_) {
      overflowed_ = true;
      return 0;
    }
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }

  void Link(int32_t from, int32_t to) {
    if (!overflowed_) nfa_.states[from].epsilon.push_back(to);
  }

  // `item` min times, then up to max - min more (or any number more).
  Fragment CompileRepeat(const Expr& item, int32_t min, int32_t max) {
    const int32_t start = NewState();
    int32_t cur = start;
    for (int32_t i = 0; i < min && !overflowed_; ++i) {
      const Fragment f = Compile(item);
      Link(cur, f.start);
      cur = f.end;
    }
    return {start, CompileTail(item, nullptr, cur, max == kUnbounded ? -1 : max - min)};
  }

  // item (separator item){min-1, max-1}, or nothing at all when min is 0.
  Fragment CompileList(const Expr& item, const Expr& separator, int32_t min, int32_t max) {
    const int32_t start = NewState();
    const int32_t end = NewState();
    if (min == 0) Link(start, end);
    if (max == kUnbounded && min <= 1) {
      // One copy of the item: after it, either the end or a separator back into it.
      const Fragment only = Compile(item);
      const Fragment sep = Compile(separator);
      Link(start, only.start);
      Link(only.end, end);
      Link(only.end, sep.start);
      Link(sep.end, only.start);
      return {start, end};
    }
    const Fragment first = Compile(item);
    Link(start, first.start);
    int32_t cur = first.end;
    const int32_t required = min > 0 ? min - 1 : 0;
    for (int32_t i = 0; i < required && !overflowed_; ++i) {
      const Fragment sep = Compile(separator);
      const Fragment next = Compile(item);
      Link(cur, sep.start);
      Link(sep.end, next.start);
      cur = next.end;
    }
    const int32_t optional = max == kUnbounded ? -1 : max - 1 - required;
    Link(CompileTail(item, &separator, cur, optional), end);
    return {start, end};
  }

  // [separator] item, as one fragment.
  Fragment CompileStep(const Expr& item, const Expr* separator) {
    if (separator == nullptr) return Compile(item);
    const Fragment sep = Compile(*separator);
    const Fragment next = Compile(item);
    Link(sep.end, next.start);
    return {sep.start, next.end};
  }

  // From `cur`: up to `count` more of ([separator] item), or any number when count < 0.
  // Returns the state after them.
  int32_t CompileTail(const Expr& item, const Expr* separator, int32_t cur, int32_t count) {
    const int32_t out = NewState();
    if (count < 0) {
      // One copy with a loop back to `cur`, which is also the way out.
      const Fragment body = CompileStep(item, separator);
      Link(cur, body.start);
      Link(body.end, cur);
      Link(cur, out);
      return out;
    }
    for (int32_t i = 0; i < count && !overflowed_; ++i) {
      Link(cur, out);
      const Fragment next = CompileStep(item, separator);
      Link(cur, next.start);
      cur = next.end;
    }
    Link(cur, out);
    return out;
  }

  size_t max_states_;
  bool overflowed_ = false;
  Nfa nfa_;
};

}  // namespace

Result<Nfa> CompileNfa(const Expr& expr, size_t max_states) {
  if (expr.kind == ExprKind::kNothing) {
    return InvalidArgumentError("the constraint matches no output at all");
  }
  NfaBuilder builder(max_states);
  const Fragment top = builder.Compile(expr);
  if (builder.overflowed()) {
    return ResourceExhaustedError("the constraint is too large: it needs more than " +
                                  std::to_string(max_states) + " automaton states");
  }
  return builder.Take(top);
}

}  // namespace pier::grammar
