#include "grammar/constraint.h"

#include <string>

#include "grammar/nfa.h"

namespace pier::grammar {

namespace {

// The JSON value's language, without the prefix and suffix.
Result<ExprPtr> ValueExpr(const OutputConstraint& constraint, const JsonSchemaOptions& options) {
  switch (constraint.kind) {
    case OutputConstraint::Kind::kNone:
      return InvalidArgumentError("no constraint");
    case OutputConstraint::Kind::kJsonObject:
      return AnyJsonObject(options.max_free_depth);
    case OutputConstraint::Kind::kJsonSchema: {
      if (constraint.schema.size() > kMaxSchemaBytes) {
        return InvalidArgumentError("the schema is " + std::to_string(constraint.schema.size()) +
                                    " bytes; at most " + std::to_string(kMaxSchemaBytes) +
                                    " are accepted");
      }
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(constraint.schema);
      } catch (const nlohmann::ordered_json::exception& e) {
        return InvalidArgumentError(std::string("the schema is not valid JSON: ") + e.what());
      }
      return JsonSchemaExpr(schema, options);
    }
  }
  return InvalidArgumentError("unknown constraint kind");
}

}  // namespace

Result<ExprPtr> ConstraintExpr(const OutputConstraint& constraint,
                               const JsonSchemaOptions& options) {
  PIER_ASSIGN_OR_RETURN(ExprPtr value, ValueExpr(constraint, options));
  if (constraint.prefix.empty() && constraint.suffix.empty()) return value;
  return Seq({Literal(constraint.prefix), std::move(value), Literal(constraint.suffix)});
}

Status CheckConstraint(const OutputConstraint& constraint, const JsonSchemaOptions& options) {
  PIER_ASSIGN_OR_RETURN(ExprPtr expr, ConstraintExpr(constraint, options));
  Result<Nfa> nfa = CompileNfa(*expr);
  if (!nfa.ok()) return InvalidArgumentError(nfa.status().message());
  return Status::Ok();
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity,
                           GrammarLimits limits)
    : vocabulary_(std::move(vocabulary)),
      capacity_(std::max<size_t>(capacity, 1)),
      limits_(limits) {}

Result<std::shared_ptr<Grammar>> GrammarCache::Get(const OutputConstraint& constraint) {
  // Lengths first, so no two constraints share a key.
  std::string key = std::to_string(static_cast<int>(constraint.kind)) + ":" +
                    std::to_string(constraint.prefix.size()) + ":" +
                    std::to_string(constraint.suffix.size()) + ":" + constraint.prefix +
                    constraint.suffix + constraint.schema;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  PIER_ASSIGN_OR_RETURN(ExprPtr expr, ConstraintExpr(constraint));
  PIER_ASSIGN_OR_RETURN(std::shared_ptr<Grammar> grammar,
                        Grammar::Create(*expr, vocabulary_, limits_));
  ++compiles_;
  lru_.emplace_front(key, grammar);
  by_key_[std::move(key)] = lru_.begin();
  if (lru_.size() > capacity_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return grammar;
}

}  // namespace pier::grammar
