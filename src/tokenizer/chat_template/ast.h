// The parsed form of a template: expressions and statements, each with the line and column
// where it starts so that run-time errors can point at the template source.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace vllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// Arguments of a call, filter or test: f(a, b, k=v, *args, **kwargs).
struct CallArgNodes {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star;       // *args
  ExprPtr star_star;  // **kwargs
};

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // operands
    kTuple,     // operands
    kDict,      // operands: key0, value0, key1, value1, ...
    kGetAttr,   // operands[0].name
    kGetItem,   // operands[0][operands[1]]
    kSlice,     // operands[0][a:b:c]; operands[1..3] may be null
    kCall,      // operands[0](args)
    kFilter,    // operands[0] | name(args); operands[0] null inside {% filter %} / set blocks
    kTest,      // operands[0] is name(args)
    kNeg,       // -operands[0]
    kPos,       // +operands[0]
    kNot,       // not operands[0]
    kBinary,    // operands[0] op operands[1], op in + - * / // % **
    kConcat,    // operands joined with ~
    kAnd,       // operands[0] and operands[1]
    kOr,        // operands[0] or operands[1]
    kCompare,   // operands[0] ops[0] operands[1] ops[1] operands[2] ...
    kCondExpr,  // operands[1] if operands[0] else operands[2] (operands[2] may be null)
  };

  Kind kind = Kind::kLiteral;
  int line = 1;
  int column = 1;
  int depth = 1;  // height of this subtree (bounded by the parser)
  Value literal;
  std::string name;  // variable, attribute, filter or test name; binary operator
  std::vector<ExprPtr> operands;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
  CallArgNodes args;
};

// Assignment target of for / set / with.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;  // variable (or namespace variable)
  std::string attr;  // kNamespaceAttr
  std::vector<Target> items;  // kTuple
  int line = 1;
  int column = 1;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches + else_body
    kFor,          // for target in expr [if filter] body [else else_body]
    kSet,          // set target = expr
    kSetBlock,     // set target [| filters in expr] body endset
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr body endcall
    kFilterBlock,  // filter expr body endfilter
    kWith,         // with assignments body
    kBreak,
    kContinue,
    kScope,        // a body run in place ({% generation %})
  };

  Kind kind = Kind::kText;
  int line = 1;
  int column = 1;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  Target target;
  ExprPtr filter;  // kFor: the loop filter ("for x in xs if cond")
  bool recursive = false;
  std::string name;                  // macro name
  std::vector<std::string> params;   // macro / call block parameters
  std::vector<ExprPtr> defaults;     // defaults of the last params.size() - ... parameters
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
};

}  // namespace vllm::jinja
