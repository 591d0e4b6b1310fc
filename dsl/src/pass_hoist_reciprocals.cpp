#include "rewrite.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;

// t / r, with t varying along the row and r not, becomes t * (1 / r): one division per row
// (or per kernel, for a scalar) instead of one per element. An fp32 division is a sequence of
// about ten instructions on the device, which made a forward with one per element
// compute-bound (four_reductions, bf16 N = 32768: 61.6% of the copy ceiling).
NodeId hoist_node(const Node& node, ir::Graph& g) {
  if (node.op != Op::div) return g.intern(node);
  const NodeId dividend = node.args[0];
  const NodeId divisor = node.args[1];
  if (!ir::varies_along_row(g.node(dividend).shape) || ir::varies_along_row(g.node(divisor).shape))
    return g.intern(node);
  // A constant divisor's reciprocal is left unfolded (simplify has run): the device computes
  // it once, and the interpreter keeps evaluating the program in fp64.
  return g.binary(Op::mul, dividend, g.binary(Op::div, g.constant(1.0), divisor));
}

}  // namespace

ir::Program hoist_reciprocals(const ir::Program& program) {
  return detail::rebuild(program, hoist_node);
}

}  // namespace tilenorm::passes
