#include <cmath>

#include "rewrite.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;

// Compares bit patterns, so that +0 and -0 differ: x + (-0) is x for every x, while x + (+0)
// turns -0 into +0 and is not an identity.
bool is_constant(const ir::Graph& g, NodeId id, double value) {
  const Node& n = g.node(id);
  return n.op == Op::constant && n.value == value && std::signbit(n.value) == std::signbit(value);
}

NodeId simplify_node(const Node& node, ir::Graph& g) {
  const bool all_constant = node.arity > 0 && [&] {
    for (int i = 0; i < node.arity; ++i) {
      if (g.node(node.args[i]).op != Op::constant) return false;
    }
    return true;
  }();
  if (all_constant && !ir::is_reduction(node.op)) {
    // Folded in fp32, as the generated code would compute it.
    auto arg = [&](int i) {
      return i < node.arity ? static_cast<float>(g.node(node.args[i]).value) : 0.0f;
    };
    return g.constant(ir::op_info(node.op).fold(node, arg(0), arg(1), arg(2)));
  }
  const NodeId a = node.args[0];
  const NodeId b = node.args[1];
  // Identities apply only when the kept operand already has the result's shape, so a
  // broadcast is never lost.
  auto keeps_shape = [&](NodeId kept) {
    return g.node(kept).shape == ir::broadcast(g.node(a).shape, g.node(b).shape);
  };
  // Identities, by operation; an operation with none is interned as it is.
  if (node.op == Op::add) {
    if (is_constant(g, b, -0.0) && keeps_shape(a)) return a;
    if (is_constant(g, a, -0.0) && keeps_shape(b)) return b;
  } else if (node.op == Op::sub) {
    if (is_constant(g, b, 0.0) && keeps_shape(a)) return a;
  } else if (node.op == Op::mul) {
    if (is_constant(g, b, 1.0) && keeps_shape(a)) return a;
    if (is_constant(g, a, 1.0) && keeps_shape(b)) return b;
  } else if (node.op == Op::div) {
    if (is_constant(g, b, 1.0) && keeps_shape(a)) return a;
  } else if (node.op == Op::neg) {
    if (g.node(a).op == Op::neg) return g.node(a).args[0];
  }
  return g.intern(node);
}

}  // namespace

ir::Program simplify(const ir::Program& program) {
  return detail::rebuild(program, simplify_node);
}

}  // namespace tilenorm::passes
