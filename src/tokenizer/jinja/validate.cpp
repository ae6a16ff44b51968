#include "tokenizer/jinja/validate.h"

#include <string>

#include "tokenizer/jinja/builtins.h"

namespace pier::tokenizer::jinja {
namespace {

Status UnsupportedAtNode(const Expr& e, const std::string& what) {
  return UnsupportedError("chat template uses " + what + " at " + std::to_string(e.line) + ":" +
                          std::to_string(e.column) +
                          ", which Pier's template engine does not support");
}

Status ValidateExpr(const Expr& e, bool soft) {
  if (e.kind == ExprKind::kCondition) soft = true;
  if (!soft) {
    if (e.kind == ExprKind::kFilter && !IsKnownFilter(e.name)) {
      return UnsupportedAtNode(e, "the filter '" + e.name + "'");
    }
    if (e.kind == ExprKind::kTest && !IsKnownTest(e.name)) {
      return UnsupportedAtNode(e, "the test '" + e.name + "'");
    }
    if (e.kind == ExprKind::kCall && e.args[0]->kind == ExprKind::kGetAttr &&
        !IsKnownMethod(e.args[0]->name)) {
      return UnsupportedAtNode(e, "the method '" + e.args[0]->name + "()'");
    }
  }
  for (const auto& arg : e.args) {
    if (arg) PIER_RETURN_IF_ERROR(ValidateExpr(*arg, soft));
  }
  for (const auto& kwarg : e.kwargs) PIER_RETURN_IF_ERROR(ValidateExpr(*kwarg.second, soft));
  return Status::Ok();
}

Status ValidateBody(const Body& body, bool soft) {
  for (const auto& stmt : body) {
    const Stmt& s = *stmt;
    if (s.expr) PIER_RETURN_IF_ERROR(ValidateExpr(*s.expr, soft));
    if (s.filter) PIER_RETURN_IF_ERROR(ValidateExpr(*s.filter, false));
    switch (s.kind) {
      case StmtKind::kIf:
        for (const auto& [cond, branch] : s.branches) {
          PIER_RETURN_IF_ERROR(ValidateExpr(*cond, true));
          PIER_RETURN_IF_ERROR(ValidateBody(branch, true));
        }
        PIER_RETURN_IF_ERROR(ValidateBody(s.else_body, true));
        break;
      case StmtKind::kFor:
        if (s.condition) PIER_RETURN_IF_ERROR(ValidateExpr(*s.condition, false));
        PIER_RETURN_IF_ERROR(ValidateBody(s.body, false));
        PIER_RETURN_IF_ERROR(ValidateBody(s.else_body, soft));
        break;
      case StmtKind::kMacro:
        for (const auto& d : s.defaults) {
          if (d) PIER_RETURN_IF_ERROR(ValidateExpr(*d, false));
        }
        PIER_RETURN_IF_ERROR(ValidateBody(s.body, false));
        break;
      default:
        PIER_RETURN_IF_ERROR(ValidateBody(s.body, false));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTemplate(const TemplateAst& ast) { return ValidateBody(ast.body, false); }

}  // namespace pier::tokenizer::jinja
