// TemplateError: the exception the template engine throws internally. It never leaves
// the engine: Template::Parse and Template::Render catch it and return absl::Status.
#pragma once

#include <stdexcept>
#include <string>

namespace infera::jinja {

class TemplateError : public std::runtime_error {
 public:
  enum class Kind { kSyntax, kRuntime, kRaised, kLimit };
  TemplateError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

[[noreturn]] inline void ThrowRuntime(const std::string& message) {
  throw TemplateError(TemplateError::Kind::kRuntime, message);
}

}  // namespace infera::jinja
