// A parsed Jinja template and its renderer (our engine for the subset of
// Jinja that chat templates use; see jinja_parser.h for the grammar and
// jinja_builtins.h for filters, tests, methods and globals).
//
// Semantics follow Python's Jinja2 with the environment Hugging Face uses
// for chat templates: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]), the default Undefined
// (prints as "", iterates as empty, fails on attribute access or
// arithmetic), and tojson = json.dumps(ensure_ascii=False, ...).
// Immutable after Parse(); Render() is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_value.h"

namespace ced::jinja {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;  // the rendered text
  int max_depth = 64;                   // nested macro calls
  int64_t max_steps = 20'000'000;       // statements + expressions evaluated
};

class Template {
 public:
  // InvalidArgument "line N: ..." for syntax errors and constructs outside the subset.
  static absl::StatusOr<std::unique_ptr<Template>> Parse(std::string_view source);

  // Renders with `context` as the template's variables (over the globals).
  // InvalidArgument "line N: ..." for runtime errors (Python's TypeError,
  // UndefinedError, ...); a raise_exception() error carries the template's
  // message alone (IsRaisedError() in jinja_builtins.h is true for it);
  // ResourceExhausted when a limit is hit.
  absl::StatusOr<std::string> Render(const ValueDict& context,
                                     const RenderLimits& limits = RenderLimits()) const;

 private:
  explicit Template(NodeList nodes) : nodes_(std::move(nodes)) {}
  NodeList nodes_;
};

}  // namespace ced::jinja
