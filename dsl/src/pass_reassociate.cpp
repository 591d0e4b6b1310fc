#include <unordered_map>

#include "rewrite.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;

// How many nodes and written slots use each node of `program`.
std::unordered_map<NodeId, int> use_counts(const ir::Program& program) {
  std::unordered_map<NodeId, int> uses;
  for (NodeId id : program.reachable_nodes()) {
    const Node& n = program.graph->node(id);
    for (int i = 0; i < n.arity; ++i) ++uses[n.args[i]];
  }
  for (const ir::Slot& slot : program.slots) {
    if (slot.role == ir::Role::written) ++uses[slot.value];
  }
  return uses;
}

}  // namespace

ir::Program reassociate(const ir::Program& program) {
  const std::unordered_map<NodeId, int> uses = use_counts(program);
  std::unordered_map<NodeId, NodeId> old_id_of;  // new node -> the old node it stands for
  return detail::rebuild_by_id(program, [&](NodeId old_id, const Node& node, ir::Graph& g) {
    auto varying_product = [&](NodeId id) {
      const Node& n = g.node(id);
      return n.op == Op::mul && ir::varies_along_row(n.shape);
    };
    // The inner sum is rewritten only where nothing else reads it, so no work is duplicated.
    auto used_once = [&](NodeId id) {
      const auto old = old_id_of.find(id);
      return old != old_id_of.end() && uses.at(old->second) == 1;
    };
    NodeId result = g.intern(node);
    if (node.op == Op::add) {
      for (int side = 0; side < 2; ++side) {
        const NodeId sum = node.args[side];
        const NodeId constant = node.args[1 - side];
        const Node& inner = g.node(sum);
        if (ir::varies_along_row(g.node(constant).shape) || inner.op != Op::add ||
            !varying_product(inner.args[0]) || !varying_product(inner.args[1]) ||
            !used_once(sum))
          continue;
        const NodeId first = inner.args[0];
        const NodeId second = inner.args[1];
        result = g.binary(Op::add, first, g.binary(Op::add, second, constant));
        break;
      }
    }
    old_id_of[result] = old_id;
    return result;
  });
}

}  // namespace tilenorm::passes
