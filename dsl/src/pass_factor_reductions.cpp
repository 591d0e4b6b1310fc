#include <functional>
#include <memory>
#include <unordered_map>

#include "rewrite.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Shape;

class Factorer {
 public:
  explicit Factorer(ir::Graph& g) : g_(g) {}

  // reduce(op, x) along the row, with what is constant along the row applied once per row
  // instead of once per element. That also frees the inner reduction from waiting for them
  // (and so, often, for an earlier phase).
  NodeId reduce(Op reduction, NodeId x) {
    if (reduction != Op::reduce_sum && reduction != Op::reduce_mean) return g_.reduce(reduction, x);
    const Node n = g_.node(x);  // a copy: interning below may move the graph's storage
    const NodeId a = n.args[0];
    const NodeId b = n.args[1];
    auto pull = [&](NodeId inner) { return reduce(reduction, inner); };
    // sum(t + r) = sum(t) + N * r, while mean(t + r) = mean(t) + r.
    auto term_total = [&](NodeId r) {
      return reduction == Op::reduce_sum ? g_.binary(Op::mul, g_.row_length(), r) : r;
    };
    if (n.op == Op::mul) {
      if (row_constant(a) && is_row(b)) return scale(a, pull(b), Op::mul);
      if (row_constant(b) && is_row(a)) return scale(b, pull(a), Op::mul);
    } else if (n.op == Op::div) {
      if (row_constant(b) && is_row(a)) return scale(b, pull(a), Op::div);
    } else if (n.op == Op::neg) {
      return g_.unary(Op::neg, pull(a));
    } else if (n.op == Op::add || n.op == Op::sub) {
      // A centered sum vanishes: sum(t - mean(t)) = 0 (exactly, in real arithmetic).
      if (n.op == Op::sub && is_mean_of(b, a)) return g_.constant(-0.0);
      if (row_constant(b) && is_row(a)) return g_.binary(n.op, pull(a), term_total(b));
      if (row_constant(a) && is_row(b)) return g_.binary(n.op, term_total(a), pull(b));
      // Split a sum whose terms wait on reductions, so each term waits only on its own.
      if (is_row(a) && is_row(b) && (waits_on_reduction(a) || waits_on_reduction(b))) {
        return g_.binary(n.op, pull(a), pull(b));
      }
    }
    return g_.reduce(reduction, x);
  }

 private:
  bool row_constant(NodeId id) const { return !ir::varies_along_row(g_.node(id).shape); }
  bool is_row(NodeId id) const { return ir::varies_along_row(g_.node(id).shape); }
  bool is_mean_of(NodeId candidate, NodeId tile) const {
    const Node& n = g_.node(candidate);
    return n.op == Op::reduce_mean && n.axis == ir::Axis::along_row && n.args[0] == tile;
  }
  // factor * reduced (or reduced / factor); a vanished reduction stays vanished.
  NodeId scale(NodeId factor, NodeId reduced, Op op) {
    const Node& r = g_.node(reduced);
    if (r.op == Op::constant && r.value == 0.0) return reduced;
    return op == Op::mul ? g_.binary(Op::mul, factor, reduced)
                         : g_.binary(Op::div, reduced, factor);
  }
  // Whether `id` depends on the result of a reduction along the row.
  bool waits_on_reduction(NodeId id) {
    if (auto it = waits_.find(id); it != waits_.end()) return it->second;
    const Node n = g_.node(id);
    bool waits = ir::is_reduction(n.op) && n.axis == ir::Axis::along_row;
    for (int i = 0; i < n.arity && !waits; ++i) waits = waits_on_reduction(n.args[i]);
    waits_[id] = waits;
    return waits;
  }

  ir::Graph& g_;
  std::unordered_map<NodeId, bool> waits_;
};

}  // namespace

ir::Program factor_reductions(const ir::Program& program) {
  return detail::rebuild_with(program, [](ir::Graph& graph) -> detail::RewriteFn {
    auto factorer = std::make_shared<Factorer>(graph);
    return [factorer](const Node& node, ir::Graph& g) {
      if (ir::is_reduction(node.op) && node.axis == ir::Axis::along_row && node.arity == 1)
        return factorer->reduce(node.op, node.args[0]);
      return g.intern(node);
    };
  });
}

}  // namespace tilenorm::passes
