// The value type of the Jinja engine, with Python's semantics for what chat
// templates do with values: truthiness, str(), repr(), ==, <, `in`, and
// json.dumps (Hugging Face's `tojson`). Values are cheap to copy (strings,
// lists and dicts are shared, immutable once built); a namespace is the one
// mutable kind (`{% set ns.x = ... %}`) and is shared by reference, as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::jinja {

class Value;
using ValueList = std::vector<Value>;

// An insertion-ordered str -> Value map (Python dicts keep insertion order).
class ValueDict {
 public:
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable value: a macro, a global function or a bound method.
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(const CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items, bool tuple = false);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict attrs);
  static Value Function(std::string name, std::function<absl::StatusOr<Value>(const CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python numbers: bool, int, float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double float_value() const { return is_float() ? d_ : static_cast<double>(int_value()); }
  const std::string& str() const;  // strings; an undefined's name
  const ValueList& list() const;
  const ValueDict& dict() const;       // dicts and namespaces
  ValueDict& namespace_attrs() const;  // namespaces only
  const Callable& callable() const;

  // Python type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ValueList> l_;
  std::shared_ptr<ValueDict> m_;
  std::shared_ptr<const Callable> c_;
};

// Python's bool(v); undefined is false.
bool Truthy(const Value& v);
// Python's str(v) as Jinja prints it ({{ v }}); undefined prints as "".
std::string ToStr(const Value& v);
// Python's repr(v) (how lists and dicts print their items).
std::string Repr(const Value& v);
// Python's a == b (1 == 1.0 == True; lists and dicts deeply; undefined == undefined).
bool Equals(const Value& a, const Value& b);
// Python's a < b; InvalidArgument (TypeError) for unorderable types.
absl::StatusOr<bool> Less(const Value& a, const Value& b);
// Python's `a in b`; InvalidArgument for a non-container b.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys): Hugging Face's
// tojson. indent < 0: none. Empty separators: Python's defaults.
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options);

}  // namespace ced::jinja
