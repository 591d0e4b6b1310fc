#include <utility>

#include "rewrite.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {

ir::Program cse(const ir::Program& program) {
  // Rebuilding into a fresh hash-consed graph merges structurally equal nodes and drops dead
  // ones; sorting commutative operands makes a * b and b * a structurally equal too.
  return detail::rebuild(program, [](ir::Node node, ir::Graph& graph) {
    if (ir::is_commutative(node.op) && node.args[1] < node.args[0]) {
      std::swap(node.args[0], node.args[1]);
    }
    return graph.intern(node);
  });
}

}  // namespace tilenorm::passes
