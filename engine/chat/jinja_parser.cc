#include "engine/chat/jinja_parser.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_parser_internal.h"
#include "engine/common/status.h"

namespace ced::jinja {

bool Parser::AcceptOp(std::string_view op) {
  if (!IsOp(op)) return false;
  ++pos_;
  return true;
}

bool Parser::AcceptName(std::string_view name) {
  if (!IsName(name)) return false;
  ++pos_;
  return true;
}

absl::Status Parser::ExpectOp(std::string_view op) {
  if (AcceptOp(op)) return absl::OkStatus();
  return Error(absl::StrCat("expected '", std::string(op), "', got ", Describe(Cur())));
}

absl::Status Parser::Error(std::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat("line ", Cur().line, ": ", std::string(what)));
}

std::string Parser::Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template text";
    case TokenType::kVarBegin:
      return "'{{'";
    case TokenType::kVarEnd:
      return "'}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "'%}'";
    case TokenType::kName:
      return absl::StrCat("'", t.text, "'");
    case TokenType::kString:
      return "a string";
    case TokenType::kInt:
    case TokenType::kFloat:
      return "a number";
    case TokenType::kOp:
      return absl::StrCat("'", t.text, "'");
    case TokenType::kEof:
      return "the end of the template";
  }
  return "?";
}

absl::Status Parser::ExpectBlockEnd(std::string_view tag) {
  if (Cur().type == TokenType::kBlockEnd) {
    ++pos_;
    return absl::OkStatus();
  }
  return Error(
      absl::StrCat("expected '%}' to end '", std::string(tag), "', got ", Describe(Cur())));
}

absl::StatusOr<NodeList> Parser::ParseAll() {
  ASSIGN_OR_RETURN(NodeList nodes, ParseBody({}, nullptr));
  if (Cur().type != TokenType::kEof) return Error(absl::StrCat("unexpected ", Describe(Cur())));
  return nodes;
}

// Parses nodes until `{% <one of end_tags>` (left as the current name token,
// its name in *end_tag) or the end of the template (an error when end_tags
// is not empty).
absl::StatusOr<NodeList> Parser::ParseBody(std::initializer_list<std::string_view> end_tags,
                                           std::string* end_tag) {
  NodeList nodes;
  while (true) {
    const Token& t = Cur();
    if (t.type == TokenType::kEof) {
      if (end_tags.size() == 0) return nodes;
      std::string names;
      for (std::string_view e : end_tags)
        absl::StrAppend(&names, names.empty() ? "" : " or ", "'", std::string(e), "'");
      return Error(absl::StrCat("unexpected end of template, expected ", names));
    }
    if (t.type == TokenType::kData) {
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kData;
      node->line = t.line;
      node->text = t.text;
      nodes.push_back(std::move(node));
      ++pos_;
    } else if (t.type == TokenType::kVarBegin) {
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kOutput;
      node->line = t.line;
      ++pos_;
      ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
      if (Cur().type != TokenType::kVarEnd) {
        return Error(absl::StrCat("expected '}}', got ", Describe(Cur())));
      }
      ++pos_;
      nodes.push_back(std::move(node));
    } else if (t.type == TokenType::kBlockBegin) {
      const Token& name = Peek();
      if (name.type == TokenType::kName) {
        for (std::string_view e : end_tags) {
          if (name.text == e) {
            ++pos_;  // leave the tag name current
            *end_tag = name.text;
            return nodes;
          }
        }
      }
      ++pos_;
      ASSIGN_OR_RETURN(auto node, ParseStatement());
      nodes.push_back(std::move(node));
    } else {
      return Error(absl::StrCat("unexpected ", Describe(t)));
    }
  }
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseStatement() {
  const Token& t = Cur();
  const int line = t.line;
  if (t.type != TokenType::kName) {
    return Error(absl::StrCat("expected a tag name after '{%', got ", Describe(t)));
  }
  const std::string tag = t.text;
  ++pos_;
  if (tag == "for") return ParseFor(line);
  if (tag == "if") return ParseIf(line);
  if (tag == "set") return ParseSet(line);
  if (tag == "macro") return ParseMacro(line);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": '", tag, "' outside of a for loop"));
    }
    auto node = std::make_unique<Node>();
    node->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    node->line = line;
    RETURN_IF_ERROR(ExpectBlockEnd(tag));
    return node;
  }
  if (tag == "print") {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kOutput;
    node->line = line;
    ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
    RETURN_IF_ERROR(ExpectBlockEnd(tag));
    return node;
  }
  static const char* kKnownUnsupported[] = {"include",    "extends", "block",      "import",
                                            "from",       "call",    "filter",     "with",
                                            "autoescape", "do",      "generation", "trans"};
  for (const char* u : kKnownUnsupported) {
    if (tag == u) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": unsupported construct: the '", tag,
                       "' tag (supported tags: if, for, set, macro, break, continue, print, raw)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": unknown tag '", tag, "'"));
}

