// Jinja parser: tokens -> syntax tree, following Jinja2's grammar and operator precedence.
//
// Supported tags: if/elif/else, for (with `if` filter, else, loop.*), set (names, tuple
// unpacking, `ns.attr`, block set), macro, filter, break/continue (loopcontrols), raw (in the
// lexer), generation (transformers' extension). Anything else, and any filter, test or method
// name the engine does not implement, is rejected here with UNSUPPORTED naming the construct
// and its line:column, so a template never renders silently wrong; as in Jinja2, a filter or
// test inside an `if` or inline-if only fails when reached at render time. Syntax errors are
// INVALID_ARGUMENT. Nesting deeper than kMaxParseDepth is refused (hostile templates).
// Stateless; thread-safe.
#pragma once

#include <string_view>

#include "common/status.h"
#include "tokenizer/jinja/ast.h"

namespace pier::tokenizer::jinja {

inline constexpr int kMaxParseDepth = 200;

Result<TemplateAst> ParseTemplate(std::string_view source);

}  // namespace pier::tokenizer::jinja
