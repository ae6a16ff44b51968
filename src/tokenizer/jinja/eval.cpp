#include "tokenizer/jinja/eval.h"

#include <chrono>
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/operators.h"

namespace pier::tokenizer::jinja {
namespace {

// Jinja's sandbox refuses larger ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const RenderOptions& options) : options_(options) {}

  Result<std::string> Run(const TemplateAst& ast, const DictData& context) {
    auto globals = std::make_shared<Scope>();
    InstallGlobals(globals.get());
    auto root = std::make_shared<Scope>();
    root->parent = globals;
    for (const auto& [key, value] : context.entries()) root->vars[key] = value;
    std::string out;
    Flow flow = Flow::kNormal;
    PIER_RETURN_IF_ERROR(ExecBody(ast.body, root, &out, &flow));
    return out;
  }

  bool raised() const { return raised_; }

 private:
  // ---- errors and budgets ----

  Status At(const Status& status, int line, int column) {
    if (status.ok() || located_ || raised_) return status;
    located_ = true;
    return Status(status.code(), "chat template error at " + std::to_string(line) + ":" +
                                     std::to_string(column) + ": " + status.message());
  }
  template <typename Node>
  Status At(const Status& status, const Node& node) {
    return At(status, node.line, node.column);
  }

  Status ChargeWork(const Value& v) {
    if (v.is_string()) work_bytes_ += v.string_value().size();
    if (v.is_list()) work_bytes_ += v.list().items.size() * sizeof(Value);
    if (work_bytes_ > options_.limits.max_work_bytes) {
      return ResourceExhaustedError("chat template exceeded its work limit (" +
                                    std::to_string(options_.limits.max_work_bytes) +
                                    " bytes of intermediate strings)");
    }
    return Status::Ok();
  }

  Status Append(std::string_view text, std::string* out) {
    output_bytes_ += text.size();
    if (output_bytes_ > options_.limits.max_output_bytes) {
      return ResourceExhaustedError("chat template output exceeds " +
                                    std::to_string(options_.limits.max_output_bytes) + " bytes");
    }
    out->append(text);
    return Status::Ok();
  }

  Status CountIteration() {
    if (++iterations_ > options_.limits.max_loop_iterations) {
      return ResourceExhaustedError("chat template exceeded " +
                                    std::to_string(options_.limits.max_loop_iterations) +
                                    " loop iterations");
    }
    return Status::Ok();
  }

  // ---- globals ----

  void InstallGlobals(Scope* globals) {
    globals->vars["raise_exception"] =
        Value::Function("raise_exception", [this](CallArgs&& args) -> Result<Value> {
          raised_ = true;
          std::string message = args.positional.empty() ? "" : ToStr(args.positional[0]);
          return InvalidArgumentError(message);
        });
    globals->vars["strftime_now"] =
        Value::Function("strftime_now", [this](CallArgs&& args) -> Result<Value> {
          if (args.positional.size() != 1 || !args.positional[0].is_string()) {
            return InvalidArgumentError("strftime_now() takes one format string");
          }
          return StrftimeNow(args.positional[0].string_value());
        });
    globals->vars["range"] = Value::Function("range", [](CallArgs&& args) { return Range(args); });
    globals->vars["namespace"] = Value::Function("namespace", [](CallArgs&& args) -> Result<Value> {
      PIER_ASSIGN_OR_RETURN(DictData attrs, DictFromArgs("namespace", args));
      return Value::Namespace(std::move(attrs));
    });
    globals->vars["dict"] = Value::Function("dict", [](CallArgs&& args) -> Result<Value> {
      PIER_ASSIGN_OR_RETURN(DictData d, DictFromArgs("dict", args));
      return Value::Dict(std::move(d));
    });
  }

  Result<Value> StrftimeNow(const std::string& format) const {
    if (format.size() > 256) return InvalidArgumentError("strftime_now(): format too long");
    std::tm tm{};
    if (options_.now_unix_seconds) {
      std::time_t t = static_cast<std::time_t>(*options_.now_unix_seconds);
      gmtime_r(&t, &tm);
    } else {
      std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &tm);
    }
    char buf[1024];
    size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
    if (n == 0 && !format.empty()) return InvalidArgumentError("strftime_now(): result too long");
    return Value::String(std::string(buf, n));
  }

