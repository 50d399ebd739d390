// Jinja parser: tokens (jinja_lexer.h) to a syntax tree (jinja_ast.h).
//
// Statements: if/elif/else, for ... in ... [if ...] with else, break,
// continue, set (names, tuples, `ns.attr`, and {% set x %}...{% endset %}),
// macro, print, raw. Expressions: literals, lists, tuples, dicts, names,
// attributes, subscripts and slices, calls with keyword arguments, filters,
// tests, arithmetic, `~`, comparisons (chained), in / not in, and/or/not,
// `x if c else y`. Anything else (include, extends, block, import, call,
// filter blocks, with, `*args`, unknown filters or tests, ...) is
// InvalidArgument naming the construct and its line.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"

namespace ced::jinja {

absl::StatusOr<NodeList> ParseTemplate(std::string_view source);

}  // namespace ced::jinja
