#include <algorithm>

#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {

LoweredProgram schedule_reductions(const ir::Program& program) {
  LoweredProgram lowered;
  lowered.program = program;
  const ir::Graph& g = *program.graph;
  lowered.phase_after.assign(g.size(), -1);
  lowered.after_cross_row.assign(g.size(), false);
  for (ir::NodeId id : program.reachable_nodes()) {
    const ir::Node& n = g.node(id);
    int depends_on = -1;
    bool cross_row = false;
    for (int i = 0; i < n.arity; ++i) {
      depends_on = std::max(depends_on, lowered.phase_after[n.args[i]]);
      cross_row = cross_row || lowered.after_cross_row[n.args[i]];
    }
    if (ir::is_reduction(n.op) && n.axis == ir::Axis::along_row) {
      const int phase = depends_on + 1;
      if (lowered.reduction_phases.size() <= static_cast<std::size_t>(phase)) {
        lowered.reduction_phases.resize(phase + 1);
      }
      lowered.reduction_phases[phase].push_back(id);
      depends_on = phase;
    }
    if (ir::is_reduction(n.op) && n.axis == ir::Axis::across_rows) {
      lowered.cross_row_reductions.push_back(id);
      cross_row = true;
    }
    lowered.phase_after[id] = depends_on;
    lowered.after_cross_row[id] = cross_row;
  }
  return lowered;
}

}  // namespace tilenorm::passes
