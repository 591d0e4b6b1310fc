#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>

#include "rewrite.hpp"
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/names.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm {
namespace {

using ir::Axis;
using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Role;
using ir::Shape;

// Sums `value` over the axes along which it varies and `target` does not: along the row
// first, so that a scalar's gradient is a row reduction (in the main kernel) and then a sum
// across rows (in the finishing kernel).
NodeId reduce_to(ir::Graph& g, NodeId value, Shape target) {
  if (ir::varies_along_row(g.node(value).shape) && !ir::varies_along_row(target))
    value = g.reduce(Op::reduce_sum, value, Axis::along_row);
  if (ir::varies_across_rows(g.node(value).shape) && !ir::varies_across_rows(target))
    value = g.reduce(Op::reduce_sum, value, Axis::across_rows);
  return value;
}

class Adjoints : public ir::GradientBuilder {
 public:
  // `needs[id]`: whether forward node `id` lies on a path from a slot that needs a gradient.
  Adjoints(ir::Graph& g, const ir::Graph& forward, const std::vector<bool>& needs)
      : g_(g), forward_(forward), needs_(needs), adjoint_(forward.size()) {}

  ir::Graph& graph() override { return g_; }
  // Contributions are kept broadcast: one that does not vary along the row, for a node that
  // does, stands for N equal per-element contributions. Where the argument does not vary along
  // the row either, nothing will sum them later, so the sum (N times the value) is taken here.
  void add(int arg, NodeId contribution) override {
    const NodeId target = current_args_[arg];
    if (!needs_[target]) return;
    const Shape target_shape = forward_.node(target).shape;
    if (ir::varies_along_row(current_shape_) && !ir::varies_along_row(target_shape) &&
        !ir::varies_along_row(g_.node(contribution).shape)) {
      contribution = g_.binary(Op::mul, contribution, g_.row_length());
    }
    if (ir::varies_across_rows(current_shape_) && !ir::varies_across_rows(target_shape) &&
        !ir::varies_across_rows(g_.node(contribution).shape)) {
      // Needs M, which no IR node names; every adjoint derives from a row output's incoming
      // gradient, which varies across rows, so this does not happen.
      throw ProgramError("autodiff: a gradient broadcast across rows has no row count to sum");
    }
    accumulate(target, contribution);
  }
  void accumulate(NodeId forward_id, NodeId contribution) {
    auto& slot = adjoint_[forward_id];
    slot = slot ? g_.binary(Op::add, *slot, contribution) : contribution;
  }
  std::optional<NodeId> adjoint(NodeId forward_id) const { return adjoint_[forward_id]; }
  void set_current(const Node& forward_node) {
    for (int i = 0; i < 3; ++i) current_args_[i] = forward_node.args[i];
    current_shape_ = forward_node.shape;
  }

 private:
  ir::Graph& g_;
  const ir::Graph& forward_;
  const std::vector<bool>& needs_;
  std::vector<std::optional<NodeId>> adjoint_;
  std::array<NodeId, 3> current_args_{};
  Shape current_shape_ = Shape::tile;
};

// Drops read slots nothing reads, renumbering the loads of the others.
ir::Program drop_unused_reads(const ir::Program& p) {
  std::vector<bool> used(p.slots.size(), false);
  for (NodeId id : p.reachable_nodes()) {
    const Node& n = p.graph->node(id);
    if (n.op == Op::load) used[n.index] = true;
  }
  std::vector<std::int32_t> renumbered(p.slots.size(), -1);
  ir::Program kept = p;
  kept.slots.clear();
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    if (p.slots[i].role == Role::read && !used[i]) continue;
    renumbered[i] = static_cast<std::int32_t>(kept.slots.size());
    kept.slots.push_back(p.slots[i]);
  }
  return detail::rebuild_by_id(kept, [&](NodeId, const Node& node, ir::Graph& g) {
    return node.op == Op::load ? g.load(node.shape, renumbered[node.index]) : g.intern(node);
  });
}

}  // namespace

std::string_view statistics_mode_name(StatisticsMode mode) {
  switch (mode) {
    case StatisticsMode::saved:
      return "saved";
    case StatisticsMode::recompute:
      return "recompute";
  }
  return "?";
}

std::string gradient_name(const std::string& name) {
  return "d" + name;
}

