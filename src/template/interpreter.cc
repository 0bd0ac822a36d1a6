#include "template/interpreter.h"

#include <functional>

#include "template/builtins.h"
#include "template/template_error.h"

namespace infera::jinja {
namespace {

// A macro (or the caller() of a call block) bound to the scope that defined it.
class MacroCallable final : public Callable {
 public:
  MacroCallable(const Node* node, std::shared_ptr<Frame> closure, Value caller = Value())
      : node_(node), closure_(std::move(closure)), caller_(std::move(caller)) {}

  Value Call(Interpreter& interpreter, CallArgs& args) const override {
    return interpreter.CallMacro(*node_, closure_, args,
                                 caller_.IsUndefined() ? nullptr : &caller_);
  }
  std::string Repr() const override {
    return "<Macro '" + (node_->type == Node::Type::kMacro ? node_->text : "caller") + "'>";
  }

 private:
  const Node* node_;
  std::shared_ptr<Frame> closure_;
  Value caller_;
};

// loop(...) in a `for ... recursive` loop.
class RecursiveLoop final : public Callable {
 public:
  // render(iterable, depth, out) renders the loop body over iterable one level deeper.
  RecursiveLoop(int depth, std::function<void(const Value&, int, std::string&)> render)
      : depth_(depth), render_(std::move(render)) {}

  Value Call(Interpreter& interpreter, CallArgs& args) const override {
    if (args.positional.size() != 1) ThrowRuntime("loop() takes exactly one argument");
    std::string out;
    render_(args.positional[0], depth_ + 1, out);
    return Value::String(std::move(out));
  }
  std::string Repr() const override { return "<LoopContext>"; }

 private:
  int depth_;
  std::function<void(const Value&, int, std::string&)> render_;
};

// loop.cycle(a, b, ...)
class CycleCallable final : public Callable {
 public:
  // index0: the loop's current iteration, updated by the loop.
  explicit CycleCallable(std::shared_ptr<const int64_t> index0) : index0_(std::move(index0)) {}
  Value Call(Interpreter&, CallArgs& args) const override {
    if (args.positional.empty()) ThrowRuntime("no items for cycling given");
    return args.positional[static_cast<size_t>(*index0_) % args.positional.size()];
  }
  std::string Repr() const override { return "<bound method LoopContext.cycle>"; }

