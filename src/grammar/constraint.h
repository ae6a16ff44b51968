// ConstraintExpr: an OutputConstraint's language; GrammarCache: the compiled Grammar of each
// constraint a model has seen, so the schema of a request's hundredth twin costs a lookup.
//
// The HTTP layer calls ConstraintExpr to refuse a bad schema with 400 before anything is
// queued; the engine compiles it again against its vocabulary (GrammarCache::Get) and keeps
// every mask it has computed.
//
// Thread-safety: ConstraintExpr is a free function. A GrammarCache and the Grammars it hands out
// belong to the engine thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/status.h"
#include "grammar/expr.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/output_constraint.h"
#include "grammar/token_vocabulary.h"

namespace pier::grammar {

// Largest schema text accepted, in bytes.
inline constexpr size_t kMaxSchemaBytes = 64 * 1024;

// The constraint's language; INVALID_ARGUMENT (what is wrong and where) for a schema that is
// not JSON, too large, or uses what Pier cannot enforce. kNone is an error.
[[nodiscard]] Result<ExprPtr> ConstraintExpr(const OutputConstraint& constraint,
                                             const JsonSchemaOptions& options = {});

// Whether the constraint can be enforced, without a vocabulary: its language compiles within
// the NFA limit. INVALID_ARGUMENT naming what is wrong (a too-large constraint included, since
// the request is what has to change). The check a caller runs before queueing.
[[nodiscard]] Status CheckConstraint(const OutputConstraint& constraint,
                                     const JsonSchemaOptions& options = {});

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity = 32,
               GrammarLimits limits = {});

  // The compiled grammar of `constraint`, compiled on first use; the constraint's errors.
  [[nodiscard]] Result<std::shared_ptr<Grammar>> Get(const OutputConstraint& constraint);

  size_t size() const { return by_key_.size(); }
  int64_t compiles() const { return compiles_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<Grammar>>;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t capacity_;
  GrammarLimits limits_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
  int64_t compiles_ = 0;
};

}  // namespace pier::grammar
