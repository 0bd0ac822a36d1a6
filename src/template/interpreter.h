// Interpreter: renders a parsed template (ast.h) with a context, applying Python/Jinja2
// semantics (scoping of loops and macros, Undefined, the sandbox's refusal to mutate
// lists and dicts) and the render limits. Internal to the engine: Template is the API.
//
// One Interpreter per Render call; not thread-safe, not reusable.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/ast.h"
#include "template/callable.h"
#include "template/value.h"

namespace infera::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16 << 20;
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
  int max_call_depth = 64;                  // nested macro calls / recursive loops
};

// A scope: for-loop iterations, macro calls and with-blocks open one.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
};

class Interpreter {
 public:
  // now: the wall-clock time strftime_now formats (broken down, local time).
  Interpreter(const RenderLimits& limits, std::tm now) : limits_(limits), now_(now) {}

  // Renders body into out with the root scope holding the context variables.
  void RenderTemplate(const Body& body, const Dict& context, std::string& out);

  // Used by builtins and callables.
  Value Call(const Value& callee, CallArgs& args);
  Value CallMacro(const Node& macro, const std::shared_ptr<Frame>& closure, CallArgs& args,
                  const Value* caller);
  void CountIterations(int64_t n);
  void CheckOutputSize(size_t bytes) const;
  const std::tm& now() const { return now_; }
  // Applies a filter or test by name (the `map`, `select` ... filters use these).
  Value ApplyFilter(std::string_view name, const Value& input, CallArgs& args);
  bool ApplyTest(std::string_view name, const Value& input, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow RenderBody(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow RenderNode(const Node& node, const std::shared_ptr<Frame>& frame, std::string& out);
  void RenderFor(const Node& node, const std::shared_ptr<Frame>& frame, const Value& iterable,
                 int depth, std::string& out);
  void Append(std::string& out, std::string_view text);

  Value Eval(const Expr& expr, const std::shared_ptr<Frame>& frame);
  Value Lookup(const std::string& name, const std::shared_ptr<Frame>& frame);
  CallArgs EvalArgs(const Expr& expr, size_t first, const std::shared_ptr<Frame>& frame);
  Value EvalFilter(const Expr& expr, const std::shared_ptr<Frame>& frame);
  Value EvalCompare(const Expr& expr, const std::shared_ptr<Frame>& frame);
  void Assign(const Node& node, const std::shared_ptr<Frame>& frame, Value value);

  RenderLimits limits_;
  std::tm now_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  const Value* filter_block_input_ = nullptr;
};

}  // namespace infera::jinja
