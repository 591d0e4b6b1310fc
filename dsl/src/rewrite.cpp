#include "rewrite.hpp"

#include <memory>
#include <unordered_map>

namespace tilenorm::detail {

ir::Program rebuild(const ir::Program& program, const RewriteFn& rewrite) {
  return rebuild_by_id(program, [&rewrite](ir::NodeId, const ir::Node& node, ir::Graph& graph) {
    return rewrite(node, graph);
  });
}

namespace {

// Rebuilds `program` into `graph`, which must be empty.
ir::Program rebuild_into(const ir::Program& program, std::shared_ptr<ir::Graph> graph,
                         const RewriteByIdFn& rewrite) {
  std::unordered_map<ir::NodeId, ir::NodeId> mapped;
  for (ir::NodeId id : program.reachable_nodes()) {
    ir::Node node = program.graph->node(id);
    for (int i = 0; i < node.arity; ++i) node.args[i] = mapped.at(node.args[i]);
    mapped[id] = rewrite(id, node, *graph);
  }
  ir::Program result = program;
  result.graph = graph;
  for (ir::Slot& slot : result.slots) {
    if (slot.role == ir::Role::written) slot.value = mapped.at(slot.value);
  }
  return result;
}

}  // namespace

ir::Program rebuild_by_id(const ir::Program& program, const RewriteByIdFn& rewrite) {
  return rebuild_into(program, std::make_shared<ir::Graph>(), rewrite);
}

ir::Program rebuild_with(const ir::Program& program, const MakeRewriteFn& make) {
  auto graph = std::make_shared<ir::Graph>();
  const RewriteFn rewrite = make(*graph);
  return rebuild_into(program, graph,
                      [&rewrite](ir::NodeId, const ir::Node& node, ir::Graph& target) {
                        return rewrite(node, target);
                      });
}

}  // namespace tilenorm::detail
