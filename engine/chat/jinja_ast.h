// The syntax tree of a parsed Jinja template (see jinja_parser.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja_value.h"

namespace ced::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items
    kDict,     // args: key0, value0, key1, value1, ...
    kGetAttr,  // object.name (a = object)
    kGetItem,  // a[b]
    kSlice,    // a[b:c:d] (b, c, d may be null)
    kCall,     // a(args; arg_names[i] non-empty for key=value)
    kFilter,   // a | name(args)
    kTest,     // a is [not] name(args)
    kUnary,    // op a ("-", "+", "not")
    kBinary,   // a op b ("+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "in", "not in")
    kCompare,  // a op[0] b op[1] c ... (operands in args, ops in arg_names)
    kCond,     // a if b else c (c may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value value;
  std::string name;      // kName, kGetAttr, kFilter, kTest; op for kUnary/kBinary
  bool negated = false;  // kTest: `is not`
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::string> arg_names;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kData,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body) ..., else_body
    kFor,       // for targets in expr [if cond]: body [else else_body]
    kSet,       // set targets = expr; or set targets[0].attr = expr (namespace)
    kSetBlock,  // {% set targets[0] %}body{% endset %}
    kMacro,     // macro name(params = defaults): body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kData;
  int line = 0;
  std::string text;                  // kData; kMacro: name
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
  ExprPtr cond;                      // kFor: the `if` filter
  std::vector<std::string> targets;  // kFor/kSet: names (several: tuple unpacking)
  bool target_is_tuple = false;
  std::string attr;                                    // kSet: `ns.attr` form when non-empty
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // kIf
  NodeList body;
  NodeList else_body;
  std::vector<ExprPtr> defaults;  // kMacro: one per target (param), null when none
};

}  // namespace ced::jinja
