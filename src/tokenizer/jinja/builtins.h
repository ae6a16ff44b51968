// Jinja built-ins: filters, tests, attribute/item access and Python methods on values.
//
// Each behaves as in Jinja2 3.1 inside transformers' ImmutableSandboxedEnvironment:
// `x.name` prefers a Python attribute (a bound method such as str.strip or dict.items) and
// falls back to a dict key; mutating methods (list.append, dict.update, ...) exist but fail
// when called, as the immutable sandbox makes them; missing keys, indices and attributes are
// undefined values carrying the message Jinja would raise when they are used. Errors are
// INVALID_ARGUMENT with a Python-like message; the renderer adds the template location.
// Stateless free functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/jinja/value.h"

namespace pier::tokenizer::jinja {

// Names the parser accepts (anything else is rejected at load time).
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownMethod(std::string_view name);

Result<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
Result<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

// `obj.name` (obj is not undefined: the caller raises for that).
Value GetAttribute(const Value& obj, const std::string& name);
// `obj[key]` (obj is not undefined). Out-of-range / missing -> undefined, as in Jinja.
Value GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]`; each bound may be none/undefined. Lists and strings only.
Result<Value> GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Calls method `name` on `obj` (a bound method obtained from GetAttribute).
Result<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args);

// The items a `for` loop or a filter iterates: list items, dict keys, string code points.
// Undefined iterates as empty. INVALID_ARGUMENT for non-iterables.
Result<std::vector<Value>> Iterate(const Value& value);

// Binds call arguments to named parameters like Python does: result[i] is the argument for
// params[i], or null when not given. INVALID_ARGUMENT for surplus or unknown arguments.
Result<std::vector<const Value*>> BindArgs(std::string_view function, const CallArgs& args,
                                           const std::vector<std::string_view>& params);

}  // namespace pier::tokenizer::jinja
