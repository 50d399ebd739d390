#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_eval_internal.h"
#include "engine/chat/jinja_parser.h"
#include "engine/common/status.h"

namespace ced::jinja {
namespace {
constexpr char kLocatedPayload[] = "ced.jinja/located";
}  // namespace

absl::Status Located(int line, absl::Status status) {
  if (status.ok() || IsRaisedError(status) || status.GetPayload(kLocatedPayload).has_value()) {
    return status;
  }
  absl::Status located(status.code(), absl::StrCat("line ", line, ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

absl::Status Evaluator::Step() {
  if (++steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template rendering exceeded ", limits_.max_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::Status Evaluator::Append(const std::string& text, std::string* out) {
  if (out->size() + text.size() > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendered text exceeds ", limits_.max_output_bytes, " bytes"));
  }
  out->append(text);
  return absl::OkStatus();
}

absl::StatusOr<Evaluator::Flow> Evaluator::ExecBody(const NodeList& nodes, Frame* frame,
                                                    std::string* out) {
  for (const auto& n : nodes) {
    absl::StatusOr<Flow> flow = Exec(*n, frame, out);
    if (!flow.ok()) return Located(n->line, flow.status());
    if (*flow != Flow::kNormal) return *flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Evaluator::Flow> Evaluator::Exec(const Node& n, Frame* frame, std::string* out) {
  RETURN_IF_ERROR(Step());
  switch (n.kind) {
    case Node::Kind::kData:
      RETURN_IF_ERROR(Append(n.text, out));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
      RETURN_IF_ERROR(Append(ToStr(v), out));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (const auto& [cond, body] : n.branches) {
        ASSIGN_OR_RETURN(Value c, Eval(*cond, frame));
        if (Truthy(c)) return ExecBody(body, frame, out);
      }
      return ExecBody(n.else_body, frame, out);
    case Node::Kind::kFor:
      return ExecFor(n, frame, out);
    case Node::Kind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*n.expr, frame));
      RETURN_IF_ERROR(ExecSet(n, v, frame));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock: {
      std::string text;
      ASSIGN_OR_RETURN(Flow flow, ExecBody(n.body, frame, &text));
      (void)flow;
      frame->vars.Set(n.targets[0], Value::String(std::move(text)));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      frame->vars.Set(n.text, MakeMacro(n));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::Status Evaluator::ExecSet(const Node& n, const Value& value, Frame* frame) {
  if (!n.attr.empty()) {
    Value target;
    for (const Frame* f = frame; f != nullptr; f = f->parent) {
      if (const Value* v = f->vars.Find(n.targets[0])) {
        target = *v;
        break;
      }
    }
    if (!target.is_namespace()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot assign attribute '", n.attr, "' on '",
                                                     n.targets[0], "': not a namespace()"));
    }
    target.namespace_attrs().Set(n.attr, value);
    return absl::OkStatus();
  }
  if (!n.target_is_tuple) {
    frame->vars.Set(n.targets[0], value);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ValueList items, Iterate(value));
  if (items.size() != n.targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        items.size() < n.targets.size() ? "not enough" : "too many", " values to unpack (expected ",
        n.targets.size(), ", got ", items.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) frame->vars.Set(n.targets[i], items[i]);
  return absl::OkStatus();
}

absl::StatusOr<Evaluator::Flow> Evaluator::ExecFor(const Node& n, Frame* frame, std::string* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr, frame));
  ASSIGN_OR_RETURN(ValueList all, Iterate(iterable));
  // Bind the loop variables of one item into `iteration`.
  Node binder;
  binder.targets = n.targets;
  binder.target_is_tuple = n.target_is_tuple;
  ValueList items;
  if (n.cond != nullptr) {
    for (const Value& item : all) {
      Frame probe{ValueDict(), frame};
      RETURN_IF_ERROR(ExecSet(binder, item, &probe));
      ASSIGN_OR_RETURN(Value keep, Eval(*n.cond, &probe));
      if (Truthy(keep)) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    RETURN_IF_ERROR(Step());
    Frame iteration{ValueDict(), frame};
    RETURN_IF_ERROR(ExecSet(binder, items[i], &iteration));
    ValueDict loop;
    loop.Set("index0", Value::Int(i));
    loop.Set("index", Value::Int(i + 1));
    loop.Set("revindex0", Value::Int(length - i - 1));
    loop.Set("revindex", Value::Int(length - i));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == length - 1));
    loop.Set("length", Value::Int(length));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    loop.Set("nextitem", i + 1 < length ? items[i + 1] : Value::Undefined("there is no next item"));
    loop.Set("cycle", Value::Function("cycle", [i](const CallArgs& a) -> absl::StatusOr<Value> {
               if (a.positional.empty())
                 return absl::InvalidArgumentError("no items for cycling given");
               return a.positional[i % a.positional.size()];
             }));
    iteration.vars.Set("loop", Value::Dict(std::move(loop)));
    ASSIGN_OR_RETURN(Flow flow, ExecBody(n.body, &iteration, out));
    if (flow == Flow::kBreak) break;
  }
  if (length == 0) {
    ASSIGN_OR_RETURN(Flow flow, ExecBody(n.else_body, frame, out));
    (void)flow;
  }
  return Flow::kNormal;
}

Value Evaluator::MakeMacro(const Node& n) {
  const Node* node = &n;
  return Value::Function(n.text, [this, node](const CallArgs& a) -> absl::StatusOr<Value> {
    if (a.positional.size() > node->targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "macro '", node->text, "' takes not more than ", node->targets.size(), " argument(s)"));
    }
    if (depth_ >= limits_.max_depth) {
      return absl::ResourceExhaustedError(
          absl::StrCat("macro calls nested deeper than ", limits_.max_depth));
    }
    Frame call{ValueDict(), root_};
    for (size_t i = 0; i < node->targets.size(); ++i) {
      const Value* v = i < a.positional.size() ? &a.positional[i] : nullptr;
      for (const auto& [k, kv] : a.keyword) {
        if (k == node->targets[i]) v = &kv;
      }
      if (v != nullptr) {
        call.vars.Set(node->targets[i], *v);
      } else if (node->defaults[i] != nullptr) {
        ASSIGN_OR_RETURN(Value def, Eval(*node->defaults[i], &call));
        call.vars.Set(node->targets[i], def);
      } else {
        call.vars.Set(node->targets[i],
                      Value::Undefined(absl::StrCat("'", node->targets[i], "' is undefined")));
      }
    }
    for (const auto& [k, kv] : a.keyword) {
      bool known = false;
      for (const std::string& t : node->targets) known |= t == k;
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("macro '", node->text, "' takes no keyword argument '", k, "'"));
      }
    }
    ++depth_;
    std::string text;
    absl::StatusOr<Flow> flow = ExecBody(node->body, &call, &text);
    --depth_;
    if (!flow.ok()) return flow.status();
    return Value::String(std::move(text));
  });
}

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(NodeList nodes, ParseTemplate(source));
  return std::unique_ptr<Template>(new Template(std::move(nodes)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& context,
                                             const RenderLimits& limits) const {
  Frame globals{Globals(), nullptr};
  Frame root{context, &globals};
  Evaluator evaluator(limits);
  evaluator.set_root(&root);
  std::string out;
  ASSIGN_OR_RETURN(Evaluator::Flow flow, evaluator.ExecBody(nodes_, &root, &out));
  (void)flow;
  return out;
}

}  // namespace ced::jinja
