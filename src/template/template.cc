#include "template/template.h"

#include <new>

#include "absl/status/status.h"
#include "template/builtins.h"
#include "template/parser.h"
#include "template/template_error.h"

namespace infera::jinja {
namespace {

// Jinja2 rejects unknown filters and tests when it compiles a template.
void CheckNames(const Expr& expr) {
  if (expr.type == Expr::Type::kFilter && !builtins::IsFilter(expr.name)) {
    throw TemplateError(TemplateError::Kind::kSyntax, "line " + std::to_string(expr.line) +
                                                          ": No filter named '" + expr.name + "'.");
  }
  if (expr.type == Expr::Type::kTest && !builtins::IsTest(expr.name)) {
    throw TemplateError(TemplateError::Kind::kSyntax, "line " + std::to_string(expr.line) +
                                                          ": No test named '" + expr.name + "'.");
  }
  for (const auto& child : expr.children) {
    if (child) CheckNames(*child);
  }
}

void CheckNames(const Body& body) {
  for (const auto& node : body) {
    for (const Expr* e : {node->expr.get(), node->condition.get()}) {
      if (e != nullptr) CheckNames(*e);
    }
    for (const auto& v : node->values) {
      if (v) CheckNames(*v);
    }
    for (const auto& [cond, branch] : node->branches) {
      CheckNames(*cond);
      CheckNames(branch);
    }
    CheckNames(node->body);
    CheckNames(node->else_body);
  }
}

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    auto body = std::make_shared<Body>(Parser::Parse(source));
    CheckNames(*body);
    return Template(std::move(body));
  } catch (const TemplateError& e) {
    return absl::InvalidArgumentError(std::string("template ") + e.what());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("template too large to parse");
  }
}

absl::StatusOr<std::string> Template::Render(const Dict& context,
                                             const RenderOptions& options) const {
  std::tm now{};
  if (options.now.has_value()) {
    now = *options.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  Interpreter interpreter(options.limits, now);
  std::string out;
  try {
    interpreter.RenderTemplate(*body_, context, out);
  } catch (const TemplateError& e) {
    switch (e.kind()) {
      case TemplateError::Kind::kLimit:
        return absl::ResourceExhaustedError(e.what());
      case TemplateError::Kind::kRaised:
        return absl::InvalidArgumentError(std::string("template raised: ") + e.what());
      default:
        return absl::InvalidArgumentError(std::string("template error: ") + e.what());
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("template render ran out of memory");
  }
  return out;
}

}  // namespace infera::jinja
