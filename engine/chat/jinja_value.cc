#include "engine/chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_text.h"
#include "engine/common/status.h"

namespace ced::jinja {

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(std::string key, Value value) {
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.l_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.m_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}
Value Value::Namespace(ValueDict attrs) {
  Value v = Dict(std::move(attrs));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Function(std::string name, std::function<absl::StatusOr<Value>(const CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.c_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  return s_ ? *s_ : kEmpty;
}
const ValueList& Value::list() const {
  static const ValueList kEmpty;
  return l_ ? *l_ : kEmpty;
}
const ValueDict& Value::dict() const {
  static const ValueDict kEmpty;
  return m_ ? *m_ : kEmpty;
}
ValueDict& Value::namespace_attrs() const { return *m_; }
const Callable& Value::callable() const { return *c_; }

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.float_value() != 0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
      return !v.list().empty();
    case Value::Kind::kDict:
      return v.dict().size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {
std::string DictRepr(const ValueDict& d) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (!first) out += ", ";
    first = false;
    absl::StrAppend(&out, PyStrRepr(k), ": ", Repr(v));
  }
  return out + "}";
}
}  // namespace

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.str();
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.int_value());
    case Value::Kind::kFloat:
      return PyFloatRepr(v.float_value());
    case Value::Kind::kString:
      return PyStrRepr(v.str());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += ", ";
        out += Repr(v.list()[i]);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::kDict:
      return DictRepr(v.dict());
    case Value::Kind::kNamespace:
      return "<Namespace " + DictRepr(v.dict()) + ">";
    case Value::Kind::kCallable:
      return "<function " + v.callable().name + ">";
  }
  return "";
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return &a.dict() == &b.dict();  // identity (namespaces, callables)
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order = code points
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& x : container.list()) {
        if (Equals(x, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

namespace {
void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    char32_t c = DecodeUtf8(s, &pos);
    char buf[16];
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (unsigned)(v >> 10),
                          0xDC00 + (unsigned)(v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          }
          *out += buf;
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  out->push_back('"');
}

absl::Status JsonValue(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 200) return absl::InvalidArgumentError("tojson: nesting too deep");
  const std::string item_sep =
      !o.item_separator.empty() ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int level) {
    if (o.indent >= 0) {
      out->push_back('\n');
      out->append(static_cast<size_t>(o.indent) * level, ' ');
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.float_value();
      if (std::isnan(d))
        *out += "NaN";
      else if (std::isinf(d))
        *out += d > 0 ? "Infinity" : "-Infinity";
      else
        *out += PyFloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      JsonString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        RETURN_IF_ERROR(JsonValue(v.list()[i], o, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().size() == 0) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items()) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        JsonString(items[i]->first, o.ensure_ascii, out);
        *out += key_sep;
        RETURN_IF_ERROR(JsonValue(items[i]->second, o, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}
}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  RETURN_IF_ERROR(JsonValue(v, options, 0, &out));
  return out;
}

}  // namespace ced::jinja
