// Value: the dynamic value of the template language, modelled on the Python objects
// Jinja2 sees when Hugging Face renders a chat template (str, int, float, bool, None,
// list/tuple, dict with insertion order, jinja2's Undefined and Namespace, callables).
//
// Strings are UTF-8 byte strings; operations that Python defines on code points
// (length, indexing, slicing) decode on demand. Lists and dicts are shared and
// immutable once built (the Hugging Face environment is an ImmutableSandboxedEnvironment);
// a Namespace is shared and mutable through `{% set ns.attr = ... %}`.
//
// Thread-safety: a Value is not synchronised; values built while rendering are local to
// one Render call. Values shared between threads must not be mutated.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infera::jinja {

class Value;
class Callable;

using ValueList = std::vector<Value>;

// An insertion-ordered mapping with string keys (JSON objects, dict literals,
// namespaces). Lookup is linear: chat-template dicts are small.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* Find(std::string_view key) const;
  // Replaces the value of an existing key in place, or appends.
  void Set(std::string key, Value value);
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
  };

  Value() = default;  // Undefined.
  static Value Undefined(std::string name = {});
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.b_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.i_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v(Kind::kFloat);
    v.f_ = f;
    return v;
  }
  static Value String(std::string s);
  static Value List(ValueList items, bool is_tuple = false);
  static Value FromDict(Dict dict);
  static Value Namespace(Dict attributes);
  static Value Function(std::shared_ptr<const Callable> fn);
  // JSON → Value (objects keep the order of the ordered_json they came from).
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  // Python numbers: int, float and bool.
  bool IsNumber() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kList && is_tuple_; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsNamespace() const { return kind_ == Kind::kNamespace; }
  bool IsCallable() const { return kind_ == Kind::kCallable; }

  // REQUIRES: the matching kind.
  bool bool_value() const { return b_; }
  int64_t int_value() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double AsDouble() const;  // REQUIRES: IsNumber().
  const std::string& str() const {
    return (kind_ == Kind::kString || kind_ == Kind::kUndefined) && payload_ != nullptr
               ? *static_cast<const std::string*>(payload_.get())
               : EmptyString();
  }
  const ValueList& list() const { return *static_cast<const ValueList*>(payload_.get()); }
  const Dict& dict() const { return *static_cast<const Dict*>(payload_.get()); }
  // The namespace's Dict was created mutable (Namespace()).
  Dict& mutable_namespace() const {
    return *const_cast<Dict*>(static_cast<const Dict*>(payload_.get()));
  }
  const Callable& callable() const { return *static_cast<const Callable*>(payload_.get()); }
  // The name an Undefined was looked up under (for error messages).
  const std::string& undefined_name() const { return str(); }

  // Appends `tail` to this string in place when no other value shares its text (a
  // temporary built by the render, e.g. the left side of a `+` chain); false otherwise
  // (not a string, or shared), leaving the value unchanged.
  bool AppendIfUnique(std::string_view tail);

  // Python truthiness; Undefined is false.
  bool Truthy() const;
  // Python type name for error messages ("str", "int", "dict", "NoneType", ...).
  std::string_view TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  static const std::string& EmptyString();

  Kind kind_ = Kind::kUndefined;
  bool is_tuple_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  // The shared object of a string (std::string; an Undefined's name), list (ValueList),
  // dict or namespace (Dict) or callable (Callable), by kind; null otherwise. One pointer
  // keeps values small (copied on every lookup) and shared, so copying a value never
  // copies the text of a long message.
  std::shared_ptr<const void> payload_;
};

// Python's str() and repr() of a value.
std::string ToPyStr(const Value& value);
std::string ToPyRepr(const Value& value);
void AppendPyStr(const Value& value, std::string& out);

// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...), as
// Hugging Face binds the `tojson` filter. Throws TemplateError for values JSON cannot
// hold (Undefined, callables).
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string ToJson(const Value& value, const JsonOptions& options);

// Python ==, and the ordering of <, <= ... (throws TemplateError when Python would raise
// TypeError). Compare returns <0, 0 or >0.
bool Equals(const Value& a, const Value& b);
int Compare(const Value& a, const Value& b);

}  // namespace infera::jinja
