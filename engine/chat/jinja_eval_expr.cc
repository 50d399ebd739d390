#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_eval_internal.h"
#include "engine/common/status.h"

namespace ced::jinja {
namespace {

absl::Status TypeError(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

absl::Status OperandError(const std::string& op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  constexpr int64_t kMaxBytes = 64 << 20;
  if (n <= 0) return seq.is_string() ? Value::String("") : Value::List({}, seq.is_tuple());
  const int64_t unit = seq.is_string() ? seq.str().size() : seq.list().size() * 16;
  if (unit * n > kMaxBytes) return absl::ResourceExhaustedError("repetition result too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out), seq.is_tuple());
}

}  // namespace

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.int_value(), b.int_value(), &r))
        return TypeError("integer overflow");
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.float_value() + b.float_value());
    if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(out), a.is_tuple());
    }
    if (a.is_string()) {
      return TypeError(
          absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    return OperandError(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.int_value(), b.int_value(), &r))
        return TypeError("integer overflow");
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.float_value() * b.float_value());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
      return Repeat(a, b.int_value());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
      return Repeat(b, a.int_value());
    return OperandError(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.is_string()) {
      return TypeError("unsupported construct: printf-style '%' string formatting");
    }
    return OperandError(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.int_value(), b.int_value(), &r))
        return TypeError("integer overflow");
      return Value::Int(r);
    }
    return Value::Float(a.float_value() - b.float_value());
  }
  if (op == "**") {
    if (ints && b.int_value() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.int_value(); ++i) {
        if (__builtin_mul_overflow(r, a.int_value(), &r)) return TypeError("integer overflow");
        if (r == 0 || r == 1) break;
      }
      return Value::Int(r);
    }
    return Value::Float(std::pow(a.float_value(), b.float_value()));
  }
  if (b.float_value() == 0) {
    return absl::InvalidArgumentError(op == "/" ? "division by zero"
                                                : "integer division or modulo by zero");
  }
  if (op == "/") return Value::Float(a.float_value() / b.float_value());
  if (ints) {
    const int64_t x = a.int_value(), y = b.int_value();
    if (x == std::numeric_limits<int64_t>::min() && y == -1) return TypeError("integer overflow");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value::Int(op == "//" ? q : r);
  }
  const double x = a.float_value(), y = b.float_value();
  if (op == "//") return Value::Float(std::floor(x / y));
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value::Float(r);
}

absl::StatusOr<Value> Evaluator::Eval(const Expr& e, Frame* frame) {
  absl::StatusOr<Value> v = EvalInner(e, frame);
  if (!v.ok()) return Located(e.line, v.status());
  return v;
}

absl::StatusOr<CallArgs> Evaluator::EvalArgs(const Expr& e, size_t first, Frame* frame) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], frame));
    if (e.arg_names[i].empty())
      args.positional.push_back(std::move(v));
    else
      args.keyword.emplace_back(e.arg_names[i], std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Evaluator::EvalCall(const Expr& e, Frame* frame) {
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 0, frame));
  Value callee;
  if (e.a->kind == Expr::Kind::kGetAttr) {
    ASSIGN_OR_RETURN(Value obj, Eval(*e.a->a, frame));
    if (HasMethod(obj, e.a->name)) return CallMethod(obj, e.a->name, args);
    ASSIGN_OR_RETURN(callee, GetAttr(obj, e.a->name));
  } else {
    ASSIGN_OR_RETURN(callee, Eval(*e.a, frame));
  }
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable())
    return TypeError(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  RETURN_IF_ERROR(Step());
  return callee.callable().fn(args);
}

absl::StatusOr<Value> Evaluator::EvalCompare(const Expr& e, Frame* frame) {
  ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], frame));
  for (size_t i = 1; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*e.args[i], frame));
    const std::string& op = e.arg_names[i - 1];
    bool r;
    if (op == "==" || op == "!=") {
      r = Equals(left, right) == (op == "==");
    } else if (op == "in" || op == "not in") {
      ASSIGN_OR_RETURN(bool in, Contains(right, left));
      r = in == (op == "in");
    } else {
      if (left.is_undefined()) return UndefinedError(left);
      if (right.is_undefined()) return UndefinedError(right);
      const bool flip = op == ">" || op == ">=";
      ASSIGN_OR_RETURN(bool less, Less(flip ? right : left, flip ? left : right));
      r = less || ((op == "<=" || op == ">=") && Equals(left, right));
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Evaluator::EvalInner(const Expr& e, Frame* frame) {
  RETURN_IF_ERROR(Step());
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      for (const Frame* f = frame; f != nullptr; f = f->parent) {
        if (const Value* v = f->vars.Find(e.name)) return *v;
      }
      return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      for (const auto& a : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], frame));
        if (!k.is_string()) {
          return TypeError(absl::StrCat("unsupported construct: a dict key of type '", k.TypeName(),
                                        "' (only strings)"));
        }
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], frame));
        d.Set(k.str(), std::move(v));
      }
      return Value::Dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, frame));
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, frame));
      ASSIGN_OR_RETURN(Value key, Eval(*e.b, frame));
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, frame));
      Value parts[3];
      const Expr* exprs[3] = {e.b.get(), e.c.get(), e.d.get()};
      for (int i = 0; i < 3; ++i) {
        if (exprs[i] != nullptr) {
          ASSIGN_OR_RETURN(parts[i], Eval(*exprs[i], frame));
        }
      }
      return GetSlice(obj, exprs[0] ? &parts[0] : nullptr, exprs[1] ? &parts[1] : nullptr,
                      exprs[2] ? &parts[2] : nullptr);
    }
    case Expr::Kind::kCall:
      return EvalCall(e, frame);
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value in, Eval(*e.a, frame));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 0, frame));
      return ApplyFilter(e.name, in, args);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value in, Eval(*e.a, frame));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 0, frame));
      ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, in, args));
      return Value::Bool(r != e.negated);
    }
    case Expr::Kind::kUnary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, frame));
      if (e.name == "not") return Value::Bool(!Truthy(a));
      if (a.is_undefined()) return UndefinedError(a);
      if (!a.is_number()) {
        return TypeError(
            absl::StrCat("bad operand type for unary ", e.name, ": '", a.TypeName(), "'"));
      }
      if (e.name == "+") return a.is_float() ? a : Value::Int(a.int_value());
      return a.is_float() ? Value::Float(-a.float_value()) : Value::Int(-a.int_value());
    }
    case Expr::Kind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, frame));
      if (e.name == "and") return Truthy(a) ? Eval(*e.b, frame) : a;
      if (e.name == "or") return Truthy(a) ? a : Eval(*e.b, frame);
      ASSIGN_OR_RETURN(Value b, Eval(*e.b, frame));
      if (e.name == "~") return Value::String(ToStr(a) + ToStr(b));
      return Arithmetic(e.name, a, b);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, frame);
    case Expr::Kind::kCond: {
      ASSIGN_OR_RETURN(Value c, Eval(*e.b, frame));
      if (Truthy(c)) return Eval(*e.a, frame);
      if (e.c != nullptr) return Eval(*e.c, frame);
      return Value::Undefined("the inline if-expression evaluated to false and has no else");
    }
  }
  return TypeError("unknown expression");
}

}  // namespace ced::jinja
