// Jinja syntax tree: expressions and statements produced by the parser, walked by the renderer.
//
// Nodes are plain tagged structs owned through unique_ptr by their parent; a parsed
// template owns the whole tree. Immutable after parsing, so one tree may be rendered by
// any number of threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pier::tokenizer::jinja {

enum class ExprKind : uint8_t {
  kLiteral,    // literal
  kName,       // name
  kList,       // [args...]
  kTuple,      // (args...)
  kDict,       // {args[0]: args[1], ...} (keys and values interleaved)
  kGetAttr,    // args[0].name
  kGetItem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (missing parts are null)
  kCall,       // args[0](args[1...], kwargs)
  kFilter,     // args[0] | name(args[1...], kwargs)
  kTest,       // args[0] is [not] name(args[1...], kwargs)
  kNot,        // not args[0]
  kNeg,        // -args[0]
  kPos,        // +args[0]
  kBinary,     // args[0] op args[1], op in + - * / // % ** ~
  kAnd,        // args[0] and args[1]
  kOr,         // args[0] or args[1]
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ... (chained, as Python)
  kCondition,  // args[1] if args[0] else args[2] (args[2] may be null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  std::string name;              // name / attribute / filter / test / binary operator
  std::vector<std::string> ops;  // compare operators: == != < <= > >= in notin
  bool negated = false;          // `is not`
  Value literal;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind : uint8_t {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (condition, body)...; else_body
  kFor,       // for targets in expr [if condition]: body; else_body
  kSet,       // set targets = expr  |  set targets[0].attribute = expr
  kSetBlock,  // set targets[0] %}body{% endset (optional filter in `filter`)
  kMacro,     // macro name(params = defaults): body
  kBreak,
  kContinue,
  kFilterBlock,  // filter expr-chain: body (`filter` is a kFilter chain applied to the body)
  kGeneration,   // generation: body (transformers' assistant-mask tag; renders its body)
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  int column = 0;
  std::string text;                  // kText; kMacro: the macro name
  std::vector<std::string> targets;  // loop / set variable names
  std::string attribute;             // kSet: `ns.attribute` target
  std::unique_ptr<Expr> expr;        // output / iterable / assigned value
  std::unique_ptr<Expr> condition;   // kFor: `if` filter
  std::unique_ptr<Expr> filter;      // kSetBlock / kFilterBlock: filter chain, input is a kLiteral
  std::vector<std::pair<std::unique_ptr<Expr>, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<std::string> params;              // kMacro
  std::vector<std::unique_ptr<Expr>> defaults;  // kMacro: same length as params, null = none
};

struct TemplateAst {
  Body body;
};

}  // namespace pier::tokenizer::jinja
