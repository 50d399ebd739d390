// Filters and tests (Jinja2's filters.py / tests.py, with Hugging Face's tojson).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_text.h"
#include "engine/common/status.h"

namespace ced::jinja {
namespace {

constexpr const char* kFilters[] = {
    "abs",    "capitalize", "count",  "d",          "default", "escape",  "e",      "first",
    "float",  "indent",     "int",    "items",      "join",    "last",    "length", "list",
    "lower",  "map",        "reject", "rejectattr", "replace", "reverse", "round",  "safe",
    "select", "selectattr", "string", "title",      "tojson",  "trim",    "unique", "upper"};
constexpr const char* kTests[] = {
    "boolean",  "callable", "defined", "divisibleby", "eq",        "equalto", "even",     "false",
    "float",    "ge",       "gt",      "greaterthan", "in",        "integer", "iterable", "le",
    "lessthan", "lower",    "lt",      "mapping",     "ne",        "none",    "number",   "odd",
    "sameas",   "sequence", "string",  "true",        "undefined", "upper",   "==",       "!=",
    "<",        "<=",       ">",       ">="};

absl::Status TypeError(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

// Jinja's attribute getter for filters: "a.b.0" looks up item-first.
absl::StatusOr<Value> LookupPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    Value key = Value::String(part);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::Int(std::atoll(part.c_str()));
    }
    ASSIGN_OR_RETURN(cur, GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

CallArgs Rest(const CallArgs& args, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  return rest;
}

// select/reject/selectattr/rejectattr.
absl::StatusOr<Value> Select(const Value& input, const CallArgs& args, bool attr, bool keep) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  size_t next = 0;
  std::string path;
  if (attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return TypeError("selectattr/rejectattr need an attribute name");
    }
    path = args.positional[0].str();
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return TypeError("the test name must be a string");
    test = args.positional[next].str();
    if (!IsKnownTest(test))
      return TypeError(absl::StrCat("unsupported construct: the test '", test, "'"));
  }
  const CallArgs test_args = Rest(args, next + 1);
  ValueList out;
  for (const Value& item : items) {
    Value subject = item;
    if (attr) {
      ASSIGN_OR_RETURN(subject, LookupPath(item, path));
    }
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(const Value& input, const CallArgs& args) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  ValueList out;
  const Value* attribute = Arg(args, 99, "attribute");
  if (attribute != nullptr) {
    const Value* def = Arg(args, 99, "default");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, LookupPath(item, ToStr(*attribute)));
      out.push_back(v.is_undefined() && def != nullptr ? *def : v);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return TypeError("map needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].str();
  if (!IsKnownFilter(filter))
    return TypeError(absl::StrCat("unsupported construct: the filter '", filter, "'"));
  const CallArgs rest = Rest(args, 1);
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, rest));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ToJsonFilter(const Value& input, const CallArgs& args) {
  JsonOptions o;
  if (const Value* v = Arg(args, 0, "ensure_ascii")) o.ensure_ascii = Truthy(*v);
  if (const Value* v = Arg(args, 1, "indent"); v != nullptr && !v->is_none()) {
    if (!v->is_int()) return TypeError("tojson: indent must be an integer");
    o.indent = static_cast<int>(std::max<int64_t>(0, v->int_value()));
  }
  if (const Value* v = Arg(args, 2, "separators"); v != nullptr && !v->is_none()) {
    if (!v->is_list() || v->list().size() != 2 || !v->list()[0].is_string() ||
        !v->list()[1].is_string() || v->list()[0].str().empty() || v->list()[1].str().empty()) {
      return TypeError("tojson: separators must be a pair of non-empty strings");
    }
    o.item_separator = v->list()[0].str();
    o.key_separator = v->list()[1].str();
  }
  if (const Value* v = Arg(args, 3, "sort_keys")) o.sort_keys = Truthy(*v);
  ASSIGN_OR_RETURN(std::string json, ToJson(input, o));
  return Value::String(std::move(json));
}

absl::StatusOr<Value> Indent(const Value& input, const CallArgs& args) {
  const Value* w = Arg(args, 0, "width");
  std::string pad = w == nullptr     ? "    "
                    : w->is_string() ? w->str()
                                     : std::string(std::max<int64_t>(0, w->int_value()), ' ');
  const Value* first = Arg(args, 1, "first");
  const Value* blank = Arg(args, 2, "blank");
  CallArgs none;
  ASSIGN_OR_RETURN(Value lines_v,
                   CallMethod(Value::String(ToStr(input) + "\n"), "splitlines", none));
  const ValueList& lines = lines_v.list();
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (!lines[i].str().empty() || (blank != nullptr && Truthy(*blank))) out += pad;
    }
    out += lines[i].str();
  }
  if (first != nullptr && Truthy(*first)) out = pad + out;
  return Value::String(std::move(out));
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
bool IsKnownTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& in, const CallArgs& args) {
  if (name == "default" || name == "d") {
    const Value* def = Arg(args, 0, "default_value");
    const Value* boolean = Arg(args, 1, "boolean");
    if (in.is_undefined() || (boolean != nullptr && Truthy(*boolean) && !Truthy(in))) {
      return def != nullptr ? *def : Value::String("");
    }
    return in;
  }
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(in));
    return Value::Int(n);
  }
  if (name == "tojson") return ToJsonFilter(in, args);
  if (name == "string" || name == "safe")
    return name == "safe" && !in.is_string() ? in : Value::String(ToStr(in));
  if (name == "trim") {
    const Value* chars = Arg(args, 0, "chars");
    const std::string* c = chars != nullptr && chars->is_string() ? &chars->str() : nullptr;
    return Value::String(PyStrip(ToStr(in), c, true, true));
  }
  if (name == "lower") return Value::String(PyLower(ToStr(in)));
  if (name == "upper") return Value::String(PyUpper(ToStr(in)));
  if (name == "title") return Value::String(PyTitle(ToStr(in)));
  if (name == "capitalize") return Value::String(PyCapitalize(PyLower(ToStr(in))));
  if (name == "replace") {
    const Value* from = Arg(args, 0, "old");
    const Value* to = Arg(args, 1, "new");
    const Value* count = Arg(args, 2, "count");
    if (from == nullptr || to == nullptr) return TypeError("replace needs old and new");
    return Value::String(
        PyReplace(ToStr(in), ToStr(*from), ToStr(*to),
                  count != nullptr && !count->is_none() ? count->int_value() : -1));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::List({});
    if (!in.is_dict()) return TypeError("Can only get item pairs from a mapping.");
    return CallMethod(in, "items", CallArgs{});
  }
  if (name == "join") {
    const Value* sep = Arg(args, 0, "d");
    const Value* attribute = Arg(args, 1, "attribute");
    ASSIGN_OR_RETURN(ValueList items, Iterate(in));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && sep != nullptr) out += ToStr(*sep);
      Value item = items[i];
      if (attribute != nullptr) {
        ASSIGN_OR_RETURN(item, LookupPath(item, ToStr(*attribute)));
      }
      out += ToStr(item);
    }
    return Value::String(std::move(out));
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(in));
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(in));
    return Value::List(std::move(items));
  }
  if (name == "reverse") {
    if (in.is_string()) {
      const Value step = Value::Int(-1);
      return GetSlice(in, nullptr, nullptr, &step);
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(in));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(in));
    ValueList out;
    for (const Value& v : items) {
      Value key = v.is_string() ? Value::String(PyLower(v.str())) : v;
      bool seen = false;
      for (const Value& o : out) {
        seen |= Equals(o.is_string() ? Value::String(PyLower(o.str())) : o, key);
      }
      if (!seen) out.push_back(v);
    }
    return Value::List(std::move(out));
  }
  if (name == "map") return Map(in, args);
  if (name == "select" || name == "reject") return Select(in, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return Select(in, args, true, name == "selectattr");
  if (name == "abs") {
    if (in.is_float()) return Value::Float(std::fabs(in.float_value()));
    if (in.is_int() || in.is_bool()) return Value::Int(std::llabs(in.int_value()));
    return TypeError(absl::StrCat("bad operand type for abs(): '", in.TypeName(), "'"));
  }
  if (name == "int" || name == "float") {
    const Value* def = Arg(args, 0, "default");
    const bool to_int = name == "int";
    Value fallback = def != nullptr ? *def : to_int ? Value::Int(0) : Value::Float(0);
    double d;
    if (in.is_number()) {
      d = in.float_value();
      if (to_int && !in.is_float()) return Value::Int(in.int_value());
    } else if (in.is_string()) {
      const std::string s = PyStrip(in.str(), nullptr, true, true);
      char* end = nullptr;
      if (to_int) {
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::Int(i);
      }
      d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return fallback;
    } else {
      return fallback;
    }
    if (to_int)
      return std::isfinite(d) ? Value::Int(static_cast<int64_t>(std::trunc(d))) : fallback;
    return Value::Float(d);
  }
  if (name == "round") {
    const Value* precision = Arg(args, 0, "precision");
    const Value* method = Arg(args, 1, "method");
    const std::string m = method != nullptr ? ToStr(*method) : "common";
    const double scale = std::pow(10.0, precision != nullptr ? precision->int_value() : 0);
    const double x = in.float_value() * scale;
    const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : ToStr(in)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out.push_back(c);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "indent") return Indent(in, args);
  return TypeError(absl::StrCat("unsupported construct: the filter '", std::string(name), "'"));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& in, const CallArgs& args) {
  const Value* other = Arg(args, 0, "other");
  if (name == "defined") return !in.is_undefined();
  if (name == "undefined") return in.is_undefined();
  if (name == "none") return in.is_none();
  if (name == "boolean") return in.is_bool();
  if (name == "true") return in.is_bool() && in.bool_value();
  if (name == "false") return in.is_bool() && !in.bool_value();
  if (name == "integer") return in.is_int();
  if (name == "float") return in.is_float();
  if (name == "number") return in.is_number();
  if (name == "string") return in.is_string();
  if (name == "mapping") return in.is_dict();
  if (name == "iterable")
    return in.is_undefined() || in.is_string() || in.is_list() || in.is_dict();
  if (name == "sequence") return in.is_string() || in.is_list() || in.is_dict();
  if (name == "callable") return in.is_callable();
  if (name == "lower" || name == "upper") {
    if (!in.is_string()) return false;
    CallArgs none;
    ASSIGN_OR_RETURN(Value r, CallMethod(in, name == "lower" ? "islower" : "isupper", none));
    return r.bool_value();
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!in.is_int() && !in.is_bool()) return TypeError("even/odd/divisibleby need an integer");
    const int64_t d = name == "divisibleby" ? (other != nullptr ? other->int_value() : 0) : 2;
    if (d == 0) return TypeError("integer division or modulo by zero");
    const int64_t r = ((in.int_value() % d) + d) % d;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (other == nullptr)
    return TypeError(absl::StrCat("the test '", std::string(name), "' needs an argument"));
  if (name == "sameas") {
    return in.kind() == other->kind() && (in.is_none() || in.is_undefined() ||
                                          (in.is_bool() && in.bool_value() == other->bool_value()));
  }
  if (name == "in") return Contains(*other, in);
  if (name == "eq" || name == "equalto" || name == "==") return Equals(in, *other);
  if (name == "ne" || name == "!=") return !Equals(in, *other);
  if (in.is_undefined()) return UndefinedError(in);
  if (other->is_undefined()) return UndefinedError(*other);
  if (name == "lt" || name == "lessthan" || name == "<") return Less(in, *other);
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(*other, in);
  ASSIGN_OR_RETURN(bool less, Less(name == "le" || name == "<=" ? *other : in,
                                   name == "le" || name == "<=" ? in : *other));
  return !less;  // le: !(other < in); ge: !(in < other)
}

}  // namespace ced::jinja
