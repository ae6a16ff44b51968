// Jinja template validation: rejects, at load time, the filters, tests and methods Pier's
// engine does not implement, naming the construct and its line:column (UNSUPPORTED).
//
// As Jinja2's compiler does, a name used inside an `if` (its test and branches) or an inline
// if-expression is only an error when reached at render time, since templates guard optional
// features that way; `for`, macro and block bodies start a strict frame again.
// Stateless; thread-safe.
#pragma once

#include "common/status.h"
#include "tokenizer/jinja/ast.h"

namespace pier::tokenizer::jinja {

Status ValidateTemplate(const TemplateAst& ast);

}  // namespace pier::tokenizer::jinja
