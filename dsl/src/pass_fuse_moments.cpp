#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

#include "rewrite.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;

bool along_row_reduction(const Node& n) {
  return ir::is_reduction(n.op) && n.axis == ir::Axis::along_row;
}

class MomentFuser {
 public:
  explicit MomentFuser(ir::Graph& g) : g_(g) {}

  // sum(a * b) or mean(a * b) along the row, where a is centered (t - mean(t)), as a co-moment
  // of t and b, when that waits on fewer reduction phases: the centered sum waits for the
  // mean, the co-moment runs beside it. Returns nothing when the rewrite would not help.
  std::optional<NodeId> fuse(const Node& reduction) {
    if (reduction.op != Op::reduce_sum && reduction.op != Op::reduce_mean) return std::nullopt;
    if (reduction.axis != ir::Axis::along_row) return std::nullopt;
    const Node product = g_.node(reduction.args[0]);
    if (product.op != Op::mul) return std::nullopt;
    for (int first = 0; first < 2; ++first) {
      const NodeId a = product.args[first];
      const NodeId b = product.args[1 - first];
      const std::optional<NodeId> t = centered_operand(a);
      if (!t) continue;
      // sum((t - mean(t)) * (u - mean(u))) = sum((t - mean(t)) * u): a centered second factor
      // drops its mean; any other one must not need mean(t), which the co-moment does without.
      const NodeId u = centered_operand(b).value_or(b);
      if (depends_on(u, mean_node(a))) continue;
      const NodeId fused = g_.comoment(*t, u);
      if (phase(fused) >= phase(reduction.args[0]) + 1) continue;
      return reduction.op == Op::reduce_sum ? fused : g_.binary(Op::div, fused, g_.row_length());
    }
    return std::nullopt;
  }

 private:
  // For t - mean(t) (the mean along the row), t.
  std::optional<NodeId> centered_operand(NodeId id) const {
    const Node& n = g_.node(id);
    if (n.op != Op::sub) return std::nullopt;
    const Node& m = g_.node(n.args[1]);
    if (m.op != Op::reduce_mean || m.axis != ir::Axis::along_row || m.args[0] != n.args[0])
      return std::nullopt;
    if (!ir::varies_along_row(g_.node(n.args[0]).shape)) return std::nullopt;
    return n.args[0];
  }
  NodeId mean_node(NodeId centered) const { return g_.node(centered).args[1]; }

  bool depends_on(NodeId id, NodeId target) {
    if (id == target) return true;
    const auto key = std::make_pair(id, target);
    if (auto it = depends_.find(key); it != depends_.end()) return it->second;
    const Node n = g_.node(id);  // a copy: the map insertion below does not touch the graph
    bool found = false;
    for (int i = 0; i < n.arity && !found; ++i) found = depends_on(n.args[i], target);
    depends_[key] = found;
    return found;
  }

  // The number of reduction phases along the row that `id` waits for, its own included.
  int phase(NodeId id) {
    if (auto it = phases_.find(id); it != phases_.end()) return it->second;
    const Node n = g_.node(id);
    int deepest = 0;
    for (int i = 0; i < n.arity; ++i) deepest = std::max(deepest, phase(n.args[i]));
    const int result = deepest + (along_row_reduction(n) ? 1 : 0);
    phases_[id] = result;
    return result;
  }

  struct PairHash {
    std::size_t operator()(const std::pair<NodeId, NodeId>& p) const {
      return std::hash<std::uint64_t>()((std::uint64_t{p.first} << 32) | p.second);
    }
  };

  ir::Graph& g_;
  std::unordered_map<std::pair<NodeId, NodeId>, bool, PairHash> depends_;
  std::unordered_map<NodeId, int> phases_;
};

}  // namespace

ir::Program fuse_moments(const ir::Program& program, MomentFusion fusion) {
  if (fusion == MomentFusion::off) return program;
  // By the rule, not in programs that sum across rows (the derived backwards): measured on the
  // H200 (bf16, 2026-11-30), LayerNorm's recomputing backward in one phase with two co-moments
  // ran 1-7 points of the copy ceiling slower than in two phases at N = 2048-262144. Those
  // kernels are held back by their column partial sums, not by the barrier the co-moment
  // saves, and the co-moments' extra arithmetic and registers cost more than it. Re-measured
  // with the seventeenth session's finishing kernel (eighteenth session, run 2, heuristic, M =
  // 2^26 / N): bf16 slower at 11 of 12 N (4096 87.8 -> 82.1%, 8192 84.8 -> 78.7%, 131072 57.0 ->
  // 50.3%; the cluster kernels take 165 registers against 128), fp32 mixed (5120 89.5 -> 94.6%,
  // 32768 94.6 -> 88.2%). Again on an H100 (seventy-third session, heuristic, graph timing):
  // bf16 slower at 8 of 12 N (131072 -17.3 points, 32768 -8.4, 512 -5.4), faster only at 4096,
  // 8192 and 65536 (+1.8 to +2.7); fp32 slower at 5 (262144 -4.4), faster at one (5120 +1.0).
  // Each at its own tuned best (seventy-seventh session, H100, bf16): 8192 91.9% against 88.5,
  // 262144 82.4 against 81.3, but 16384 87.5 against 89.7 (docs/performance.md). No rule by N
  // or configuration separates the gains from the losses, so the tuner chooses
  // (KernelConfig::moments).
  const auto reachable = program.reachable_nodes();
  if (fusion == MomentFusion::rule &&
      std::any_of(reachable.begin(), reachable.end(), [&](NodeId id) {
        const Node& n = program.graph->node(id);
        return ir::is_reduction(n.op) && n.axis == ir::Axis::across_rows;
      }))
    return program;
  return detail::rebuild_with(program, [](ir::Graph& graph) -> detail::RewriteFn {
    auto fuser = std::make_shared<MomentFuser>(graph);
    return [fuser](const Node& node, ir::Graph& g) {
      if (auto fused = fuser->fuse(node)) return *fused;
      return g.intern(node);
    };
  });
}

}  // namespace tilenorm::passes
