#include "rewrite.hpp"

#include <memory>
#include <unordered_map>

namespace tilenorm::detail {

ir::Program rebuild(const ir::Program& program, const RewriteFn& rewrite) {
  return rebuild_by_id(program, [&rewrite](ir::NodeId, const ir::Node& node, ir::Graph& graph) {
    return rewrite(node, graph);
  });
}

ir::Program rebuild_by_id(const ir::Program& program, const RewriteByIdFn& rewrite) {
  auto graph = std::make_shared<ir::Graph>();
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

}  // namespace tilenorm::detail
