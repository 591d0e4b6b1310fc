#pragma once
// Shared by the rewriting passes: rebuilds a program into a fresh graph, node by node in
// topological order, letting the pass choose what each (already remapped) node becomes.
#include <functional>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm::detail {

// `rewrite(node, graph)` gets a node whose args already refer to `graph`, and returns the id
// of its replacement in `graph` (usually graph.intern(node)).
using RewriteFn = std::function<ir::NodeId(const ir::Node& node, ir::Graph& graph)>;

ir::Program rebuild(const ir::Program& program, const RewriteFn& rewrite);

// The same, for a pass that keeps state about the new graph (caches keyed by its node ids):
// `make(graph)` is called once, before the first node, and returns the pass's rewrite.
using MakeRewriteFn = std::function<RewriteFn(ir::Graph& graph)>;

ir::Program rebuild_with(const ir::Program& program, const MakeRewriteFn& make);

// The same, for a rewrite that also needs the node's id in the old graph.
using RewriteByIdFn =
    std::function<ir::NodeId(ir::NodeId old_id, const ir::Node& node, ir::Graph& graph)>;

ir::Program rebuild_by_id(const ir::Program& program, const RewriteByIdFn& rewrite);

}  // namespace tilenorm::detail
