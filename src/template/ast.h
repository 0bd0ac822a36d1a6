// The syntax tree of a parsed template: expressions (Expr) and statements (Node).
// Built once by Parser, then read-only: a Template may be rendered from many threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace infera::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kConst,      // constant
    kName,       // name
    kGetAttr,    // children[0].name
    kGetItem,    // children[0][children[1]]
    kSlice,      // children[0][children[1]:children[2]:children[3]] (null = omitted)
    kCall,       // children[0](children[1..]); arg_names[i] names children[i+1] ("" = positional)
    kFilter,     // children[0] | name(children[1..]); children[0] null in a filter block
    kTest,       // children[0] is [not] name(children[1..])
    kNeg,        // -children[0]
    kPos,        // +children[0]
    kNot,        // not children[0]
    kBinary,     // children[0] op children[1]: + - * / // % **
    kAnd,        // children[0] and children[1]
    kOr,         // children[0] or children[1]
    kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
    kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
    kConcat,     // children joined with ~
    kList,
    kTuple,
    kDict,  // children: key0, value0, key1, value1, ...
  };

  Type type = Type::kConst;
  int line = 0;
  Value constant;
  std::string name;      // kName, kGetAttr, kFilter, kTest, kBinary (operator)
  bool negated = false;  // kTest
  std::vector<ExprPtr> children;
  std::vector<std::string> arg_names;  // kCall, kFilter, kTest
  std::vector<std::string> ops;        // kCompare: == != < <= > >= in notin
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Type {
    kText,
    kOutput,       // {{ expr }}
    kIf,           // branches (cond, body) ... else_body
    kFor,          // for targets in expr [if filter] body [else else_body]
    kSet,          // set targets = expr | set namespace_name.attribute = expr
    kSetBlock,     // set target [| filter] body endset
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr body
    kFilterBlock,  // filter chain body
    kBreak,
    kContinue,
    kWith,   // with targets[i] = values[i] body
    kScope,  // body rendered in place (generation blocks)
  };

  Type type = Type::kText;
  int line = 0;
  std::string text;                  // kText; kSet/kSetBlock/kMacro: target or macro name
  std::string attribute;             // kSet on a namespace: the attribute
  ExprPtr expr;                      // output, for iterable, set value, call expr, filter chain
  ExprPtr condition;                 // for ... if condition
  bool recursive = false;            // for ... recursive
  std::vector<std::string> targets;  // for/set/with names; macro/caller parameter names
  std::vector<ExprPtr> values;       // with values; macro/caller parameter defaults (may be null)
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

}  // namespace infera::jinja
