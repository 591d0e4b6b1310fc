#pragma once
// The lowering pipeline, one pass per file, always run in this order:
//   verify -> simplify (constant folding) -> cse -> factor_reductions -> fuse_moments
//   -> hoist_reciprocals -> schedule_reductions
// Autodiff (autodiff.hpp) runs before it and produces an ordinary program. Setting
// TILENORM_DUMP_IR=1 prints the IR after each pass to stderr.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

// Whether fuse_moments rewrites centered sums into co-moments: as its rule says (in programs that
// do not sum across rows), everywhere it can (on), or nowhere (off). Which is faster for a
// program that sums across rows depends on the kernel's configuration (docs/performance.md,
// seventy-seventh and seventy-eighth sessions), so it is a tuning knob: KernelConfig::moments.
enum class MomentFusion : int { rule = 0, on = 1, off = 2 };
inline constexpr int kMomentFusionCount = 3;
std::string_view moment_fusion_name(MomentFusion fusion);

// A program ready for code generation.
struct LoweredProgram {
  ir::Program program;
  // Reductions along the row, grouped into phases. Every reduction in phase k depends only on
  // reductions of earlier phases, so one phase is one barrier.
  std::vector<std::vector<ir::NodeId>> reduction_phases;
  // Reductions across rows (column and scalar gradients). Each CTA accumulates its rows in
  // fp32, writes one partial row to a workspace, and a finishing kernel sums the partials.
  std::vector<ir::NodeId> cross_row_reductions;
  // Per node id: the latest along-row phase the node depends on (its own, for a reduction),
  // or -1 when it depends on none. Code generation places row-scalar values with it.
  std::vector<int> phase_after;
  // Per node id: whether the node depends on a cross-row reduction (then only the finishing
  // kernel can compute it).
  std::vector<bool> after_cross_row;
  // The same program lowered with fuse_moments on and off (MomentFusion), where that gives
  // another program than the rule's; null where it does not, and in those programs themselves.
  std::shared_ptr<const LoweredProgram> moments_on, moments_off;
  std::string to_string() const;
};

// The program lowered as `fusion` asks: `lowered` itself (the rule's) where fusion is rule or
// gives no other program. Code generation and everything that sizes a kernel for a
// configuration take the program through this, with KernelConfig::moments.
const LoweredProgram& with_moments(const LoweredProgram& lowered, MomentFusion fusion);

namespace passes {

// Throws ProgramError naming the program and the problem when the program makes no sense.
void verify(const ir::Program& program);
// Folds constants (in fp32, as the device computes) and removes identities (x * 1, -(-x)).
ir::Program simplify(const ir::Program& program);
// Puts commutative operands in a canonical order and rebuilds the graph, so equal
// subexpressions share one node and dead nodes are dropped.
ir::Program cse(const ir::Program& program);
// Pulls row-constant factors and terms out of sums and means (sum(t * r) = r * sum(t),
// sum(t + r) = sum(t) + N * r), splits sums whose terms wait on different reductions, and
// cancels centered sums (sum(t - mean(t)) = 0), so that reductions wait on as little as
// possible.
ir::Program factor_reductions(const ir::Program& program);
// Turns centered sums along the row, sum((t - mean(t)) * u) (a variance), into co-moments of
// t and u, which run in the phase of mean(t) instead of the one after it: LayerNorm's
// statistics then take one phase, like RMSNorm's. By its rule, programs that sum across rows
// (backwards) are left as they are: there the co-moment measured slower than the second phase
// at most configurations; `fusion` on or off overrides the rule.
ir::Program fuse_moments(const ir::Program& program, MomentFusion fusion);
// Turns divisions of row-varying values by row-constant ones, t / r, into t * (1 / r), so the
// division runs once per row instead of once per element. After factor_reductions, whose
// sum(t / r) = sum(t) / r it would otherwise obscure.
ir::Program hoist_reciprocals(const ir::Program& program);
// Groups independent reductions into phases.
LoweredProgram schedule_reductions(const ir::Program& program);

}  // namespace passes

// The fixed pipeline; with the rule's fuse_moments, and LoweredProgram::moments_on and
// moments_off where fuse_moments on or off gives another program.
LoweredProgram lower(const ir::Program& program);

}  // namespace tilenorm
