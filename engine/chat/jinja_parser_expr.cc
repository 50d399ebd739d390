// Expression grammar, as Jinja2's parser.py (precedence low to high):
// condexpr, or, and, not, compare (==, !=, <, <=, >, >=, in, not in),
// + -, ~, * / // %, **, unary - +, primary with postfix (. [] ()) and
// filters / tests (| name, is name).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_parser_internal.h"
#include "engine/common/status.h"

namespace ced::jinja {
namespace {

constexpr int kMaxDepth = 200;

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr MakeBinary(std::string op, ExprPtr a, ExprPtr b, int line) {
  ExprPtr e = MakeExpr(Expr::Kind::kBinary, line);
  e->name = std::move(op);
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

}  // namespace

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr) {
  const int line = Cur().line;
  ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
  if (!IsOp(",")) return first;
  ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
  tuple->args.push_back(std::move(first));
  while (AcceptOp(",")) {
    if (Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd || IsOp(")") ||
        IsName("if") || IsName("in")) {
      break;
    }
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
    tuple->args.push_back(std::move(item));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
  ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (with_condexpr && IsName("if")) {
    const int line = Cur().line;
    ++pos_;
    ExprPtr cond = MakeExpr(Expr::Kind::kCond, line);
    cond->a = std::move(expr);
    ASSIGN_OR_RETURN(cond->b, ParseOr());
    if (AcceptName("else")) {
      ASSIGN_OR_RETURN(cond->c, ParseExpression(true));
    }
    expr = std::move(cond);
  }
  --depth_;
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    left = MakeBinary("or", std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    left = MakeBinary("and", std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    const int line = Cur().line;
    ++pos_;
    if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
    ExprPtr e = MakeExpr(Expr::Kind::kUnary, line);
    e->name = "not";
    ASSIGN_OR_RETURN(e->a, ParseNot());
    --depth_;
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const int line = Cur().line;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (Cur().type == TokenType::kOp &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      ++pos_;
    } else if (IsName("in")) {
      op = "in";
      ++pos_;
    } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
      op = "not in";
      pos_ += 2;
    } else {
      break;
    }
    if (cmp == nullptr) {
      cmp = MakeExpr(Expr::Kind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    ASSIGN_OR_RETURN(ExprPtr next, ParseMath1());
    cmp->args.push_back(std::move(next));
    cmp->arg_names.push_back(op);
  }
  return cmp != nullptr ? std::move(cmp) : std::move(first);
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const std::string op = Cur().text;
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = MakeBinary(op, std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    left = MakeBinary("~", std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const std::string op = Cur().text;
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = MakeBinary(op, std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const int line = Cur().line;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    left = MakeBinary("**", std::move(left), std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(Expr::Kind::kUnary, Cur().line);
    node->name = Cur().text;
    ++pos_;
    ASSIGN_OR_RETURN(node->a, ParseUnary(false));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  --depth_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  const int line = t.line;
  if (t.type == TokenType::kName) {
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, line);
    if (t.text == "true" || t.text == "True")
      e->value = Value::Bool(true);
    else if (t.text == "false" || t.text == "False")
      e->value = Value::Bool(false);
    else if (t.text == "none" || t.text == "None")
      e->value = Value::None();
    else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    ++pos_;
    return e;
  }
  if (t.type == TokenType::kString) {
    std::string s;
    while (Cur().type == TokenType::kString) {  // adjacent literals concatenate
      s += Cur().text;
      ++pos_;
    }
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, line);
    e->value = Value::String(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, line);
    e->value = t.type == TokenType::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
    ++pos_;
    return e;
  }
  if (AcceptOp("(")) {
    if (AcceptOp(")")) return MakeExpr(Expr::Kind::kTuple, line);
    ASSIGN_OR_RETURN(ExprPtr inner, ParseExpression());
    if (AcceptOp(")")) return inner;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(inner));
    while (AcceptOp(",")) {
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->args.push_back(std::move(item));
    }
    RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }
  if (AcceptOp("[")) {
    ExprPtr list = MakeExpr(Expr::Kind::kList, line);
    while (!AcceptOp("]")) {
      if (!list->args.empty()) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp("]")) break;
      }
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      list->args.push_back(std::move(item));
    }
    return list;
  }
  if (AcceptOp("{")) {
    ExprPtr dict = MakeExpr(Expr::Kind::kDict, line);
    while (!AcceptOp("}")) {
      if (!dict->args.empty()) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp("}")) break;
      }
      ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      dict->args.push_back(std::move(key));
      dict->args.push_back(std::move(value));
    }
    return dict;
  }
  return Error(absl::StrCat("unexpected ", Describe(t), " in an expression"));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const int line = Cur().line;
    if (AcceptOp(".")) {
      if (Cur().type == TokenType::kName) {
        ExprPtr e = MakeExpr(Expr::Kind::kGetAttr, line);
        e->name = Cur().text;
        e->a = std::move(node);
        node = std::move(e);
      } else if (Cur().type == TokenType::kInt) {
        ExprPtr e = MakeExpr(Expr::Kind::kGetItem, line);
        e->a = std::move(node);
        e->b = MakeExpr(Expr::Kind::kLiteral, line);
        e->b->value = Value::Int(Cur().int_value);
        node = std::move(e);
      } else {
        return Error("expected an attribute name after '.'");
      }
      ++pos_;
    } else if (IsOp("[")) {
      ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (AcceptOp("(")) {
      ExprPtr call = MakeExpr(Expr::Kind::kCall, line);
      call->a = std::move(node);
      RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const int line = Cur().line;
  ++pos_;  // '['
  ExprPtr parts[3];
  int colons = 0;
  while (!IsOp("]")) {
    if (AcceptOp(":")) {
      if (++colons > 2) return Error("unexpected ':' in a subscript");
      continue;
    }
    if (IsOp(",")) return Error("unsupported construct: a subscript with several indexes");
    if (parts[colons] != nullptr) return Error(absl::StrCat("unexpected ", Describe(Cur())));
    ASSIGN_OR_RETURN(parts[colons], ParseExpression());
  }
  ++pos_;  // ']'
  if (colons == 0) {
    if (parts[0] == nullptr) return Error("empty subscript");
    ExprPtr e = MakeExpr(Expr::Kind::kGetItem, line);
    e->a = std::move(node);
    e->b = std::move(parts[0]);
    return e;
  }
  ExprPtr e = MakeExpr(Expr::Kind::kSlice, line);
  e->a = std::move(node);
  e->b = std::move(parts[0]);
  e->c = std::move(parts[1]);
  e->d = std::move(parts[2]);
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    const int line = Cur().line;
    if (AcceptOp("|")) {
      if (Cur().type != TokenType::kName) return Error("expected a filter name after '|'");
      ExprPtr f = MakeExpr(Expr::Kind::kFilter, line);
      f->name = Cur().text;
      ++pos_;
      if (!IsKnownFilter(f->name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unsupported construct: the filter '", f->name, "'"));
      }
      f->a = std::move(node);
      if (AcceptOp("(")) RETURN_IF_ERROR(ParseCallArgs(f.get()));
      node = std::move(f);
    } else if (AcceptName("is")) {
      ExprPtr t = MakeExpr(Expr::Kind::kTest, line);
      t->negated = AcceptName("not");
      if (Cur().type != TokenType::kName) return Error("expected a test name after 'is'");
      t->name = Cur().text;
      ++pos_;
      if (!IsKnownTest(t->name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unsupported construct: the test '", t->name, "'"));
      }
      t->a = std::move(node);
      if (AcceptOp("(")) {
        RETURN_IF_ERROR(ParseCallArgs(t.get()));
      } else if ((Cur().type == TokenType::kName || Cur().type == TokenType::kString ||
                  Cur().type == TokenType::kInt || Cur().type == TokenType::kFloat || IsOp("(") ||
                  IsOp("[") || IsOp("{")) &&
                 !IsName("else") && !IsName("or") && !IsName("and")) {
        ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        t->args.push_back(std::move(arg));
        t->arg_names.emplace_back();
      }
      node = std::move(t);
    } else if (AcceptOp("(")) {
      ExprPtr call = MakeExpr(Expr::Kind::kCall, line);
      call->a = std::move(node);
      RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  bool first = true;
  while (!AcceptOp(")")) {
    if (!first) {
      RETURN_IF_ERROR(ExpectOp(","));
      if (AcceptOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) return Error("unsupported construct: *args / **kwargs in a call");
    std::string key;
    if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
      key = Cur().text;
      pos_ += 2;
    } else {
      for (const std::string& name : call->arg_names) {
        if (!name.empty()) return Error("positional argument follows keyword argument");
      }
    }
    ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
    call->args.push_back(std::move(arg));
    call->arg_names.push_back(std::move(key));
  }
  return absl::OkStatus();
}

}  // namespace ced::jinja
