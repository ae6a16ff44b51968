#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/validate.h"

namespace pier::tokenizer::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<TemplateAst> Run() {
    TemplateAst ast;
    std::string end_tag;
    PIER_RETURN_IF_ERROR(ParseBody({}, &ast.body, &end_tag));
    return ast;
  }

 private:
  // ---- token helpers ----
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const {
    return Cur().kind == TokenKind::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kData:
        return "template data";
      case TokenKind::kVariableBegin:
        return "'{{'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kName:
        return "'" + t.text + "'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInteger:
        return "integer";
      case TokenKind::kFloat:
        return "float";
      case TokenKind::kOperator:
        return "'" + t.text + "'";
      case TokenKind::kEof:
        return "end of template";
    }
    return "token";
  }

  Status ErrorAt(const Token& t, const std::string& message) const {
    return InvalidArgumentError("chat template syntax error at " + std::to_string(t.line) + ":" +
                                std::to_string(t.column) + ": " + message);
  }
  Status UnsupportedAt(const Token& t, const std::string& what) const {
    return UnsupportedError("chat template uses " + what + " at " + std::to_string(t.line) + ":" +
                            std::to_string(t.column) +
                            ", which Pier's template engine does not support");
  }
  Status Expect(TokenKind kind, std::string_view what) {
    if (Cur().kind != kind)
      return ErrorAt(Cur(), "expected " + std::string(what) + ", got " + Describe(Cur()));
    Next();
    return Status::Ok();
  }
  Status ExpectOp(std::string_view op) {
    if (!IsOp(op))
      return ErrorAt(Cur(), "expected '" + std::string(op) + "', got " + Describe(Cur()));
    Next();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName)
      return ErrorAt(Cur(), "expected a name, got " + Describe(Cur()));
    std::string name = Cur().text;
    Next();
    return name;
  }

  ExprPtr NewExpr(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  std::unique_ptr<Stmt> NewStmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Guards recursion against hostile nesting.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };
  Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) return ErrorAt(Cur(), "template nested too deeply");
    return Status::Ok();
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>`; leaves the stream at that name and reports it.
  Status ParseBody(std::initializer_list<std::string_view> end_tags, Body* body,
                   std::string* end_tag) {
    DepthGuard guard(&depth_);
    PIER_RETURN_IF_ERROR(CheckDepth());
    while (true) {
      const Token& t = Cur();
      switch (t.kind) {
        case TokenKind::kEof:
          if (end_tags.size() != 0) {
            return ErrorAt(
                t, "unexpected end of template, expected '" + std::string(*end_tags.begin()) + "'");
          }
          return Status::Ok();
        case TokenKind::kData: {
          auto s = NewStmt(StmtKind::kText, t);
          s->text = t.text;
          body->push_back(std::move(s));
          Next();
          break;
        }
        case TokenKind::kVariableBegin: {
          auto s = NewStmt(StmtKind::kOutput, t);
          Next();
          PIER_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
          PIER_RETURN_IF_ERROR(Expect(TokenKind::kVariableEnd, "'}}'"));
          body->push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = Peek();
          if (name.kind == TokenKind::kName) {
            for (std::string_view end : end_tags) {
              if (name.text == end) {
                Next();
                *end_tag = name.text;
                return Status::Ok();
              }
            }
          }
          Next();
          PIER_RETURN_IF_ERROR(ParseStatement(body));
          break;
        }
        default:
          return ErrorAt(t, "unexpected " + Describe(t));
      }
    }
  }

  // After `{% endx`: consumes the name and `%}`.
  Status FinishEndTag() {
    Next();
    return Expect(TokenKind::kBlockEnd, "'%}'");
  }

  Status ParseStatement(Body* body) {
    const Token& t = Cur();
    if (t.kind != TokenKind::kName) return ErrorAt(t, "expected a tag name, got " + Describe(t));
    const std::string tag = t.text;
    if (tag == "if") return ParseIf(body);
    if (tag == "for") return ParseFor(body);
    if (tag == "set") return ParseSet(body);
    if (tag == "macro") return ParseMacro(body);
    if (tag == "filter") return ParseFilterBlock(body);
    if (tag == "generation") {
      auto s = NewStmt(StmtKind::kGeneration, t);
      Next();
      PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
      std::string end;
      PIER_RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->body, &end));
      PIER_RETURN_IF_ERROR(FinishEndTag());
      body->push_back(std::move(s));
      return Status::Ok();
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return ErrorAt(t, "'" + tag + "' outside of a loop");
      body->push_back(NewStmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t));
      Next();
      return Expect(TokenKind::kBlockEnd, "'%}'");
    }
    if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      return ErrorAt(t, "unexpected '" + tag + "' tag");
    }
    return UnsupportedAt(t, "the tag '" + tag + "'");
  }

  Status ParseIf(Body* body) {
    auto s = NewStmt(StmtKind::kIf, Cur());
    Next();  // if
    while (true) {
      PIER_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(true));
      PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
      Body branch;
      std::string end;
      PIER_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &branch, &end));
      s->branches.emplace_back(std::move(cond), std::move(branch));
      if (end == "elif") {
        Next();
        continue;
      }
      if (end == "else") {
        Next();
        PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
        PIER_RETURN_IF_ERROR(ParseBody({"endif"}, &s->else_body, &end));
      }
      PIER_RETURN_IF_ERROR(FinishEndTag());
      break;
    }
    body->push_back(std::move(s));
    return Status::Ok();
  }

  Status ParseTargets(std::vector<std::string>* targets) {
    bool paren = SkipOp("(");
    while (true) {
      PIER_ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets->push_back(std::move(name));
      if (!SkipOp(",")) break;
      if (Cur().kind != TokenKind::kName) break;  // trailing comma
    }
    if (paren) PIER_RETURN_IF_ERROR(ExpectOp(")"));
    return Status::Ok();
  }

  Status ParseFor(Body* body) {
    auto s = NewStmt(StmtKind::kFor, Cur());
    Next();  // for
    PIER_RETURN_IF_ERROR(ParseTargets(&s->targets));
    if (!SkipName("in")) return ErrorAt(Cur(), "expected 'in', got " + Describe(Cur()));
    PIER_ASSIGN_OR_RETURN(s->expr, ParseTuple(false));
    if (SkipName("if")) {
      PIER_ASSIGN_OR_RETURN(s->condition, ParseExpression(true));
    }
    if (IsName("recursive")) return UnsupportedAt(Cur(), "recursive for loops");
    PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
    std::string end;
    ++loop_depth_;
    Status st = ParseBody({"endfor", "else"}, &s->body, &end);
    --loop_depth_;
    PIER_RETURN_IF_ERROR(st);
    if (end == "else") {
      Next();
      PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
      PIER_RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
    }
    PIER_RETURN_IF_ERROR(FinishEndTag());
    body->push_back(std::move(s));
    return Status::Ok();
  }

  Status ParseSet(Body* body) {
    const Token& at = Cur();
    Next();  // set
    std::vector<std::string> targets;
    std::string attribute;
    PIER_RETURN_IF_ERROR(ParseTargets(&targets));
    if (targets.size() == 1 && IsOp(".")) {
      Next();
      PIER_ASSIGN_OR_RETURN(attribute, ExpectName());
    }
    if (SkipOp("=")) {
      auto s = NewStmt(StmtKind::kSet, at);
      s->targets = std::move(targets);
      s->attribute = std::move(attribute);
      PIER_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
      PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
      body->push_back(std::move(s));
      return Status::Ok();
    }
    if (targets.size() != 1 || !attribute.empty()) {
      return ErrorAt(Cur(), "expected '=' in set");
    }
    auto s = NewStmt(StmtKind::kSetBlock, at);
    s->targets = std::move(targets);
    if (IsOp("|")) {
      PIER_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(NewExpr(ExprKind::kLiteral, Cur())));
    }
    PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
    std::string end;
    PIER_RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
    PIER_RETURN_IF_ERROR(FinishEndTag());
    body->push_back(std::move(s));
    return Status::Ok();
  }

  Status ParseMacro(Body* body) {
    auto s = NewStmt(StmtKind::kMacro, Cur());
    Next();  // macro
    PIER_ASSIGN_OR_RETURN(s->text, ExpectName());
    PIER_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!s->params.empty()) PIER_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      PIER_ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr dflt;
      if (SkipOp("=")) {
        PIER_ASSIGN_OR_RETURN(dflt, ParseExpression(true));
      } else if (!s->defaults.empty() && s->defaults.back() != nullptr) {
        return ErrorAt(Cur(), "non-default argument follows default argument");
      }
      s->params.push_back(std::move(param));
      s->defaults.push_back(std::move(dflt));
    }
    Next();  // )
    PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
    std::string end;
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    Status st = ParseBody({"endmacro"}, &s->body, &end);
    loop_depth_ = saved_loop_depth;
    PIER_RETURN_IF_ERROR(st);
    PIER_RETURN_IF_ERROR(FinishEndTag());
    body->push_back(std::move(s));
    return Status::Ok();
  }

  Status ParseFilterBlock(Body* body) {
    auto s = NewStmt(StmtKind::kFilterBlock, Cur());
    Next();  // filter
    PIER_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(NewExpr(ExprKind::kLiteral, Cur()), true));
    PIER_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "'%}'"));
    std::string end;
    PIER_RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->body, &end));
    PIER_RETURN_IF_ERROR(FinishEndTag());
    body->push_back(std::move(s));
    return Status::Ok();
  }

  // ---- expressions ----

  // Expression, or a tuple when commas follow (`{{ a, b }}`, `set x = 1, 2`).
  Result<ExprPtr> ParseTuple(bool with_condexpr) {
    const Token& at = Cur();
    PIER_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    auto tuple = NewExpr(ExprKind::kTuple, at);
    tuple->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().kind == TokenKind::kVariableEnd || Cur().kind == TokenKind::kBlockEnd ||
          IsName("if")) {
        break;
      }
      PIER_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      tuple->args.push_back(std::move(item));
    }
    return tuple;
  }

  Result<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(&depth_);
    PIER_RETURN_IF_ERROR(CheckDepth());
    if (!with_condexpr) return ParseOr();
    const Token& at = Cur();
    PIER_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (SkipName("if")) {
      auto cond = NewExpr(ExprKind::kCondition, at);
      PIER_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        PIER_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> ParseOr() {
    PIER_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      auto e = NewExpr(ExprKind::kOr, Cur());
      Next();
      PIER_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    PIER_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      auto e = NewExpr(ExprKind::kAnd, Cur());
      Next();
      PIER_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      PIER_RETURN_IF_ERROR(CheckDepth());
      auto e = NewExpr(ExprKind::kNot, Cur());
      Next();
      PIER_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    const Token& at = Cur();
    PIER_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == TokenKind::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(ExprKind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      PIER_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(operand));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  // One precedence level of left-associative binary operators.
  template <typename Sub>
  Result<ExprPtr> ParseBinary(std::initializer_list<std::string_view> ops, Sub sub) {
    PIER_ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
    while (Cur().kind == TokenKind::kOperator) {
      bool match = false;
      for (std::string_view op : ops) match = match || Cur().text == op;
      if (!match) break;
      auto e = NewExpr(ExprKind::kBinary, Cur());
      e->name = Cur().text;
      Next();
      PIER_ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }
  Result<ExprPtr> ParseMath1() { return ParseBinary({"+", "-"}, &Parser::ParseConcat); }
  Result<ExprPtr> ParseConcat() { return ParseBinary({"~"}, &Parser::ParseMath2); }
  Result<ExprPtr> ParseMath2() { return ParseBinary({"*", "/", "//", "%"}, &Parser::ParsePow); }
  Result<ExprPtr> ParsePow() { return ParseBinary({"**"}, &Parser::ParseUnaryWithFilter); }
  Result<ExprPtr> ParseUnaryWithFilter() { return ParseUnary(true); }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    PIER_RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = NewExpr(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Cur());
      Next();
      PIER_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      PIER_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    PIER_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      while (true) {
        if (IsOp("|")) {
          PIER_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node)));
        } else if (IsName("is")) {
          PIER_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
        } else if (IsOp("(")) {
          PIER_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
        } else {
          break;
        }
      }
    }
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    switch (t.kind) {
      case TokenKind::kName: {
        auto e = NewExpr(ExprKind::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        Next();
        return e;
      }
      case TokenKind::kString: {
        auto e = NewExpr(ExprKind::kLiteral, t);
        std::string text;
        while (Cur().kind == TokenKind::kString) {
          text += Cur().text;
          Next();
        }
        e->literal = Value::String(std::move(text));
        return e;
      }
      case TokenKind::kInteger: {
        auto e = NewExpr(ExprKind::kLiteral, t);
        e->literal = Value::Int(t.int_value);
        Next();
        return e;
      }
      case TokenKind::kFloat: {
        auto e = NewExpr(ExprKind::kLiteral, t);
        e->literal = Value::Float(t.float_value);
        Next();
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") return ParseParenthesized();
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return ErrorAt(t, "unexpected " + Describe(t));
  }

  Result<ExprPtr> ParseParenthesized() {
    const Token& at = Cur();
    Next();  // (
    if (SkipOp(")")) return NewExpr(ExprKind::kTuple, at);
    PIER_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(true));
    if (SkipOp(")")) return first;
    auto tuple = NewExpr(ExprKind::kTuple, at);
    tuple->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (IsOp(")")) break;
      PIER_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      tuple->args.push_back(std::move(item));
    }
    PIER_RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }

  Result<ExprPtr> ParseList() {
    auto list = NewExpr(ExprKind::kList, Cur());
    Next();  // [
    while (!IsOp("]")) {
      if (!list->args.empty()) PIER_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      PIER_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      list->args.push_back(std::move(item));
    }
    Next();  // ]
    return list;
  }

  Result<ExprPtr> ParseDict() {
    auto dict = NewExpr(ExprKind::kDict, Cur());
    Next();  // {
    while (!IsOp("}")) {
      if (!dict->args.empty()) PIER_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      PIER_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      PIER_RETURN_IF_ERROR(ExpectOp(":"));
      PIER_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      dict->args.push_back(std::move(key));
      dict->args.push_back(std::move(value));
    }
    Next();  // }
    return dict;
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const Token& at = Cur();
        Next();
        if (Cur().kind == TokenKind::kName) {
          auto e = NewExpr(ExprKind::kGetAttr, at);
          e->name = Cur().text;
          e->args.push_back(std::move(node));
          node = std::move(e);
          Next();
        } else if (Cur().kind == TokenKind::kInteger) {
          auto e = NewExpr(ExprKind::kGetItem, at);
          auto index = NewExpr(ExprKind::kLiteral, Cur());
          index->literal = Value::Int(Cur().int_value);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(index));
          node = std::move(e);
          Next();
        } else {
          return ErrorAt(Cur(), "expected an attribute name after '.'");
        }
      } else if (IsOp("[")) {
        PIER_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        PIER_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr node) {
    const Token& at = Cur();
    Next();  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++colons > 2) return ErrorAt(Cur(), "too many ':' in slice");
        Next();
        continue;
      }
      if (parts[colons]) return ErrorAt(Cur(), "expected ']' or ':' in subscript");
      PIER_ASSIGN_OR_RETURN(parts[colons], ParseExpression(true));
    }
    Next();  // ]
    if (colons == 0) {
      if (!parts[0]) return ErrorAt(at, "empty subscript");
      auto e = NewExpr(ExprKind::kGetItem, at);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = NewExpr(ExprKind::kSlice, at);
    e->args.push_back(std::move(node));
    for (auto& part : parts) e->args.push_back(std::move(part));
    return e;
  }

  Status ParseCallArgs(Expr* call) {
    PIER_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) PIER_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return UnsupportedAt(Cur(), "*args / **kwargs in a call");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
          Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        PIER_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty())
          return ErrorAt(Cur(), "positional argument follows keyword argument");
        PIER_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->args.push_back(std::move(value));
      }
    }
    Next();  // )
    return Status::Ok();
  }

  Result<ExprPtr> ParseCall(ExprPtr callee) {
    const Token& at = Cur();
    auto call = NewExpr(ExprKind::kCall, at);
    call->args.push_back(std::move(callee));
    PIER_RETURN_IF_ERROR(ParseCallArgs(call.get()));
    return call;
  }

  // `| name(args) | name ...` applied to `node`. `start_inline`: the first '|' is implied.
  Result<ExprPtr> ParseFilterChain(ExprPtr node, bool start_inline = false) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const Token& at = Cur();
      PIER_ASSIGN_OR_RETURN(std::string name, ExpectName());
      auto e = NewExpr(ExprKind::kFilter, at);
      e->name = name;
      e->args.push_back(std::move(node));
      if (IsOp("(")) PIER_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      node = std::move(e);
    }
    return node;
  }

  Result<ExprPtr> ParseTest(ExprPtr node) {
    Next();  // is
    auto e = NewExpr(ExprKind::kTest, Cur());
    e->negated = SkipName("not");
    const Token& at = Cur();
    PIER_ASSIGN_OR_RETURN(e->name, ExpectName());
    e->line = at.line;
    e->column = at.column;
    e->args.push_back(std::move(node));
    if (IsOp("(")) {
      PIER_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    } else if ((Cur().kind == TokenKind::kName || Cur().kind == TokenKind::kString ||
                Cur().kind == TokenKind::kInteger || Cur().kind == TokenKind::kFloat || IsOp("(") ||
                IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return ErrorAt(Cur(), "you cannot chain multiple tests with 'is'");
      PIER_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      PIER_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<TemplateAst> ParseTemplate(std::string_view source) {
  PIER_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  Parser parser(std::move(tokens));
  PIER_ASSIGN_OR_RETURN(TemplateAst ast, parser.Run());
  PIER_RETURN_IF_ERROR(ValidateTemplate(ast));
  return ast;
}

}  // namespace pier::tokenizer::jinja
