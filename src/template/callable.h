// Callable: a function value of the template language (builtin globals such as
// range/namespace/raise_exception, bound string/dict methods, macros and caller()).
//
// Thread-safety: builtin callables are immutable and shareable; macros hold references
// to the render that defined them and live only within it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.h"

namespace infera::jinja {

class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The keyword argument `name`, or nullptr.
  const Value* Keyword(std::string_view name) const;
};

class Callable {
 public:
  virtual ~Callable() = default;
  // Throws TemplateError (template/template_error.h) on a template-level failure.
  virtual Value Call(Interpreter& interpreter, CallArgs& args) const = 0;
  // What Python's str() shows for it.
  virtual std::string Repr() const = 0;
};

}  // namespace infera::jinja
