#pragma once
// The op table: every operation of the IR declared once, in one row. Printing, hashing,
// verification, the interpreter, constant folding, code generation and autodiff all read
// their facts about an operation from here, so a new operation is one row (plus its front-end
// spelling in language.hpp).
#include <string_view>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm::ir {

enum class OpKind : std::uint8_t { leaf, elementwise, reduction };

// What a derivative rule sees: the node, its (possibly broadcast) adjoint, and `add`, which
// adds a contribution to the adjoint of argument `arg`. Contributions may have a larger shape
// than the argument; autodiff reduces them over the extra axes.
class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;
  virtual Graph& graph() = 0;
  virtual void add(int arg, NodeId contribution) = 0;
};
using GradRule = void (*)(GradientBuilder& builder, const Node& node, NodeId self, NodeId adjoint);

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;
  OpKind kind;
  bool commutative;
  // fp64 semantics, for the interpreter (the oracle). Elementwise ops only.
  double (*evaluate)(const Node& node, double a, double b, double c);
  // fp32 semantics, as the generated code computes, for constant folding. Kept apart from
  // `evaluate` so that the oracle shares no code with what it checks.
  float (*fold)(const Node& node, float a, float b, float c);
  // CUDA spelling over fp32 operands $0, $1, $2 (elementwise), or the prelude's reduction
  // operator (tn::kSum, tn::kMax, tn::kMin) for reductions.
  std::string_view cuda;
  // Reductions: the value of an empty reduction.
  double identity;
  // The derivative rule, or nullptr when the operation has none.
  GradRule gradient;
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) {
  return op_info(op).name;
}
inline int op_arity(Op op) {
  return op_info(op).arity;
}
inline bool is_reduction(Op op) {
  return op_info(op).kind == OpKind::reduction;
}
inline bool is_commutative(Op op) {
  return op_info(op).commutative;
}

}  // namespace tilenorm::ir
