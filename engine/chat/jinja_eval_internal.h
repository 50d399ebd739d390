// The renderer's state, shared by jinja_eval.cc (statements) and
// jinja_eval_expr.cc (expressions). Internal to ced_chat. One Evaluator per
// Render() call.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_template.h"
#include "engine/chat/jinja_value.h"

namespace ced::jinja {

// A variable scope: the template's top level, one for-loop iteration, or a
// macro call. Lookups walk `parent`s; {% set %} writes to the innermost.
struct Frame {
  ValueDict vars;
  const Frame* parent = nullptr;
};

class Evaluator {
 public:
  explicit Evaluator(const RenderLimits& limits) : limits_(limits) {}

  enum class Flow { kNormal, kBreak, kContinue };

  // Renders `nodes` into `out`; the root frame (context variables) is `frame`
  // on the first call.
  absl::StatusOr<Flow> ExecBody(const NodeList& nodes, Frame* frame, std::string* out);
  absl::StatusOr<Value> Eval(const Expr& e, Frame* frame);

  void set_root(Frame* root) { root_ = root; }

 private:
  absl::StatusOr<Flow> Exec(const Node& n, Frame* frame, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Node& n, Frame* frame, std::string* out);
  absl::Status ExecSet(const Node& n, const Value& value, Frame* frame);
  Value MakeMacro(const Node& n);
  absl::StatusOr<Value> EvalInner(const Expr& e, Frame* frame);
  absl::StatusOr<Value> EvalCall(const Expr& e, Frame* frame);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, Frame* frame);
  absl::StatusOr<Value> EvalCompare(const Expr& e, Frame* frame);
  absl::Status Step();
  absl::Status Append(const std::string& text, std::string* out);

  const RenderLimits& limits_;
  Frame* root_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
};

// Python's binary operators (+ - * / // % **) on values.
absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);
// Adds "line N: " to an error that has no line yet (raise_exception errors are left alone).
absl::Status Located(int line, absl::Status status);

}  // namespace ced::jinja