absl::Status Parser::ParseTargets(Node* node, bool allow_attr) {
  const bool paren = AcceptOp("(");
  while (true) {
    if (Cur().type != TokenType::kName) {
      return Error(absl::StrCat("expected a variable name, got ", Describe(Cur())));
    }
    node->targets.push_back(Cur().text);
    ++pos_;
    if (allow_attr && !paren && node->targets.size() == 1 && AcceptOp(".")) {
      if (Cur().type != TokenType::kName) return Error("expected an attribute name after '.'");
      node->attr = Cur().text;
      ++pos_;
      return absl::OkStatus();
    }
    if (!AcceptOp(",")) break;
    node->target_is_tuple = true;
    if (paren && IsOp(")")) break;
    if (!paren && Cur().type != TokenType::kName) break;
  }
  if (paren) {
    node->target_is_tuple = true;
    RETURN_IF_ERROR(ExpectOp(")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseFor(int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->line = line;
  RETURN_IF_ERROR(ParseTargets(node.get(), false));
  if (!AcceptName("in")) return Error(absl::StrCat("expected 'in', got ", Describe(Cur())));
  ASSIGN_OR_RETURN(node->expr, ParseTuple(false));
  if (AcceptName("if")) {
    ASSIGN_OR_RETURN(node->cond, ParseExpression());
  }
  if (IsName("recursive")) {
    return Error("unsupported construct: recursive for loops");
  }
  RETURN_IF_ERROR(ExpectBlockEnd("for"));
  std::string end;
  ++loop_depth_;
  absl::StatusOr<NodeList> body = ParseBody({"endfor", "else"}, &end);
  --loop_depth_;
  if (!body.ok()) return body.status();
  node->body = *std::move(body);
  ++pos_;
  RETURN_IF_ERROR(ExpectBlockEnd(end));
  if (end == "else") {
    ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, &end));
    ++pos_;
    RETURN_IF_ERROR(ExpectBlockEnd(end));
  }
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseIf(int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kIf;
  node->line = line;
  std::string end = "if";
  while (true) {
    ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false));
    RETURN_IF_ERROR(ExpectBlockEnd(end));
    ASSIGN_OR_RETURN(NodeList body, ParseBody({"elif", "else", "endif"}, &end));
    node->branches.emplace_back(std::move(cond), std::move(body));
    ++pos_;
    if (end == "elif") continue;
    RETURN_IF_ERROR(ExpectBlockEnd(end));
    if (end == "else") {
      ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}, &end));
      ++pos_;
      RETURN_IF_ERROR(ExpectBlockEnd(end));
    }
    return node;
  }
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseSet(int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kSet;
  node->line = line;
  RETURN_IF_ERROR(ParseTargets(node.get(), true));
  if (AcceptOp("=")) {
    ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
    RETURN_IF_ERROR(ExpectBlockEnd("set"));
    return node;
  }
  if (node->target_is_tuple || !node->attr.empty()) {
    return Error("expected '=' in a set of several names or of an attribute");
  }
  if (IsOp("|")) return Error("unsupported construct: a filter on a {% set %} block");
  RETURN_IF_ERROR(ExpectBlockEnd("set"));
  node->kind = Node::Kind::kSetBlock;
  std::string end;
  ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}, &end));
  ++pos_;
  RETURN_IF_ERROR(ExpectBlockEnd(end));
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> Parser::ParseMacro(int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kMacro;
  node->line = line;
  if (Cur().type != TokenType::kName) return Error("expected a macro name");
  node->text = Cur().text;
  ++pos_;
  RETURN_IF_ERROR(ExpectOp("("));
  while (!AcceptOp(")")) {
    if (!node->targets.empty()) RETURN_IF_ERROR(ExpectOp(","));
    if (AcceptOp(")")) break;
    if (Cur().type != TokenType::kName) return Error("expected a macro parameter name");
    node->targets.push_back(Cur().text);
    ++pos_;
    ExprPtr def;
    if (AcceptOp("=")) {
      ASSIGN_OR_RETURN(def, ParseExpression());
    } else if (!node->defaults.empty() && node->defaults.back() != nullptr) {
      return Error("non-default macro parameter follows a default one");
    }
    node->defaults.push_back(std::move(def));
  }
  RETURN_IF_ERROR(ExpectBlockEnd("macro"));
  std::string end;
  const int outer_loops = loop_depth_;
  loop_depth_ = 0;
  absl::StatusOr<NodeList> body = ParseBody({"endmacro"}, &end);
  loop_depth_ = outer_loops;
  if (!body.ok()) return body.status();
  node->body = *std::move(body);
  ++pos_;
  if (Cur().type == TokenType::kName && Cur().text == node->text) ++pos_;
  RETURN_IF_ERROR(ExpectBlockEnd(end));
  return node;
}

absl::StatusOr<NodeList> ParseTemplate(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).ParseAll();
}

}  // namespace ced::jinja
