// PatternContent: a JSON Schema `pattern` (an ECMA-262 regular expression) as the Expr of a
// JSON string's content, characters written as JSON writes them (json_lexical.h).
//
// The common subset: literals, `.`, classes `[a-z]` and `[^...]`, `\d \w \s` and their
// negations, escapes (`\n`, `\xHH`, `\uHHHH`, escaped punctuation), groups `(...)`, `(?:...)`
// and `(?<name>...)`, alternation, and the quantifiers `* + ? {n} {n,} {n,m}` (lazy forms
// match the same strings). As in JSON Schema a pattern is unanchored: without a leading `^`
// (or trailing `$`) any characters may come before (or after) it. Lookarounds,
// backreferences, word boundaries, `\p{...}` and anchors inside the pattern are refused with
// INVALID_ARGUMENT naming them, never matched loosely.
//
// Thread-safety: a free function.
#pragma once

#include <string_view>

#include "common/status.h"
#include "grammar/expr.h"

namespace pier::grammar {

inline constexpr int32_t kMaxPatternRepeat = 1000;

[[nodiscard]] Result<ExprPtr> PatternContent(std::string_view pattern);

}  // namespace pier::grammar
