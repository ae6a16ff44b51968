#include "grammar/expr.h"

#include <algorithm>
#include <utility>

namespace pier::grammar {
namespace {

ExprPtr Make(ExprKind kind, std::vector<ByteRange> ranges, std::vector<ExprPtr> children,
             int32_t min = 0, int32_t max = 0) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->ranges = std::move(ranges);
  e->children = std::move(children);
  e->min = min;
  e->max = max;
  return e;
}

}  // namespace

ExprPtr Nothing() {
  static const ExprPtr nothing = Make(ExprKind::kNothing, {}, {});
  return nothing;
}

ExprPtr Empty() {
  static const ExprPtr empty = Make(ExprKind::kEmpty, {}, {});
  return empty;
}

ExprPtr Bytes(std::vector<ByteRange> ranges) {
  std::erase_if(ranges, [](const ByteRange& r) { return r.lo > r.hi; });
  if (ranges.empty()) return Nothing();
  return Make(ExprKind::kBytes, std::move(ranges), {});
}

ExprPtr Byte(uint8_t b) { return Bytes({{b, b}}); }

ExprPtr Literal(std::string_view bytes) {
  if (bytes.empty()) return Empty();
  if (bytes.size() == 1) return Byte(static_cast<uint8_t>(bytes[0]));
  std::vector<ExprPtr> parts;
  parts.reserve(bytes.size());
  for (char c : bytes) parts.push_back(Byte(static_cast<uint8_t>(c)));
  return Make(ExprKind::kSeq, {}, std::move(parts));
}

ExprPtr Seq(std::vector<ExprPtr> parts) {
  std::vector<ExprPtr> kept;
  kept.reserve(parts.size());
  for (ExprPtr& p : parts) {
    if (IsNothing(p)) return Nothing();
    if (p->kind == ExprKind::kEmpty) continue;
    if (p->kind == ExprKind::kSeq) {
      kept.insert(kept.end(), p->children.begin(), p->children.end());
    } else {
      kept.push_back(std::move(p));
    }
  }
  if (kept.empty()) return Empty();
  if (kept.size() == 1) return kept[0];
  return Make(ExprKind::kSeq, {}, std::move(kept));
}

ExprPtr Alt(std::vector<ExprPtr> options) {
  std::vector<ExprPtr> kept;
  kept.reserve(options.size());
  for (ExprPtr& o : options) {
    if (IsNothing(o)) continue;
    if (o->kind == ExprKind::kAlt) {
      kept.insert(kept.end(), o->children.begin(), o->children.end());
    } else {
      kept.push_back(std::move(o));
    }
  }
  if (kept.empty()) return Nothing();
  if (kept.size() == 1) return kept[0];
  return Make(ExprKind::kAlt, {}, std::move(kept));
}

ExprPtr Optional(ExprPtr e) { return Alt({Empty(), std::move(e)}); }

ExprPtr Repeat(ExprPtr item, int32_t min, int32_t max) {
  if (max != kUnbounded && max < min) return Nothing();
  if (IsNothing(item)) return min == 0 ? Empty() : Nothing();
  if (item->kind == ExprKind::kEmpty || max == 0) return Empty();
  if (min == 1 && max == 1) return item;
  return Make(ExprKind::kRepeat, {}, {std::move(item)}, min, max);
}

ExprPtr SeparatedList(ExprPtr item, ExprPtr separator, int32_t min, int32_t max) {
  if (max != kUnbounded && max < min) return Nothing();
  if (max == 0) return Empty();
  if (IsNothing(item)) return min == 0 ? Empty() : Nothing();
  if (IsNothing(separator)) {
    // At most one item can be written.
    if (min > 1) return Nothing();
    return min == 0 ? Optional(std::move(item)) : item;
  }
  return Make(ExprKind::kRepeat, {}, {std::move(item), std::move(separator)}, min, max);
}

}  // namespace pier::grammar
