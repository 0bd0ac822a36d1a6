// Builtins of the template language as Hugging Face's Jinja2 environment has them:
// filters, tests, the global functions (range, namespace, dict, raise_exception,
// strftime_now, ...), attribute/item access, Python str/dict/list methods, and the
// operators. All throw TemplateError where Python/Jinja2 would raise.
#pragma once

#include <string_view>

#include "template/callable.h"
#include "template/value.h"

namespace infera::jinja {

class Interpreter;

namespace builtins {

bool IsFilter(std::string_view name);
bool IsTest(std::string_view name);

Value Filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
bool Test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
// A global function (range, namespace, ...), or Undefined.
Value Global(std::string_view name);

// obj.name and obj[key] with Jinja2's getattr/getitem fallbacks.
Value GetAttr(const Value& obj, std::string_view name);
Value GetItem(const Value& obj, const Value& key);
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// obj.name(args): a str/dict/list method.
Value CallMethod(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args);

Value BinaryOp(Interpreter& in, std::string_view op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);
// Python iteration: list items, dict keys, str code points; Undefined is empty.
ValueList Iterate(const Value& value);
// Raises UndefinedError for an Undefined operand.
[[noreturn]] void ThrowUndefined(const Value& value);

}  // namespace builtins
}  // namespace infera::jinja
