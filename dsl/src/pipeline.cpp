#include <algorithm>
#include <iostream>
#include <sstream>

#include "tilenorm/dsl/env.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm {
namespace {

void dump(std::string_view after, const std::string& text) {
  std::cerr << "=== tilenorm IR after " << after << " ===\n" << text;
}

}  // namespace

std::string LoweredProgram::to_string() const {
  std::ostringstream out;
  out << program.to_string();
  const auto reachable = program.reachable_nodes();
  auto number = [&reachable](ir::NodeId id) {  // the dense numbers of Program::to_string
    return std::lower_bound(reachable.begin(), reachable.end(), id) - reachable.begin();
  };
  for (std::size_t phase = 0; phase < reduction_phases.size(); ++phase) {
    out << "  reduction phase " << phase << ":";
    for (ir::NodeId id : reduction_phases[phase]) out << " %" << number(id);
    out << "\n";
  }
  if (!cross_row_reductions.empty()) {
    out << "  cross-row reductions:";
    for (ir::NodeId id : cross_row_reductions) out << " %" << number(id);
    out << "\n";
  }
  return out.str();
}

LoweredProgram lower(const ir::Program& program) {
  const bool dumping = env_flag("TILENORM_DUMP_IR");
  if (dumping) dump("front end", program.to_string());
  passes::verify(program);
  if (dumping) dump("verify", program.to_string());
  ir::Program simplified = passes::simplify(program);
  if (dumping) dump("simplify", simplified.to_string());
  ir::Program shared = passes::cse(simplified);
  if (dumping) dump("cse", shared.to_string());
  ir::Program factored = passes::cse(passes::factor_reductions(shared));
  if (dumping) dump("factor_reductions", factored.to_string());
  ir::Program fused = passes::cse(passes::fuse_moments(factored));
  if (dumping) dump("fuse_moments", fused.to_string());
  ir::Program hoisted = passes::cse(passes::hoist_reciprocals(fused));
  if (dumping) dump("hoist_reciprocals", hoisted.to_string());
  LoweredProgram lowered = passes::schedule_reductions(hoisted);
  if (dumping) dump("schedule_reductions", lowered.to_string());
  return lowered;
}

}  // namespace tilenorm
