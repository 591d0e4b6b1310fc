#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

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

const LoweredProgram& with_moments(const LoweredProgram& lowered, MomentFusion fusion) {
  if (fusion == MomentFusion::on && lowered.moments_on) return *lowered.moments_on;
  if (fusion == MomentFusion::off && lowered.moments_off) return *lowered.moments_off;
  return lowered;
}

std::string_view moment_fusion_name(MomentFusion fusion) {
  switch (fusion) {
    case MomentFusion::rule:
      return "rule";
    case MomentFusion::on:
      return "on";
    case MomentFusion::off:
      return "off";
  }
  return "?";
}

namespace {

// fuse_moments as `fusion` asks, with its cse: where KernelConfig::moments may lower a program
// another way.
ir::Program fused_moments(const ir::Program& factored, MomentFusion fusion) {
  return passes::cse(passes::fuse_moments(factored, fusion));
}

// The pipeline after fuse_moments.
LoweredProgram lower_fused(const ir::Program& fused, bool dumping) {
  ir::Program hoisted = passes::cse(passes::hoist_reciprocals(fused));
  if (dumping) dump("hoist_reciprocals", hoisted.to_string());
  LoweredProgram lowered = passes::schedule_reductions(hoisted);
  if (dumping) dump("schedule_reductions", lowered.to_string());
  return lowered;
}

}  // namespace

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
  const ir::Program fused = fused_moments(factored, MomentFusion::rule);
  if (dumping) dump("fuse_moments", fused.to_string());
  LoweredProgram lowered = lower_fused(fused, dumping);
  // The passes after fuse_moments are deterministic, so the other lowerings differ from the
  // rule's exactly where fuse_moments does: only those are lowered further.
  const std::string fused_by_rule = fused.to_string();
  auto other_than_rule = [&](MomentFusion fusion) -> std::shared_ptr<const LoweredProgram> {
    const ir::Program other = fused_moments(factored, fusion);
    if (other.to_string() == fused_by_rule) return nullptr;
    return std::make_shared<LoweredProgram>(lower_fused(other, false));
  };
  lowered.moments_on = other_than_rule(MomentFusion::on);
  lowered.moments_off = other_than_rule(MomentFusion::off);
  return lowered;
}

}  // namespace tilenorm
