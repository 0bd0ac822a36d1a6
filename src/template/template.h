// Template: a Jinja2 template engine that renders Hugging Face chat templates with the
// same output as Python Jinja2 under Hugging Face's settings (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, `tojson` as json.dumps(ensure_ascii=False),
// `raise_exception`, `strftime_now`). doc/chat-template.md lists what is supported.
//
//   absl::StatusOr<Template> t = Template::Parse("{{ greeting }}, {{ name | upper }}!");
//   jinja::Dict context;
//   context.Set("greeting", jinja::Value::String("Hello"));
//   context.Set("name", jinja::Value::String("world"));
//   absl::StatusOr<std::string> out = t->Render(context);  // "Hello, WORLD!"
//
// Errors: Parse returns InvalidArgument for syntax errors and unknown filters/tests;
// Render returns InvalidArgument for template errors (undefined access, type errors,
// raise_exception(message) gives the message) and ResourceExhausted when a render limit
// (output size, loop iterations, call depth) is hit: a template never hangs or crashes.
//
// Thread-safety: a parsed Template is immutable; Render may be called concurrently.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "template/ast.h"
#include "template/interpreter.h"
#include "template/value.h"

namespace infera::jinja {

struct RenderOptions {
  RenderLimits limits;
  // The time strftime_now formats (broken-down local time); unset = the current local time.
  std::optional<std::tm> now;
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source);

  absl::StatusOr<std::string> Render(const Dict& context, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace infera::jinja
