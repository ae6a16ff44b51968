// Jinja's arithmetic, concatenation and membership operators with Python semantics.
//
// Integers are 64-bit: results that would need a bigint are INVALID_ARGUMENT instead of
// silently wrapping. `//` and `%` floor like Python; `/` always gives a float; `+` joins
// strings and lists; `*` repeats them (bounded by max_bytes, RESOURCE_EXHAUSTED beyond).
// Undefined operands fail with their undefined message, except for `~`, which prints them
// as "". Stateless; thread-safe.
#pragma once

#include <string_view>

#include "common/status.h"
#include "tokenizer/jinja/value.h"

namespace pier::tokenizer::jinja {

// op: one of + - * / // % ** ~
Result<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, size_t max_bytes);

// Unary minus / plus.
Result<Value> Negate(const Value& a, bool minus);

// Python `needle in haystack`.
Result<bool> Contains(const Value& haystack, const Value& needle);

// The error for using an undefined value (its recorded message).
Status UndefinedError(const Value& undefined);

}  // namespace pier::tokenizer::jinja
