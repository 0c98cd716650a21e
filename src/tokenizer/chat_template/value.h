// The values a chat template computes with, modelled on the Python objects Jinja2 sees when
// transformers renders a template: None, bool, int, float, str, list, tuple, dict (insertion
// ordered), Jinja's Undefined, namespace objects, macros / builtin callables and loop objects.
// Python semantics matter for byte-exact output (str(True) == "True", 1 / 2 == 0.5, str() of a
// list is its repr, ...), so equality, ordering, truthiness and str()/repr() live here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace vllm::jinja {

class Value;
struct ListData;
struct DictData;
struct NamespaceData;
struct Callable;
struct LoopData;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,       // list or tuple (ListData::is_tuple)
    kGenerator,  // what map / select / items / ... return in Jinja: iterable only
    kDict,
    kNamespace,
    kCallable,
    kLoop,
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value generator(std::vector<Value> items);
  // A markupsafe.Markup string (from |safe or |escape): `+` escapes plain strings joined to it.
  static Value markup(std::string s);
  static Value dict(DictData d);
  static Value make_namespace();
  static Value callable(std::shared_ptr<const Callable> fn);
  static Value loop(std::shared_ptr<const LoopData> loop);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  // bool or int (Python's bool is an int).
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_generator() const { return kind_ == Kind::kGenerator; }
  bool is_markup() const { return kind_ == Kind::kString && b_; }
  bool is_tuple() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const;
  const std::vector<Value>& items() const;  // list / tuple / generator
  const DictData& as_dict() const;
  NamespaceData& as_namespace() const;
  const Callable& as_callable() const;
  const LoopData& as_loop() const;
  const std::string& undefined_hint() const;  // empty when none was given
  // Nesting depth of lists / dicts (1 for a flat list, 0 for scalars); the evaluator bounds it
  // so that printing, comparing and destroying values cannot exhaust the stack.
  int depth() const;

  // Python truthiness (Undefined is falsy).
  bool truthy() const;
  // Python type name, for error messages: "str", "int", "dict", "NoneType", ...
  std::string_view type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::shared_ptr<void> obj_;  // string / ListData / DictData / NamespaceData / Callable / ...
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
};

// A Python dict: insertion ordered, any hashable key (string keys are indexed).
struct DictData {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }
  int depth = 1;

 private:
  std::unordered_map<std::string, size_t> string_index_;
};

struct NamespaceData {
  DictData attrs;
};

class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A macro, a global function (range, namespace, raise_exception, ...) or a bound method
// ('abc'.upper, d.items, loop.cycle, ...).
struct Callable {
  std::string name;
  bool is_macro = false;
  std::function<Expected<Value>(Interpreter&, CallArgs&)> fn;
};

// Jinja's `loop` object for one iteration.
struct LoopData {
  std::shared_ptr<const std::vector<Value>> items;  // the (filtered) sequence iterated
  int64_t index0 = 0;
  int64_t depth0 = 0;
  std::shared_ptr<std::vector<Value>> last_changed;  // state of loop.changed(), per loop
};

// Python ==, as Jinja's comparisons and `in` use it.
bool py_equal(const Value& a, const Value& b);
// Python <; false with `*ok == false` when the types are not orderable.
bool py_less(const Value& a, const Value& b, bool* ok);

// Python str() and repr().
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
void append_py_str(const Value& v, std::string* out);
void append_py_repr(const Value& v, std::string* out);
std::string py_string_repr(std::string_view s);
std::string py_float_repr(double d);

// JSON input (object key order kept).
Value from_json(const nlohmann::ordered_json& j);

// json.dumps as transformers' tojson filter calls it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool pretty = false;            // indent given (possibly 0 or "")
  std::string indent;             // per level, when pretty
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Appends the JSON text; false (with *error set) for values JSON cannot hold (Undefined, ...).
bool json_dump(const Value& v, const JsonDumpOptions& options, std::string* out,
               std::string* error);

}  // namespace vllm::jinja
