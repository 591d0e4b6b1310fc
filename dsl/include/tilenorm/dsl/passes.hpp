#pragma once
// The lowering pipeline, one pass per file, always run in this order:
//   verify -> simplify (constant folding) -> cse -> schedule_reductions
// Setting TILENORM_DUMP_IR=1 prints the IR after each pass to stderr.
#include <vector>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

// A program ready for code generation: its reductions grouped into phases. Every reduction
// in phase k depends only on reductions of earlier phases, so one phase is one barrier.
struct LoweredProgram {
  ir::Program program;
  std::vector<std::vector<ir::NodeId>> reduction_phases;
  // Per node id: the latest reduction phase the node depends on (its own, for a reduction),
  // or -1 when it depends on none. Code generation places row-scalar values with it.
  std::vector<int> phase_after;
  std::string to_string() const;
};

namespace passes {

// Throws ProgramError naming the program and the problem when the program makes no sense.
void verify(const ir::Program& program);
// Folds constants and removes identities (x * 1, x + 0, -(-x), ...).
ir::Program simplify(const ir::Program& program);
// Puts commutative operands in a canonical order and rebuilds the graph, so equal
// subexpressions share one node and dead nodes are dropped.
ir::Program cse(const ir::Program& program);
// Pulls row-constant factors out of sums and means (sum(t * r) = r * sum(t),
// sum(t + r) = sum(t) + N * r) and groups independent reductions into phases.
LoweredProgram schedule_reductions(const ir::Program& program);

}  // namespace passes

// The fixed pipeline.
LoweredProgram lower(const ir::Program& program);

}  // namespace tilenorm