 private:
  std::shared_ptr<const int64_t> index0_;
};

struct CallDepthGuard {
  CallDepthGuard(int* depth, int max) : depth_(depth) {
    if (++*depth_ > max) {
      --*depth_;
      throw TemplateError(TemplateError::Kind::kLimit,
                          "render limit: call depth exceeds " + std::to_string(max));
    }
  }
  ~CallDepthGuard() { --*depth_; }
  int* depth_;
};

constexpr std::string_view kRecurseName = "\x01loop";

}  // namespace

const Value* Frame::Find(std::string_view name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
    for (const auto& [k, v] : f->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Frame::Set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

Interpreter::~Interpreter() {
  for (const auto& weak : closures_) {
    std::shared_ptr<Frame> frame = weak.lock();
    for (Frame* f = frame.get(); f != nullptr; f = f->parent.get()) f->vars.clear();
  }
}

void Interpreter::RenderTemplate(const Body& body, const Dict& context, std::string& out) {
  auto root = std::make_shared<Frame>();
  root->vars = context.items;
  RenderBody(body, root, out);
}

void Interpreter::Append(std::string& out, std::string_view text) {
  CheckOutputSize(out.size() + text.size());
  out.append(text);
}

void Interpreter::CheckOutputSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw TemplateError(
        TemplateError::Kind::kLimit,
        "render limit: output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

void Interpreter::CountIterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations) {
    throw TemplateError(TemplateError::Kind::kLimit,
                        "render limit: more than " + std::to_string(limits_.max_loop_iterations) +
                            " loop iterations");
  }
}

Interpreter::Flow Interpreter::RenderBody(const Body& body, const std::shared_ptr<Frame>& frame,
                                          std::string& out) {
  for (const auto& node : body) {
    Flow flow = RenderNode(*node, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::RenderNode(const Node& node, const std::shared_ptr<Frame>& frame,
                                          std::string& out) {
  switch (node.type) {
    case Node::Type::kText:
      Append(out, node.text);
      return Flow::kNormal;
    case Node::Type::kOutput: {
      Value v = Eval(*node.expr, frame);
      if (v.IsString()) {
        Append(out, v.str());
      } else {
        Append(out, ToPyStr(v));
      }
      return Flow::kNormal;
    }
    case Node::Type::kIf:
      for (const auto& [cond, branch] : node.branches) {
        if (Eval(*cond, frame).Truthy()) return RenderBody(branch, frame, out);
      }
      return RenderBody(node.else_body, frame, out);
    case Node::Type::kFor:
      RenderFor(node, frame, Eval(*node.expr, frame), 0, out);
      return Flow::kNormal;
    case Node::Type::kSet:
      Assign(node, frame, Eval(*node.expr, frame));
      return Flow::kNormal;
    case Node::Type::kSetBlock: {
      std::string captured;
      RenderBody(node.body, frame, captured);
      Value v = Value::String(std::move(captured));
      if (node.expr) {
        const Value* saved = filter_block_input_;
        filter_block_input_ = &v;
        Value filtered = Eval(*node.expr, frame);
        filter_block_input_ = saved;
        v = std::move(filtered);
      }
      Assign(node, frame, std::move(v));
      return Flow::kNormal;
    }
    case Node::Type::kMacro:
      closures_.push_back(frame);
      frame->Set(node.text, Value::Function(std::make_shared<MacroCallable>(&node, frame)));
      return Flow::kNormal;
    case Node::Type::kCallBlock: {
      closures_.push_back(frame);
      Value caller = Value::Function(std::make_shared<MacroCallable>(&node, frame));
      const Expr& call = *node.expr;
      CallArgs args = EvalArgs(call, 1, frame);
      args.keyword.emplace_back("caller", caller);
      Value callee = Eval(*call.children[0], frame);
      Value result = Call(callee, args);
      Append(out, ToPyStr(result));
      return Flow::kNormal;
    }
    case Node::Type::kFilterBlock: {
      std::string captured;
      RenderBody(node.body, frame, captured);
      Value input = Value::String(std::move(captured));
      const Value* saved = filter_block_input_;
      filter_block_input_ = &input;
      Value filtered = Eval(*node.expr, frame);
      filter_block_input_ = saved;
      Append(out, ToPyStr(filtered));
      return Flow::kNormal;
    }
    case Node::Type::kBreak:
      return Flow::kBreak;
    case Node::Type::kContinue:
      return Flow::kContinue;
    case Node::Type::kWith: {
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      for (size_t i = 0; i < node.targets.size(); ++i) {
        scope->Set(node.targets[i], Eval(*node.values[i], frame));
      }
      return RenderBody(node.body, scope, out);
    }
    case Node::Type::kScope:
      return RenderBody(node.body, frame, out);
  }
  return Flow::kNormal;
}

void Interpreter::Assign(const Node& node, const std::shared_ptr<Frame>& frame, Value value) {
  if (!node.attribute.empty()) {
    const Value* ns = frame->Find(node.targets[0]);
    if (ns == nullptr || !ns->IsNamespace()) {
      ThrowRuntime("can't assign attribute on non-namespace object");
    }
    ns->mutable_namespace().Set(node.attribute, std::move(value));
    return;
  }
  if (node.targets.size() == 1) {
    frame->Set(node.targets[0], std::move(value));
    return;
  }
  ValueList items = builtins::Iterate(value);
  if (items.size() != node.targets.size()) {
    ThrowRuntime("cannot unpack " + std::to_string(items.size()) + " values into " +
                 std::to_string(node.targets.size()));
  }
  for (size_t i = 0; i < items.size(); ++i) frame->Set(node.targets[i], std::move(items[i]));
}

void Interpreter::RenderFor(const Node& node, const std::shared_ptr<Frame>& frame,
                            const Value& iterable, int depth, std::string& out) {
  CallDepthGuard guard(&call_depth_, limits_.max_call_depth);
  if (!iterable.IsUndefined() && !iterable.IsList() && !iterable.IsDict() && !iterable.IsString()) {
    ThrowRuntime("'" + std::string(iterable.TypeName()) + "' object is not iterable");
  }
  ValueList items = builtins::Iterate(iterable);
  CountIterations(static_cast<int64_t>(items.size()));
  auto bind = [&](Frame& scope, const Value& item) {
    if (node.targets.size() == 1) {
      scope.Set(node.targets[0], item);
      return;
    }
    ValueList parts = builtins::Iterate(item);
    if (parts.size() != node.targets.size()) {
      ThrowRuntime("cannot unpack " + std::to_string(parts.size()) + " values into " +
                   std::to_string(node.targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < parts.size(); ++i) scope.Set(node.targets[i], parts[i]);
  };
  if (node.condition) {
    ValueList kept;
    for (const Value& item : items) {
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      bind(*scope, item);
      if (Eval(*node.condition, scope).Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    RenderBody(node.else_body, frame, out);
    return;
  }
  Value recurse;
  if (node.recursive) {
    recurse = Value::Function(std::make_shared<RecursiveLoop>(
        depth, [this, &node, frame](const Value& v, int d, std::string& o) {
          RenderFor(node, frame, v, d, o);
        }));
  }
  const int64_t length = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place each iteration (like Jinja2's single
  // LoopContext whose properties follow the iteration), and one scope reused while no
  // macro or caller has captured it.
  auto index0 = std::make_shared<int64_t>(0);
  Dict loop_items;
  loop_items.items.reserve(12);
  for (const char* key : {"index0", "index", "revindex0", "revindex", "first", "last", "length",
                          "depth0", "depth", "previtem", "nextitem"}) {
    loop_items.items.emplace_back(key, Value());
  }
  loop_items.items.emplace_back("cycle", Value::Function(std::make_shared<CycleCallable>(index0)));
  Value loop = Value::Namespace(std::move(loop_items));
  std::shared_ptr<Frame> scope;
  for (int64_t i = 0; i < length; ++i) {
    if (scope == nullptr || scope.use_count() != 1) {
      scope = std::make_shared<Frame>();
      scope->parent = frame;
    } else {
      scope->vars.clear();
    }
    bind(*scope, items[static_cast<size_t>(i)]);
    *index0 = i;
    auto& v = loop.mutable_namespace().items;
    v[0].second = Value::Int(i);
    v[1].second = Value::Int(i + 1);
    v[2].second = Value::Int(length - i - 1);
    v[3].second = Value::Int(length - i);
    v[4].second = Value::Bool(i == 0);
    v[5].second = Value::Bool(i == length - 1);
    v[6].second = Value::Int(length);
    v[7].second = Value::Int(depth);
    v[8].second = Value::Int(depth + 1);
    v[9].second =
        i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("'previtem' is undefined");
    v[10].second = i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                  : Value::Undefined("'nextitem' is undefined");
    scope->Set("loop", loop);
    if (node.recursive) scope->Set(kRecurseName, recurse);
    Flow flow = RenderBody(node.body, scope, out);
    if (flow == Flow::kBreak) break;
  }
}

Value Interpreter::CallMacro(const Node& macro, const std::shared_ptr<Frame>& closure,
                             CallArgs& args, const Value* caller) {
  CallDepthGuard guard(&call_depth_, limits_.max_call_depth);
  auto scope = std::make_shared<Frame>();
  scope->parent = closure;
  const size_t param_count = macro.targets.size();
  if (args.positional.size() > param_count) {
    ValueList extra(args.positional.begin() + static_cast<std::ptrdiff_t>(param_count),
                    args.positional.end());
    scope->Set("varargs", Value::List(std::move(extra), true));
  } else {
    scope->Set("varargs", Value::List({}, true));
  }
  Dict kwargs;
  for (auto& [k, v] : args.keyword) {
    bool is_param = false;
    for (const auto& p : macro.targets) is_param |= p == k;
    if (!is_param && k != "caller") kwargs.Set(k, v);
  }
  scope->Set("kwargs", Value::FromDict(std::move(kwargs)));
  for (size_t i = 0; i < param_count; ++i) {
    const std::string& param = macro.targets[i];
    if (i < args.positional.size()) {
      scope->Set(param, args.positional[i]);
    } else if (const Value* kw = args.Keyword(param)) {
      scope->Set(param, *kw);
    } else if (macro.values[i]) {
      scope->Set(param, Eval(*macro.values[i], scope));
    } else {
      scope->Set(param, Value::Undefined("'" + param + "' is undefined"));
    }
  }
  if (const Value* kw = args.Keyword("caller")) {
    scope->Set("caller", *kw);
  } else if (caller != nullptr) {
    scope->Set("caller", *caller);
  }
  std::string out;
  RenderBody(macro.body, scope, out);
  return Value::String(std::move(out));
}

Value Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.IsUndefined()) builtins::ThrowUndefined(callee);
  if (!callee.IsCallable())
    ThrowRuntime("'" + std::string(callee.TypeName()) + "' object is not callable");
  return callee.callable().Call(*this, args);
}

Value Interpreter::ApplyFilter(std::string_view name, const Value& input, CallArgs& args) {
  return builtins::Filter(*this, name, input, args);
}

bool Interpreter::ApplyTest(std::string_view name, const Value& input, CallArgs& args) {
  return builtins::Test(*this, name, input, args);
}

Value Interpreter::Lookup(const std::string& name, const std::shared_ptr<Frame>& frame) {
  if (const Value* v = frame->Find(name)) return *v;
  Value global = builtins::Global(name);
  if (!global.IsUndefined()) return global;
  return Value::Undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::EvalArgs(const Expr& expr, size_t first,
                               const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  // Jinja2 evaluates `*args` / `**kwargs` after the plain arguments (its Call node
  // keeps them apart), so unpacking is done at the end, in that order.
  const Expr* star = nullptr;
  const Expr* star_star = nullptr;
  for (size_t i = first; i < expr.children.size(); ++i) {
    const std::string& name = expr.arg_names[i - first];
    if (name.empty()) {
      args.positional.push_back(Eval(*expr.children[i], frame));
    } else if (name == "*") {
      star = expr.children[i].get();
    } else if (name == "**") {
      star_star = expr.children[i].get();
    } else {
      args.keyword.emplace_back(name, Eval(*expr.children[i], frame));
    }
  }
  if (star != nullptr) {
    const Value v = Eval(*star, frame);
    if (v.IsUndefined() || v.IsNone() || v.IsNumber() || v.IsCallable()) {
      ThrowRuntime("argument after * must be an iterable, not " + std::string(v.TypeName()));
    }
    for (Value& item : builtins::Iterate(v)) args.positional.push_back(std::move(item));
  }
  if (star_star != nullptr) {
    const Value v = Eval(*star_star, frame);
    if (!v.IsDict()) {
      ThrowRuntime("argument after ** must be a mapping, not " + std::string(v.TypeName()));
    }
    for (const auto& [key, value] : v.dict().items) {
      for (const auto& [name, unused] : args.keyword) {
        if (name == key) ThrowRuntime("got multiple values for keyword argument '" + key + "'");
      }
      args.keyword.emplace_back(key, value);
    }
  }
  return args;
}

Value Interpreter::EvalFilter(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  Value input;
  if (expr.children[0]) {
    input = Eval(*expr.children[0], frame);
  } else if (filter_block_input_ != nullptr) {
    input = *filter_block_input_;
  }
  CallArgs args = EvalArgs(expr, 1, frame);
  return builtins::Filter(*this, expr.name, input, args);
}

Value Interpreter::EvalCompare(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  Value left = Eval(*expr.children[0], frame);
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    Value right = Eval(*expr.children[i + 1], frame);
    const std::string& op = expr.ops[i];
    bool ok;
    if (op == "==") {
      ok = Equals(left, right);
    } else if (op == "!=") {
      ok = !Equals(left, right);
    } else if (op == "in") {
      ok = builtins::Contains(right, left);
    } else if (op == "notin") {
      ok = !builtins::Contains(right, left);
    } else {
      if (left.IsUndefined()) builtins::ThrowUndefined(left);
      if (right.IsUndefined()) builtins::ThrowUndefined(right);
      int c = Compare(left, right);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Value Interpreter::Eval(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  switch (expr.type) {
    case Expr::Type::kConst:
      return expr.constant;
    case Expr::Type::kName:
      return Lookup(expr.name, frame);
    case Expr::Type::kGetAttr:
      return builtins::GetAttr(Eval(*expr.children[0], frame), expr.name);
    case Expr::Type::kGetItem:
      return builtins::GetItem(Eval(*expr.children[0], frame), Eval(*expr.children[1], frame));
    case Expr::Type::kSlice: {
      Value obj = Eval(*expr.children[0], frame);
      Value start = expr.children[1] ? Eval(*expr.children[1], frame) : Value::None();
      Value stop = expr.children[2] ? Eval(*expr.children[2], frame) : Value::None();
      Value step = expr.children[3] ? Eval(*expr.children[3], frame) : Value::None();
      return builtins::Slice(obj, start, stop, step);
    }
    case Expr::Type::kCall: {
      const Expr& callee = *expr.children[0];
      if (callee.type == Expr::Type::kGetAttr) {
        Value obj = Eval(*callee.children[0], frame);
        CallArgs args = EvalArgs(expr, 1, frame);
        if (obj.IsNamespace() || obj.IsUndefined()) {
          return Call(builtins::GetAttr(obj, callee.name), args);
        }
        return builtins::CallMethod(*this, obj, callee.name, args);
      }
      if (callee.type == Expr::Type::kName && callee.name == "loop") {
        if (const Value* recurse = frame->Find(kRecurseName)) {
          CallArgs args = EvalArgs(expr, 1, frame);
          return Call(*recurse, args);
        }
      }
      Value fn = Eval(callee, frame);
      CallArgs args = EvalArgs(expr, 1, frame);
      return Call(fn, args);
    }
    case Expr::Type::kFilter:
      return EvalFilter(expr, frame);
    case Expr::Type::kTest: {
      Value input = Eval(*expr.children[0], frame);
      CallArgs args = EvalArgs(expr, 1, frame);
      bool result = builtins::Test(*this, expr.name, input, args);
      return Value::Bool(expr.negated ? !result : result);
    }
    case Expr::Type::kNeg:
    case Expr::Type::kPos: {
      Value v = Eval(*expr.children[0], frame);
      if (v.IsUndefined()) builtins::ThrowUndefined(v);
      if (!v.IsNumber())
        ThrowRuntime("bad operand type for unary " +
                     std::string(expr.type == Expr::Type::kNeg ? "-" : "+") + ": '" +
                     std::string(v.TypeName()) + "'");
      if (expr.type == Expr::Type::kPos) return v.IsBool() ? Value::Int(v.int_value()) : v;
      if (v.IsFloat()) return Value::Float(-v.AsDouble());
      if (v.int_value() == INT64_MIN) ThrowRuntime("integer overflow");
      return Value::Int(-v.int_value());
    }
    case Expr::Type::kNot:
      return Value::Bool(!Eval(*expr.children[0], frame).Truthy());
    case Expr::Type::kBinary: {
      // Left operand first, as Python evaluates.
      Value left = Eval(*expr.children[0], frame);
      Value right = Eval(*expr.children[1], frame);
      // A chain a + b + c + ... of strings extends the left temporary instead of copying it
      // at every step.
      if (expr.name == "+" && left.IsString() && right.IsString()) {
        CheckOutputSize(left.str().size() + right.str().size());
        if (left.AppendIfUnique(right.str())) return left;
      }
      return builtins::BinaryOp(*this, expr.name, left, right);
    }
    case Expr::Type::kAnd: {
      Value left = Eval(*expr.children[0], frame);
      if (!left.Truthy()) return left;
      return Eval(*expr.children[1], frame);
    }
    case Expr::Type::kOr: {
      Value left = Eval(*expr.children[0], frame);
      if (left.Truthy()) return left;
      return Eval(*expr.children[1], frame);
    }
    case Expr::Type::kCompare:
      return EvalCompare(expr, frame);
    case Expr::Type::kCondition:
      if (Eval(*expr.children[0], frame).Truthy()) return Eval(*expr.children[1], frame);
      if (expr.children[2]) return Eval(*expr.children[2], frame);
      return Value::Undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    case Expr::Type::kConcat: {
      std::string s;
      for (const auto& child : expr.children) {
        AppendPyStr(Eval(*child, frame), s);
        CheckOutputSize(s.size());
      }
      return Value::String(std::move(s));
    }
    case Expr::Type::kList:
    case Expr::Type::kTuple: {
      ValueList items;
      items.reserve(expr.children.size());
      for (const auto& child : expr.children) items.push_back(Eval(*child, frame));
      return Value::List(std::move(items), expr.type == Expr::Type::kTuple);
    }
    case Expr::Type::kDict: {
      Dict dict;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        Value key = Eval(*expr.children[i], frame);
        if (!key.IsString()) ThrowRuntime("only string keys are supported in dict literals");
        dict.Set(key.str(), Eval(*expr.children[i + 1], frame));
      }
      return Value::FromDict(std::move(dict));
    }
  }
  return Value();
}

}  // namespace infera::jinja
