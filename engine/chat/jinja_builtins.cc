// Attribute/item access, methods, globals (filters and tests: jinja_filters.cc).
#include "engine/chat/jinja_builtins.h"

#include <chrono>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_text.h"
#include "engine/common/status.h"

namespace ced::jinja {
namespace {

constexpr char kRaisedPayload[] = "ced.jinja/raise_exception";
constexpr int64_t kMaxRange = 1 << 20;

absl::Status TypeError(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

absl::StatusOr<std::string> StrArg(const CallArgs& args, size_t i, std::string_view name,
                                   std::string_view method, const std::string* fallback) {
  const Value* v = Arg(args, i, name);
  if (v == nullptr || v->is_none()) {
    if (fallback != nullptr) return *fallback;
    return TypeError(
        absl::StrCat(std::string(method), "() missing argument '", std::string(name), "'"));
  }
  if (!v->is_string()) {
    return TypeError(absl::StrCat(std::string(method), "() argument '", std::string(name),
                                  "' must be str, not ", v->TypeName()));
  }
  return v->str();
}

int64_t IntArg(const CallArgs& args, size_t i, std::string_view name, int64_t fallback) {
  const Value* v = Arg(args, i, name);
  return v != nullptr && (v->is_int() || v->is_bool()) ? v->int_value() : fallback;
}

bool IsDictMethod(std::string_view n) {
  return n == "items" || n == "keys" || n == "values" || n == "get";
}
bool IsStrMethod(std::string_view n) {
  static const char* kNames[] = {"startswith", "endswith",   "split",     "rsplit",  "strip",
                                 "lstrip",     "rstrip",     "replace",   "lower",   "upper",
                                 "title",      "capitalize", "find",      "rfind",   "count",
                                 "join",       "isdigit",    "isspace",   "isalpha", "isalnum",
                                 "islower",    "isupper",    "splitlines"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}
bool IsListMutator(std::string_view n) {
  return n == "append" || n == "extend" || n == "insert" || n == "pop" || n == "remove" ||
         n == "clear" || n == "sort" || n == "reverse" || n == "update" || n == "setdefault" ||
         n == "popitem";
}

absl::StatusOr<Value> StrMethod(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "startswith" || name == "endswith") {
    const Value* p = Arg(a, 0, "prefix");
    if (p == nullptr)
      return TypeError(absl::StrCat(std::string(name), "() takes at least 1 argument"));
    ValueList options = p->is_tuple() ? p->list() : ValueList{*p};
    for (const Value& o : options) {
      if (!o.is_string()) {
        return TypeError(absl::StrCat(
            std::string(name), " first arg must be str or a tuple of str, not ", o.TypeName()));
      }
      const std::string& x = o.str();
      if (x.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                               : s.compare(s.size() - x.size(), x.size(), x) == 0) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = Arg(a, 0, "sep");
    if (sep != nullptr && !sep->is_none() && !sep->is_string()) {
      return TypeError(absl::StrCat("must be str or None, not ", sep->TypeName()));
    }
    if (sep != nullptr && sep->is_string() && sep->str().empty())
      return TypeError("empty separator");
    const std::string* sep_str = sep != nullptr && sep->is_string() ? &sep->str() : nullptr;
    ValueList out;
    for (std::string& part : PySplit(s, sep_str, IntArg(a, 1, "maxsplit", -1), name == "rsplit")) {
      out.push_back(Value::String(std::move(part)));
    }
    return Value::List(std::move(out));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = Arg(a, 0, "chars");
    if (chars != nullptr && !chars->is_none() && !chars->is_string()) {
      return TypeError(absl::StrCat(std::string(name), " arg must be None or str"));
    }
    const std::string* c = chars != nullptr && chars->is_string() ? &chars->str() : nullptr;
    return Value::String(PyStrip(s, c, name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::string from, StrArg(a, 0, "old", name, nullptr));
    ASSIGN_OR_RETURN(std::string to, StrArg(a, 1, "new", name, nullptr));
    return Value::String(PyReplace(s, from, to, IntArg(a, 2, "count", -1)));
  }
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "find" || name == "rfind" || name == "count") {
    ASSIGN_OR_RETURN(std::string sub, StrArg(a, 0, "sub", name, nullptr));
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointLength(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    const size_t hit = name == "find" ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(CodePointLength(std::string_view(s).substr(0, hit))));
  }
  if (name == "join") {
    const Value* items = Arg(a, 0, "iterable");
    if (items == nullptr) return TypeError("join() takes exactly one argument");
    ASSIGN_OR_RETURN(ValueList list, Iterate(*items));
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      list[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += list[i].str();
    }
    return Value::String(std::move(out));
  }
  if (name == "splitlines") {
    ValueList out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(Value::String(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.push_back(Value::String(s.substr(start)));
    return Value::List(std::move(out));
  }
  // is* predicates (ASCII classes; non-ASCII code points count as letters).
  const std::vector<char32_t> cps = ToCodePoints(s);
  bool all = !cps.empty(), any_cased = false, any_upper = false, any_lower = false;
  for (char32_t c : cps) {
    const bool digit = c >= '0' && c <= '9';
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c > 0x7F && !IsPySpace(c));
    if (name == "isdigit") all &= digit;
    if (name == "isspace") all &= IsPySpace(c);
    if (name == "isalpha") all &= alpha;
    if (name == "isalnum") all &= alpha || digit;
    if (PyLower(FromCodePoints({c}, 0, 1)) != PyUpper(FromCodePoints({c}, 0, 1))) {
      any_cased = true;
      (PyLower(FromCodePoints({c}, 0, 1)) == FromCodePoints({c}, 0, 1) ? any_lower : any_upper) =
          true;
    }
  }
  if (name == "islower") return Value::Bool(any_cased && !any_upper);
  if (name == "isupper") return Value::Bool(any_cased && !any_lower);
  return Value::Bool(all);
}

}  // namespace

const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  if (i < args.positional.size()) return &args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.str().empty() ? "undefined value used" : v.str());
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& kv : v.dict().items()) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : ToCodePoints(v.str()))
        chars.push_back(Value::String(FromCodePoints({c}, 0, 1)));
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointLength(v.str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

bool HasMethod(const Value& obj, std::string_view name) {
  return (obj.is_string() && IsStrMethod(name)) || (obj.is_dict() && IsDictMethod(name));
}

absl::StatusOr<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_string() && IsStrMethod(name)) return StrMethod(obj.str(), name, args);
  if (obj.is_dict() && IsDictMethod(name)) {
    const ValueDict& d = obj.dict();
    if (name == "get") {
      const Value* key = Arg(args, 0, "key");
      if (key == nullptr) return TypeError("get expected at least 1 argument");
      const Value* hit = key->is_string() ? d.Find(key->str()) : nullptr;
      if (hit != nullptr) return *hit;
      const Value* def = Arg(args, 1, "default");
      return def != nullptr ? *def : Value::None();
    }
    ValueList out;
    for (const auto& [k, v] : d.items()) {
      if (name == "items")
        out.push_back(Value::List({Value::String(k), v}, /*tuple=*/true));
      else if (name == "keys")
        out.push_back(Value::String(k));
      else
        out.push_back(v);
    }
    return Value::List(std::move(out));
  }
  if ((obj.is_list() || obj.is_dict()) && IsListMutator(name)) {
    return TypeError(absl::StrCat("unsupported construct: ", obj.TypeName(), ".", std::string(name),
                                  "() (templates cannot modify lists or dicts)"));
  }
  return TypeError(
      absl::StrCat("'", obj.TypeName(), "' object has no method '", std::string(name), "'"));
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_namespace() || (obj.is_dict() && !IsDictMethod(name))) {
    const Value* hit = obj.dict().Find(name);
    if (hit != nullptr) return *hit;
  } else if (HasMethod(obj, name) || ((obj.is_list() || obj.is_dict()) && IsListMutator(name))) {
    Value self = obj;
    std::string method(name);
    return Value::Function(
        method, [self, method](const CallArgs& args) { return CallMethod(self, method, args); });
  }
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute '", std::string(name), "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[i];
    } else {
      const std::vector<char32_t> cps = ToCodePoints(obj.str());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(FromCodePoints(cps, i, i + 1));
    }
  } else if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const Value* hit = obj.dict().Find(key.str());
    if (hit != nullptr) return *hit;
    if (obj.is_dict() && IsDictMethod(key.str())) return GetAttr(obj, key.str());
  } else if (key.is_string()) {
    return GetAttr(obj, key.str());
  }
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element ", Repr(key)));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value* start, const Value* stop,
                               const Value* step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto as_int = [](const Value* v, int64_t* out) -> absl::Status {
    if (v == nullptr || v->is_none()) return absl::OkStatus();
    if (!v->is_int() && !v->is_bool()) {
      return TypeError("slice indices must be integers or None");
    }
    *out = v->int_value();
    return absl::OkStatus();
  };
  int64_t st = 1;
  RETURN_IF_ERROR(as_int(step, &st));
  if (st == 0) return TypeError("slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = ToCodePoints(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else {
    return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' is not subscriptable"));
  }
  int64_t b = st > 0 ? 0 : n - 1, e = st > 0 ? n : -1;
  auto clamp = [&](const Value* v, int64_t* out) -> absl::Status {
    if (v == nullptr || v->is_none()) return absl::OkStatus();
    int64_t x = 0;
    RETURN_IF_ERROR(as_int(v, &x));
    if (x < 0) x += n;
    if (st > 0)
      x = std::clamp<int64_t>(x, 0, n);
    else
      x = std::clamp<int64_t>(x, -1, n - 1);
    *out = x;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(clamp(start, &b));
  RETURN_IF_ERROR(clamp(stop, &e));
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : idx) AppendUtf8(cps[i], &out);
    return Value::String(std::move(out));
  }
  ValueList out;
  for (int64_t i : idx) out.push_back(obj.list()[i]);
  return Value::List(std::move(out), obj.is_tuple());
}

