// The parser's state, shared by jinja_parser.cc (statements) and
// jinja_parser_expr.cc (expressions). Internal to ced_chat.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_lexer.h"

namespace ced::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<NodeList> ParseAll();

 private:
  // Statements (jinja_parser.cc).
  absl::StatusOr<NodeList> ParseBody(std::initializer_list<std::string_view> end_tags,
                                     std::string* end_tag);
  absl::StatusOr<std::unique_ptr<Node>> ParseStatement();
  absl::StatusOr<std::unique_ptr<Node>> ParseFor(int line);
  absl::StatusOr<std::unique_ptr<Node>> ParseIf(int line);
  absl::StatusOr<std::unique_ptr<Node>> ParseSet(int line);
  absl::StatusOr<std::unique_ptr<Node>> ParseMacro(int line);
  absl::Status ParseTargets(Node* node, bool allow_attr);
  absl::Status ExpectBlockEnd(std::string_view tag);

  // Expressions (jinja_parser_expr.cc).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr);  // a, b -> tuple
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::Status ParseCallArgs(Expr* call);  // after '(' ... ')'

  // Token helpers.
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().type == TokenType::kName && Cur().text == name;
  }
  bool AcceptOp(std::string_view op);
  bool AcceptName(std::string_view name);
  absl::Status ExpectOp(std::string_view op);
  absl::Status Error(std::string_view what) const;  // "line N: what"
  static std::string Describe(const Token& t);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;       // expression nesting, bounded
  int loop_depth_ = 0;  // enclosing for-loop bodies (break/continue need one)
};

}  // namespace ced::jinja