  static Result<Value> Range(const CallArgs& args) {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
      return InvalidArgumentError("range() takes 1 to 3 integer arguments");
    }
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < args.positional.size(); ++i) {
      const Value& a = args.positional[i];
      if (!a.is_int() && !a.is_bool())
        return InvalidArgumentError("range() arguments must be integers");
      v[i] = a.int_value();
    }
    int64_t start = args.positional.size() == 1 ? 0 : v[0];
    int64_t stop = args.positional.size() == 1 ? v[0] : v[1];
    int64_t step = args.positional.size() == 3 ? v[2] : 1;
    if (step == 0) return InvalidArgumentError("range() arg 3 must not be zero");
    // Count without overflow: (stop - start) may not fit, so use long double.
    long double span = static_cast<long double>(stop) - static_cast<long double>(start);
    long double count = span / static_cast<long double>(step);
    if (count > kMaxRange) {
      return InvalidArgumentError(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      items.push_back(Value::Int(i));
    return Value::List(std::move(items));
  }

  static Result<DictData> DictFromArgs(std::string_view fn, const CallArgs& args) {
    DictData d;
    if (args.positional.size() > 1)
      return InvalidArgumentError(std::string(fn) + "() takes at most one positional argument");
    if (args.positional.size() == 1) {
      const Value& src = args.positional[0];
      if (src.is_dict()) {
        for (const auto& [key, value] : src.dict().entries()) d.Set(key, value);
      } else if (src.is_list()) {
        for (const Value& pair : src.list().items) {
          std::optional<std::string> key;
          if (pair.is_list() && pair.list().items.size() == 2)
            key = EncodeKey(pair.list().items[0]);
          if (!key)
            return InvalidArgumentError(std::string(fn) + "(): expected (key, value) pairs");
          d.Set(std::move(*key), pair.list().items[1]);
        }
      } else {
        return InvalidArgumentError(std::string(fn) + "(): expected a mapping");
      }
    }
    for (const auto& [key, value] : args.keyword) {
      if (fn == "namespace" && !key.empty() && key[0] == '_') {
        return InvalidArgumentError(
            "Chat templates cannot store underscore-prefixed attributes on a namespace");
      }
      d.Set(key, value);
    }
    return d;
  }

  // ---- scopes ----

  static const Value* Lookup(const ScopePtr& scope, const std::string& name) {
    for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }

  Status Assign(const std::vector<std::string>& targets, const Value& value, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = value;
      return Status::Ok();
    }
    PIER_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.size() != targets.size()) {
      return InvalidArgumentError("cannot unpack " + std::to_string(items.size()) +
                                  " values into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = items[i];
    return Status::Ok();
  }

  // ---- statements ----

  Status ExecBody(const Body& body, const ScopePtr& scope, std::string* out, Flow* flow) {
    for (const auto& stmt : body) {
      PIER_RETURN_IF_ERROR(Exec(*stmt, scope, out, flow));
      if (*flow != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status Exec(const Stmt& s, const ScopePtr& scope, std::string* out, Flow* flow) {
    switch (s.kind) {
      case StmtKind::kText:
        return At(Append(s.text, out), s);
      case StmtKind::kOutput: {
        PIER_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        return At(Append(ToStr(v), out), s);
      }
      case StmtKind::kIf:
        for (const auto& [cond, branch] : s.branches) {
          PIER_ASSIGN_OR_RETURN(Value c, Eval(*cond, scope));
          if (Truthy(c)) return ExecBody(branch, scope, out, flow);
        }
        return ExecBody(s.else_body, scope, out, flow);
      case StmtKind::kFor:
        return ExecFor(s, scope, out);
      case StmtKind::kSet: {
        PIER_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        if (s.attribute.empty()) return At(Assign(s.targets, v, scope.get()), s);
        const Value* target = Lookup(scope, s.targets[0]);
        if (target == nullptr || !target->is_namespace()) {
          return At(InvalidArgumentError("cannot assign attribute on non-namespace object"), s);
        }
        if (!s.attribute.empty() && s.attribute[0] == '_') {
          return At(
              InvalidArgumentError(
                  "Chat templates cannot store underscore-prefixed attributes on a namespace"),
              s);
        }
        target->mutable_namespace().Set(s.attribute, std::move(v));
        return Status::Ok();
      }
      case StmtKind::kSetBlock: {
        std::string buffer;
        Flow inner = Flow::kNormal;
        PIER_RETURN_IF_ERROR(ExecBody(s.body, scope, &buffer, &inner));
        Value v = Value::String(std::move(buffer));
        if (s.filter) {
          PIER_ASSIGN_OR_RETURN(v, ApplyFilterChain(*s.filter, std::move(v), scope));
        }
        scope->vars[s.targets[0]] = std::move(v);
        return Status::Ok();
      }
      case StmtKind::kMacro:
        scope->vars[s.text] = MakeMacro(s, scope);
        return Status::Ok();
      case StmtKind::kBreak:
        *flow = Flow::kBreak;
        return Status::Ok();
      case StmtKind::kContinue:
        *flow = Flow::kContinue;
        return Status::Ok();
      case StmtKind::kFilterBlock: {
        std::string buffer;
        PIER_RETURN_IF_ERROR(ExecBody(s.body, scope, &buffer, flow));
        PIER_ASSIGN_OR_RETURN(Value v,
                              ApplyFilterChain(*s.filter, Value::String(std::move(buffer)), scope));
        return At(Append(ToStr(v), out), s);
      }
      case StmtKind::kGeneration:
        return ExecBody(s.body, scope, out, flow);
    }
    return Status::Ok();
  }

  Status ExecFor(const Stmt& s, const ScopePtr& scope, std::string* out) {
    PIER_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
    Result<std::vector<Value>> listed = Iterate(iterable);
    if (!listed.ok()) return At(listed.status(), *s.expr);
    std::vector<Value> items = std::move(listed).value();
    if (s.condition) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        PIER_RETURN_IF_ERROR(At(CountIteration(), s));
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        PIER_RETURN_IF_ERROR(At(Assign(s.targets, item, probe.get()), s));
        PIER_ASSIGN_OR_RETURN(Value keep, Eval(*s.condition, probe));
        if (Truthy(keep)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Flow flow = Flow::kNormal;
      return ExecBody(s.else_body, scope, out, &flow);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      PIER_RETURN_IF_ERROR(At(CountIteration(), s));
      auto iteration = std::make_shared<Scope>();
      iteration->parent = scope;
      const Value& item = items[static_cast<size_t>(i)];
      PIER_RETURN_IF_ERROR(At(Assign(s.targets, item, iteration.get()), s));
      DictData loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                 : Value::Undefined("there is no previous item"));
      loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                     : Value::Undefined("there is no next item"));
      loop.Set("cycle", Value::Function("cycle", [i](CallArgs&& args) -> Result<Value> {
                 if (args.positional.empty())
                   return InvalidArgumentError("no items for cycling given");
                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
               }));
      iteration->vars["loop"] = Value::Dict(std::move(loop));
      Flow flow = Flow::kNormal;
      PIER_RETURN_IF_ERROR(ExecBody(s.body, iteration, out, &flow));
      if (flow == Flow::kBreak) break;
    }
    return Status::Ok();
  }

  // The macro holds its defining scope weakly (the scope holds the macro: no cycle); the
  // renderer keeps such scopes alive until the render ends.
  Value MakeMacro(const Stmt& s, const ScopePtr& definition_scope) {
    const Stmt* macro = &s;
    macro_scopes_.push_back(definition_scope);
    std::weak_ptr<Scope> weak_scope = definition_scope;
    return Value::Function(s.text, [this, macro, weak_scope](CallArgs&& args) -> Result<Value> {
      ScopePtr scope = weak_scope.lock();
      if (!scope) return InternalError("macro called after its scope ended");
      return CallMacro(*macro, scope, args);
    });
  }

  Result<Value> CallMacro(const Stmt& macro, const ScopePtr& definition_scope,
                          const CallArgs& args) {
    if (call_depth_ >= options_.limits.max_call_depth) {
      return ResourceExhaustedError("chat template macros nested deeper than " +
                                    std::to_string(options_.limits.max_call_depth) + " calls");
    }
    auto scope = std::make_shared<Scope>();
    scope->parent = definition_scope;
    if (args.positional.size() > macro.params.size()) {
      return InvalidArgumentError("macro '" + macro.text + "' takes " +
                                  std::to_string(macro.params.size()) + " arguments, got " +
                                  std::to_string(args.positional.size()));
    }
    std::vector<const Value*> bound(macro.params.size(), nullptr);
    for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = &args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      auto it = std::find(macro.params.begin(), macro.params.end(), key);
      if (it == macro.params.end()) {
        return InvalidArgumentError("macro '" + macro.text +
                                    "' got an unexpected keyword argument '" + key + "'");
      }
      bound[static_cast<size_t>(it - macro.params.begin())] = &value;
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (bound[i] != nullptr) {
        scope->vars[macro.params[i]] = *bound[i];
      } else if (macro.defaults[i]) {
        PIER_ASSIGN_OR_RETURN(scope->vars[macro.params[i]], Eval(*macro.defaults[i], scope));
      } else {
        scope->vars[macro.params[i]] =
            Value::Undefined("parameter '" + macro.params[i] + "' was not provided");
      }
    }
    ++call_depth_;
    std::string out;
    Flow flow = Flow::kNormal;
    Status st = ExecBody(macro.body, scope, &out, &flow);
    --call_depth_;
    PIER_RETURN_IF_ERROR(st);
    return Value::String(std::move(out));
  }

  // ---- expressions ----

  Result<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      PIER_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      PIER_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  Result<Value> ApplyFilterChain(const Expr& chain, Value input, const ScopePtr& scope) {
    if (chain.kind != ExprKind::kFilter) return input;
    PIER_ASSIGN_OR_RETURN(Value inner, ApplyFilterChain(*chain.args[0], std::move(input), scope));
    PIER_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(chain, 1, scope));
    Result<Value> v = ApplyFilter(chain.name, inner, args);
    if (!v.ok()) return At(v.status(), chain);
    PIER_RETURN_IF_ERROR(At(ChargeWork(*v), chain));
    return v;
  }

  // Evaluates the object of an attribute / item access; using an undefined one is an error.
  Result<Value> EvalObject(const Expr& e, const ScopePtr& scope) {
    PIER_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
    if (obj.is_undefined()) return At(UndefinedError(obj), e);
    return obj;
  }

  Result<Value> Eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName: {
        const Value* v = Lookup(scope, e.name);
        return v != nullptr ? *v : Value::Undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const auto& item : e.args) {
          PIER_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        DictData dict;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          PIER_ASSIGN_OR_RETURN(Value key, Eval(*e.args[i], scope));
          PIER_ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1], scope));
          std::optional<std::string> encoded = EncodeKey(key);
          if (!encoded) {
            return At(InvalidArgumentError("unhashable type: '" + std::string(TypeName(key)) + "'"),
                      *e.args[i]);
          }
          dict.Set(std::move(*encoded), std::move(value));
        }
        return Value::Dict(std::move(dict));
      }
      case ExprKind::kGetAttr: {
        PIER_ASSIGN_OR_RETURN(Value obj, EvalObject(e, scope));
        return GetAttribute(obj, e.name);
      }
      case ExprKind::kGetItem: {
        PIER_ASSIGN_OR_RETURN(Value obj, EvalObject(e, scope));
        PIER_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key);
      }
      case ExprKind::kSlice: {
        PIER_ASSIGN_OR_RETURN(Value obj, EvalObject(e, scope));
        Value bounds[3] = {Value::None(), Value::None(), Value::None()};
        for (size_t i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            PIER_ASSIGN_OR_RETURN(bounds[i], Eval(*e.args[i + 1], scope));
          }
        }
        Result<Value> v = GetSlice(obj, bounds[0], bounds[1], bounds[2]);
        if (!v.ok()) return At(v.status(), e);
        PIER_RETURN_IF_ERROR(At(ChargeWork(*v), e));
        return v;
      }
      case ExprKind::kCall: {
        PIER_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
        PIER_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        if (callee.is_undefined()) return At(UndefinedError(callee), e);
        if (!callee.is_callable()) {
          return At(InvalidArgumentError("'" + std::string(TypeName(callee)) +
                                         "' object is not callable"),
                    e);
        }
        Result<Value> v = callee.callable().fn(std::move(args));
        if (!v.ok()) return At(v.status(), e);
        PIER_RETURN_IF_ERROR(At(ChargeWork(*v), e));
        return v;
      }
      case ExprKind::kFilter: {
        PIER_ASSIGN_OR_RETURN(Value input, Eval(*e.args[0], scope));
        PIER_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        Result<Value> v = ApplyFilter(e.name, input, args);
        if (!v.ok()) return At(v.status(), e);
        PIER_RETURN_IF_ERROR(At(ChargeWork(*v), e));
        return v;
      }
      case ExprKind::kTest: {
        PIER_ASSIGN_OR_RETURN(Value input, Eval(*e.args[0], scope));
        PIER_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        Result<bool> r = ApplyTest(e.name, input, args);
        if (!r.ok()) return At(r.status(), e);
        return Value::Bool(*r != e.negated);
      }
      case ExprKind::kNot: {
        PIER_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return Value::Bool(!Truthy(v));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        PIER_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        Result<Value> r = Negate(v, e.kind == ExprKind::kNeg);
        if (!r.ok()) return At(r.status(), e);
        return r;
      }
      case ExprKind::kBinary: {
        PIER_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        PIER_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
        Result<Value> r = BinaryOp(e.name, a, b, options_.limits.max_output_bytes);
        if (!r.ok()) return At(r.status(), e);
        PIER_RETURN_IF_ERROR(At(ChargeWork(*r), e));
        return r;
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        PIER_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
        return Eval(*e.args[1], scope);
      }
      case ExprKind::kCompare:
        return EvalCompare(e, scope);
      case ExprKind::kCondition: {
        PIER_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0], scope));
        if (Truthy(c)) return Eval(*e.args[1], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return At(InternalError("unknown expression kind"), e);
  }

  Result<Value> EvalCompare(const Expr& e, const ScopePtr& scope) {
    PIER_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      PIER_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
      const std::string& op = e.ops[i];
      bool result;
      if (op == "==" || op == "!=") {
        result = Equals(left, right) == (op == "==");
      } else if (op == "in" || op == "notin") {
        Result<bool> r = Contains(right, left);
        if (!r.ok()) return At(r.status(), e);
        result = *r == (op == "in");
      } else {
        if (left.is_undefined()) return At(UndefinedError(left), e);
        if (right.is_undefined()) return At(UndefinedError(right), e);
        Result<int> c = Compare(left, right);
        if (!c.ok()) {
          return At(InvalidArgumentError("'" + op + "' not supported between instances of '" +
                                         std::string(TypeName(left)) + "' and '" +
                                         std::string(TypeName(right)) + "'"),
                    e);
        }
        result = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  const RenderOptions& options_;
  std::vector<ScopePtr> macro_scopes_;
  size_t output_bytes_ = 0;
  size_t work_bytes_ = 0;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  bool located_ = false;
  bool raised_ = false;
};

}  // namespace

Result<std::string> Render(const TemplateAst& ast, const DictData& context,
                           const RenderOptions& options, bool* raised) {
  Renderer renderer(options);
  Result<std::string> out = renderer.Run(ast, context);
  if (raised != nullptr) *raised = renderer.raised();
  return out;
}

}  // namespace pier::tokenizer::jinja
