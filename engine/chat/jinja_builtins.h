// What a template can call or look up besides its own macros: filters,
// tests, methods of str/dict/list values, attribute and item access with
// Jinja's semantics, and the globals Hugging Face provides. Errors are
// InvalidArgument without a line (the evaluator adds it). Thread-safe.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_value.h"

namespace ced::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// `input | name(args)`.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
// `input is name(args)`.
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

// `obj.name`: a dict's key (or one of its methods: items, keys, values, get),
// a namespace's attribute, a str/dict method; otherwise undefined.
// InvalidArgument (UndefinedError) when obj is undefined.
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
// `obj[key]`: list/tuple/str index (negative from the end), dict key;
// missing: undefined. InvalidArgument when obj is undefined.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` on lists, tuples and str (null parts: Python defaults).
absl::StatusOr<Value> GetSlice(const Value& obj, const Value* start, const Value* stop,
                               const Value* step);

// True when obj.name(...) is a method call we implement (str/dict/list).
bool HasMethod(const Value& obj, std::string_view name);
absl::StatusOr<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args);

// The global functions: range, namespace, dict, raise_exception (an error
// whose message is the template's, marked by IsRaisedError), strftime_now.
const ValueDict& Globals();
bool IsRaisedError(const absl::Status& status);

// Python's iter(v) materialized: list items, dict keys, str code points;
// undefined: empty. InvalidArgument for non-iterables.
absl::StatusOr<ValueList> Iterate(const Value& v);
// Python's len(v) (str in code points); undefined: 0.
absl::StatusOr<int64_t> Length(const Value& v);
// The error for using an undefined value where Python raises UndefinedError.
absl::Status UndefinedError(const Value& v);

// Argument binding helper: the i-th positional or the keyword `name`, else null.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name);

}  // namespace ced::jinja