bool IsRaisedError(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

const ValueDict& Globals() {
  static const ValueDict* globals = [] {
    auto* g = new ValueDict();
    g->Set("raise_exception",
           Value::Function("raise_exception", [](const CallArgs& a) -> absl::StatusOr<Value> {
             const Value* msg = Arg(a, 0, "message");
             absl::Status st = absl::InvalidArgumentError(msg != nullptr ? ToStr(*msg) : "");
             st.SetPayload(kRaisedPayload, absl::Cord("1"));
             return st;
           }));
    g->Set("namespace",
           Value::Function("namespace", [](const CallArgs& a) -> absl::StatusOr<Value> {
             ValueDict attrs;
             for (const Value& p : a.positional) {
               if (!p.is_dict()) return TypeError("namespace() takes only a dict positionally");
               for (const auto& [k, v] : p.dict().items()) attrs.Set(k, v);
             }
             for (const auto& [k, v] : a.keyword) attrs.Set(k, v);
             return Value::Namespace(std::move(attrs));
           }));
    g->Set("dict", Value::Function("dict", [](const CallArgs& a) -> absl::StatusOr<Value> {
             ValueDict d;
             for (const Value& p : a.positional) {
               if (!p.is_dict()) return TypeError("dict() takes only a dict positionally");
               for (const auto& [k, v] : p.dict().items()) d.Set(k, v);
             }
             for (const auto& [k, v] : a.keyword) d.Set(k, v);
             return Value::Dict(std::move(d));
           }));
    g->Set("range", Value::Function("range", [](const CallArgs& a) -> absl::StatusOr<Value> {
             if (a.positional.empty() || a.positional.size() > 3 || !a.keyword.empty()) {
               return TypeError("range() takes 1 to 3 positional arguments");
             }
             int64_t p[3] = {0, 0, 1};
             for (size_t i = 0; i < a.positional.size(); ++i) {
               const Value& v = a.positional[i];
               if (!v.is_int() && !v.is_bool()) {
                 return TypeError(absl::StrCat("'", v.TypeName(),
                                               "' object cannot be interpreted as an integer"));
               }
               p[a.positional.size() == 1 ? 1 : i] = v.int_value();
             }
             if (p[2] == 0) return TypeError("range() arg 3 must not be zero");
             ValueList out;
             for (int64_t i = p[0]; p[2] > 0 ? i < p[1] : i > p[1]; i += p[2]) {
               if (static_cast<int64_t>(out.size()) >= kMaxRange) {
                 return TypeError(absl::StrCat("range() longer than ", kMaxRange, " items"));
               }
               out.push_back(Value::Int(i));
             }
             return Value::List(std::move(out));
           }));
    g->Set("strftime_now",
           Value::Function("strftime_now", [](const CallArgs& a) -> absl::StatusOr<Value> {
             const Value* fmt = Arg(a, 0, "format");
             if (fmt == nullptr || !fmt->is_string())
               return TypeError("strftime_now() needs a format string");
             const std::time_t now = std::time(nullptr);
             std::tm local{};
             localtime_r(&now, &local);
             char buf[512];
             const size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &local);
             return Value::String(std::string(buf, n));
           }));
    return g;
  }();
  return *globals;
}

}  // namespace ced::jinja