ir::Program backward(const ir::Program& forward_in, const BackwardOptions& options) {
  passes::verify(forward_in);
  const ir::Program fwd = passes::cse(passes::simplify(forward_in));
  const ir::Graph& fg = *fwd.graph;
  const bool saved = options.mode == StatisticsMode::saved;

  ir::Program bwd;
  bwd.name = fwd.name + (saved ? "_backward" : "_backward_recompute");
  bwd.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *bwd.graph;

  // Slots: the forward's reads, the incoming gradients, the saved statistics and the row
  // outputs read back (saved mode), then the gradients.
  std::vector<std::int32_t> read_slot(fwd.slots.size(), -1);
  auto push = [&bwd](ir::Slot slot) {
    bwd.slots.push_back(std::move(slot));
    return static_cast<std::int32_t>(bwd.slots.size() - 1);
  };
  bool any_gradient = false;
  for (std::size_t i = 0; i < fwd.slots.size(); ++i) {
    const ir::Slot& s = fwd.slots[i];
    if (s.role != Role::read) continue;
    any_gradient = any_gradient || s.needs_grad;
    read_slot[i] = push({s.name, Role::read, s.shape, s.dtype, 0, false});
  }
  if (!any_gradient) {
    throw ProgramError("program '" + fwd.name +
                       "': no slot needs a gradient (mark inputs, columns or scalars Grad::yes)");
  }
  // Gradient names must be new names and valid ones: said here, where they are made.
  auto check_new_name = [&](const std::string& name, const std::string& of) {
    if (fwd.find_slot(name)) {
      throw ProgramError("program '" + fwd.name + "': the gradient of '" + of +
                         "' would be called '" + name +
                         "', which the program already uses; rename that slot");
    }
    check_slot_name(fwd.name, name);
  };
  for (const ir::Slot& s : fwd.slots) {
    if ((s.role == Role::read && s.needs_grad) ||
        (s.role == Role::written && s.shape == Shape::tile))
      check_new_name(gradient_name(s.name), s.name);
  }
  std::vector<std::int32_t> incoming(fwd.slots.size(), -1), saved_stat(fwd.slots.size(), -1),
      saved_row(fwd.slots.size(), -1);
  for (std::size_t i = 0; i < fwd.slots.size(); ++i) {
    const ir::Slot& s = fwd.slots[i];
    if (s.role == Role::written && s.shape == Shape::tile)
      incoming[i] = push({gradient_name(s.name), Role::read, Shape::tile, s.dtype, 0, false});
  }
  // Not a saved maximum or minimum: the backward compares the row with it to route the
  // gradient, and one rounded differently by the forward's kernel (x / 1.25 there, x * 0.8
  // here) would match no element; recomputed, it is the maximum of the very values it is
  // compared with.
  auto compared_extreme = [&](const ir::Slot& s) {
    const Op op = fg.node(s.value).op;
    return op == Op::reduce_max || op == Op::reduce_min;
  };
  for (std::size_t i = 0; saved && i < fwd.slots.size(); ++i) {
    const ir::Slot& s = fwd.slots[i];
    if (s.role == Role::written && s.shape == Shape::row_scalar && !compared_extreme(s))
      saved_stat[i] = push({s.name, Role::read, Shape::row_scalar, DType::f32, 0, false});
  }
  // A row output the forward wrote (h = x + residual) can stand in for what computes it: one
  // row read back in place of the rows it came from. Only outputs whose value is a whole tile.
  for (std::size_t i = 0; saved && i < fwd.slots.size(); ++i) {
    const ir::Slot& s = fwd.slots[i];
    if (s.role == Role::written && s.shape == Shape::tile && fg.node(s.value).shape == Shape::tile)
      saved_row[i] = push({s.name, Role::read, Shape::tile, s.dtype, 0, false});
  }

  // The forward's values, in the new graph (recomputed unless replaced below).
  const std::vector<NodeId> order = fwd.reachable_nodes();
  std::vector<NodeId> value(fg.size(), 0);
  std::vector<bool> needs(fg.size(), false);
  std::vector<std::optional<NodeId>> load_of_slot(fwd.slots.size());
  for (NodeId id : order) {
    Node node = fg.node(id);
    for (int i = 0; i < node.arity; ++i) {
      needs[id] = needs[id] || needs[node.args[i]];
      node.args[i] = value[node.args[i]];
    }
    if (node.op == Op::load) {
      needs[id] = fwd.slots[node.index].needs_grad;
      load_of_slot[node.index] = id;
      node.index = read_slot[node.index];
    }
    value[id] = g.intern(node);
  }
  Adjoints adjoints(g, fg, needs);

  // Seed: each row output's adjoint is its incoming gradient.
  for (std::size_t i = 0; i < fwd.slots.size(); ++i) {
    if (incoming[i] < 0 || !needs[fwd.slots[i].value]) continue;
    adjoints.accumulate(fwd.slots[i].value, g.load(Shape::tile, incoming[i]));
  }
  // Reverse topological order.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodeId id = *it;
    const Node& fnode = fg.node(id);
    const auto adjoint = adjoints.adjoint(id);
    if (!adjoint || fnode.arity == 0) continue;
    const ir::OpInfo& info = ir::op_info(fnode.op);
    if (!info.gradient) {
      throw ProgramError("program '" + fwd.name + "': operation '" + std::string(info.name) +
                         "' has no derivative rule, and a gradient flows through it");
    }
    Node node = fnode;
    for (int i = 0; i < node.arity; ++i) node.args[i] = value[node.args[i]];
    const NodeId incoming_adjoint =
        ir::is_reduction(fnode.op) ? reduce_to(g, *adjoint, fnode.shape) : *adjoint;
    adjoints.set_current(fnode);
    info.gradient(adjoints, node, value[id], incoming_adjoint);
  }

  // The gradients.
  for (std::size_t i = 0; i < fwd.slots.size(); ++i) {
    const ir::Slot& s = fwd.slots[i];
    if (s.role != Role::read || !s.needs_grad) continue;
    const std::optional<NodeId> adjoint =
        load_of_slot[i] ? adjoints.adjoint(*load_of_slot[i]) : std::nullopt;
    const NodeId gradient = adjoint ? reduce_to(g, *adjoint, s.shape) : g.constant(0.0);
    const bool fp32_only = s.shape == Shape::row_scalar || s.shape == Shape::scalar;
    push({gradient_name(s.name), Role::written, s.shape,
          fp32_only ? std::optional(DType::f32) : s.dtype, gradient, false});
  }

  // Factor the reductions while the statistics are still expressions (so that a centered sum
  // is seen to vanish), then read the saved statistics (and, with read_rows, the row outputs)
  // back in their place.
  const std::size_t real_slots = bwd.slots.size();
  auto derive = [&](bool read_rows) {
    ir::Program marked = bwd;
    std::vector<std::int32_t> read_back;
    for (std::size_t i = 0; i < fwd.slots.size(); ++i) {
      const std::int32_t slot = saved_stat[i] >= 0 ? saved_stat[i] : read_rows ? saved_row[i] : -1;
      if (slot < 0) continue;
      marked.slots.push_back({"tn_saved_" + std::to_string(i), Role::written, bwd.slots[slot].shape,
                              bwd.slots[slot].dtype, value[fwd.slots[i].value], false});
      read_back.push_back(slot);
    }
    ir::Program factored = passes::cse(passes::factor_reductions(marked));
    std::unordered_map<NodeId, std::int32_t> saved_at;
    for (std::size_t k = 0; k < read_back.size(); ++k)
      saved_at.emplace(factored.slots[real_slots + k].value, read_back[k]);
    factored.slots.resize(real_slots);
    const ir::Program result =
        detail::rebuild_by_id(factored, [&](NodeId id, const Node& node, ir::Graph& graph) {
          const auto it = saved_at.find(id);
          return it != saved_at.end() ? graph.load(bwd.slots[it->second].shape, it->second)
                                      : graph.intern(node);
        });
    return passes::cse(passes::simplify(drop_unused_reads(result)));
  };
  auto rows_read = [](const ir::Program& p) {
    return std::count_if(p.slots.begin(), p.slots.end(), [](const ir::Slot& s) {
      return s.role == Role::read && s.shape == Shape::tile;
    });
  };
  // Recomputing keeps full precision (a row output is stored rounded to its dtype): a row
  // output is read back only where that reads fewer rows.
  ir::Program derived = derive(false);
  if (std::any_of(saved_row.begin(), saved_row.end(), [](std::int32_t s) { return s >= 0; })) {
    ir::Program reading_rows = derive(true);
    if (rows_read(reading_rows) < rows_read(derived)) derived = std::move(reading_rows);
  }
  if (rows_read(derived) == 0) {
    throw ProgramError("program '" + fwd.name +
                       "': every gradient is identically zero (no Grad::yes slot is on a path "
                       "from an output that carries a gradient), so there is nothing to compute");
  }
  return derived;
}

}  // namespace tilenorm
