#include <algorithm>
#include <sstream>

#include "rewrite.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Shape;

// Rewrites reduce(op, x) so that factors and terms constant along the row are applied once
// per row instead of once per element, which also frees the inner reduction from depending
// on them (and so, often, from waiting for an earlier phase).
NodeId pull_out_row_constants(Op reduction, NodeId x, ir::Graph& g) {
  if (reduction != Op::reduce_sum && reduction != Op::reduce_mean) return g.reduce(reduction, x);
  const Node n = g.node(x);  // a copy: interning below may move the graph's storage
  auto row_constant = [&g](NodeId id) { return !ir::varies_along_row(g.node(id).shape); };
  auto is_tile = [&g](NodeId id) { return g.node(id).shape == Shape::tile; };
  auto pull = [&](NodeId inner) { return pull_out_row_constants(reduction, inner, g); };
  // sum(t + r) = sum(t) + N * r, while mean(t + r) = mean(t) + r.
  auto term_total = [&](NodeId r) {
    return reduction == Op::reduce_sum
               ? g.binary(Op::mul, g.leaf(Op::row_length, Shape::scalar, 0), r)
               : r;
  };
  const NodeId a = n.args[0];
  const NodeId b = n.args[1];
  switch (n.op) {
    case Op::mul:
      if (row_constant(a) && is_tile(b)) return g.binary(Op::mul, a, pull(b));
      if (row_constant(b) && is_tile(a)) return g.binary(Op::mul, pull(a), b);
      break;
    case Op::div:
      if (row_constant(b) && is_tile(a)) return g.binary(Op::div, pull(a), b);
      break;
    case Op::neg:
      return g.unary(Op::neg, pull(a));
    case Op::add:
    case Op::sub:
      if (row_constant(b) && is_tile(a)) return g.binary(n.op, pull(a), term_total(b));
      if (row_constant(a) && is_tile(b)) return g.binary(n.op, term_total(a), pull(b));
      break;
    default:
      break;
  }
  return g.reduce(reduction, x);
}

}  // namespace

LoweredProgram schedule_reductions(const ir::Program& program) {
  LoweredProgram lowered;
  lowered.program = detail::rebuild(program, [](const Node& node, ir::Graph& g) {
    return ir::is_reduction(node.op) ? pull_out_row_constants(node.op, node.args[0], g)
                                     : g.intern(node);
  });
  const ir::Graph& g = *lowered.program.graph;
  lowered.phase_after.assign(g.size(), -1);
  for (NodeId id : lowered.program.reachable_nodes()) {
    const Node& n = g.node(id);
    int depends_on = -1;
    for (int i = 0; i < n.arity; ++i)
      depends_on = std::max(depends_on, lowered.phase_after[n.args[i]]);
    if (ir::is_reduction(n.op)) {
      const int phase = depends_on + 1;
      if (lowered.reduction_phases.size() <= static_cast<std::size_t>(phase)) {
        lowered.reduction_phases.resize(phase + 1);
      }
      lowered.reduction_phases[phase].push_back(id);
      depends_on = phase;
    }
    lowered.phase_after[id] = depends_on;
  }
  return lowered;
}

}  // namespace tilenorm::passes
