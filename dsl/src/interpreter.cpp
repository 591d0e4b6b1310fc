#include "tilenorm/dsl/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <string>
#include <thread>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Role;
using ir::Shape;

void check_inputs(const ir::Program& p, const InterpreterInputs& in) {
  auto fail = [&p](const std::string& what) {
    throw ProgramError("interpreter, program '" + p.name + "': " + what);
  };
  if (in.rows < 0 || in.cols < 1) fail("needs rows >= 0 and cols >= 1");
  if (in.slots.size() != p.slots.size()) {
    fail("expected " + std::to_string(p.slots.size()) + " slots, got " +
         std::to_string(in.slots.size()));
  }
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    const ir::Slot& slot = p.slots[i];
    if (slot.role != Role::read) continue;
    const std::size_t expected = slot_elements(slot.shape, in.rows, in.cols);
    if (in.slots[i].size() != expected) {
      fail("slot '" + slot.name + "' has " + std::to_string(in.slots[i].size()) +
           " values, expected " + std::to_string(expected));
    }
  }
}

// The fp64 value of one node at one position: leaves read their slot, reductions are done by
// the caller.
class Evaluator {
 public:
  Evaluator(const ir::Program& p, const InterpreterInputs& in) : p_(p), in_(in) {
    values_.resize(p.graph->size());
  }

  std::vector<double>& values(NodeId id) { return values_[id]; }
  double at(NodeId id, std::int64_t col) const {
    const auto& v = values_[id];
    return v.size() == 1 ? v[0] : v[col];
  }
  void size_for(NodeId id) {
    values_[id].resize(ir::varies_along_row(p_.graph->node(id).shape) ? in_.cols : 1);
  }

  // Evaluates a leaf or elementwise node for row `row` (ignored by row-invariant leaves).
  void evaluate(NodeId id, std::int64_t row) {
    const Node& node = p_.graph->node(id);
    auto& dst = values_[id];
    const std::int64_t n = in_.cols;
    const ir::OpInfo& info = ir::op_info(node.op);
    if (node.op == Op::load) {
      const ir::Slot& slot = p_.slots[node.index];
      const std::vector<double>& src = in_.slots[node.index];
      switch (slot.shape) {
        case Shape::tile:
          std::copy(src.begin() + row * n, src.begin() + (row + 1) * n, dst.begin());
          break;
        case Shape::column:
          std::copy(src.begin(), src.end(), dst.begin());
          break;
        case Shape::row_scalar:
          dst[0] = src[row];
          break;
        case Shape::scalar:
          dst[0] = src[0];
          break;
      }
    } else if (node.op == Op::constant) {
      dst[0] = node.value;
    } else if (node.op == Op::row_length) {
      dst[0] = static_cast<double>(n);
    } else {
      for (std::size_t c = 0; c < dst.size(); ++c) {
        auto arg = [&](int i) {
          return i < node.arity ? at(node.args[i], static_cast<std::int64_t>(c)) : 0.0;
        };
        dst[c] = info.evaluate(node, arg(0), arg(1), arg(2));
      }
    }
  }

  // A reduction along the row of the values of node.args[0] (and args[1], for a co-moment).
  void reduce_along_row(NodeId id) {
    const Node& node = p_.graph->node(id);
    const std::int64_t n = in_.cols;
    auto& dst = values_[id];
    if (node.op == Op::comoment) {
      dst[0] = comoment(node.args[0], node.args[1]);
      return;
    }
    double result = ir::op_info(node.op).identity;
    for (std::int64_t col = 0; col < n; ++col) {
      const double v = at(node.args[0], col);
      if (node.op == Op::reduce_sum || node.op == Op::reduce_mean) result += v;
      if (node.op == Op::reduce_max) result = std::fmax(result, v);
      if (node.op == Op::reduce_min) result = std::fmin(result, v);
    }
    dst[0] = node.op == Op::reduce_mean ? result / static_cast<double>(n) : result;
  }

  // The definition, in two passes: the means first, then the sum of centered products.
  double comoment(NodeId a, NodeId b) {
    const std::int64_t n = in_.cols;
    double sum_a = 0.0, sum_b = 0.0;
    for (std::int64_t col = 0; col < n; ++col) {
      sum_a += at(a, col);
      sum_b += at(b, col);
    }
    const double mean_a = sum_a / static_cast<double>(n);
    const double mean_b = sum_b / static_cast<double>(n);
    double total = 0.0;
    for (std::int64_t col = 0; col < n; ++col)
      total += (at(a, col) - mean_a) * (at(b, col) - mean_b);
    return total;
  }

 private:
  const ir::Program& p_;
  const InterpreterInputs& in_;
  std::vector<std::vector<double>> values_;
};

// Which nodes come after a reduction across rows: those are evaluated once, after all rows.
std::vector<bool> after_cross_row(const ir::Program& p, const std::vector<NodeId>& order) {
  std::vector<bool> after(p.graph->size(), false);
  for (NodeId id : order) {
    const Node& n = p.graph->node(id);
    bool a = ir::is_reduction(n.op) && n.axis == ir::Axis::across_rows;
    for (int i = 0; i < n.arity; ++i) a = a || after[n.args[i]];
    after[id] = a;
  }
  return after;
}

struct RowResult {
  // Per cross-row reduction (by position in the list), the sum over this worker's rows of
  // its argument: cols values for a Column result, 1 for a Scalar result.
  std::vector<std::vector<double>> partial_sums;
};

// Evaluates rows [first, last): writes row-varying slots into `out` and returns the partial
// sums of the cross-row reductions.
RowResult interpret_rows(const ir::Program& p, const std::vector<NodeId>& row_order,
                         const std::vector<NodeId>& cross_row, const InterpreterInputs& in,
                         std::int64_t first, std::int64_t last, InterpreterOutputs& out) {
  Evaluator eval(p, in);
  for (NodeId id : row_order) eval.size_for(id);
  RowResult result;
  for (NodeId r : cross_row) {
    result.partial_sums.emplace_back(
        ir::varies_along_row(p.graph->node(r).shape) ? static_cast<std::size_t>(in.cols) : 1, 0.0);
  }
  const std::int64_t n = in.cols;
  for (std::int64_t row = first; row < last; ++row) {
    for (NodeId id : row_order) {
      const Node& node = p.graph->node(id);
      if (ir::is_reduction(node.op))
        eval.reduce_along_row(id);
      else
        eval.evaluate(id, row);
    }
    for (std::size_t k = 0; k < cross_row.size(); ++k) {
      auto& sums = result.partial_sums[k];
      const NodeId arg = p.graph->node(cross_row[k]).args[0];
      for (std::size_t c = 0; c < sums.size(); ++c)
        sums[c] += eval.at(arg, static_cast<std::int64_t>(c));
    }
    for (std::size_t i = 0; i < p.slots.size(); ++i) {
      const ir::Slot& slot = p.slots[i];
      if (slot.role != Role::written) continue;
      if (slot.shape == Shape::tile) {
        for (std::int64_t c = 0; c < n; ++c) out.slots[i][row * n + c] = eval.at(slot.value, c);
      } else if (slot.shape == Shape::row_scalar) {
        out.slots[i][row] = eval.at(slot.value, 0);
      }
    }
  }
  return result;
}

}  // namespace

std::size_t slot_elements(Shape shape, std::int64_t rows, std::int64_t cols) {
  switch (shape) {
    case Shape::tile:
      return static_cast<std::size_t>(rows * cols);
    case Shape::column:
      return static_cast<std::size_t>(cols);
    case Shape::row_scalar:
      return static_cast<std::size_t>(rows);
    case Shape::scalar:
      return 1;
  }
  return 0;
}

InterpreterOutputs interpret(const ir::Program& p, const InterpreterInputs& in) {
  passes::verify(p);  // what follows assumes a program that makes sense
  check_inputs(p, in);
  InterpreterOutputs out;
  out.slots.resize(p.slots.size());
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    if (p.slots[i].role == Role::written)
      out.slots[i].assign(slot_elements(p.slots[i].shape, in.rows, in.cols), 0.0);
  }
  const std::vector<NodeId> order = p.reachable_nodes();
  const std::vector<bool> after = after_cross_row(p, order);
  std::vector<NodeId> row_order, cross_row;
  for (NodeId id : order) {
    const Node& n = p.graph->node(id);
    const bool is_cross = ir::is_reduction(n.op) && n.axis == ir::Axis::across_rows;
    if (is_cross) cross_row.push_back(id);
    if (!after[id]) row_order.push_back(id);
  }

  // Rows, in parallel; each worker sums its rows' cross-row contributions in order.
  const std::int64_t workers = std::clamp<std::int64_t>(
      std::min<std::int64_t>(std::thread::hardware_concurrency(), in.rows * in.cols / 65536), 1,
      64);
  const std::int64_t per_worker = std::max<std::int64_t>(1, (in.rows + workers - 1) / workers);
  std::vector<std::future<RowResult>> jobs;
  for (std::int64_t first = 0; first < in.rows; first += per_worker) {
    const std::int64_t last = std::min(in.rows, first + per_worker);
    jobs.push_back(std::async(std::launch::async, [&, first, last] {
      return interpret_rows(p, row_order, cross_row, in, first, last, out);
    }));
  }
  std::vector<std::vector<double>> totals;
  for (NodeId r : cross_row) {
    totals.emplace_back(
        ir::varies_along_row(p.graph->node(r).shape) ? static_cast<std::size_t>(in.cols) : 1, 0.0);
  }
  for (auto& job : jobs) {
    const RowResult partial = job.get();
    for (std::size_t k = 0; k < totals.size(); ++k) {
      for (std::size_t c = 0; c < totals[k].size(); ++c) totals[k][c] += partial.partial_sums[k][c];
    }
  }

  // What depends on the cross-row sums (Column and Scalar values only), once.
  Evaluator eval(p, in);
  for (NodeId id : order) {
    if (ir::varies_across_rows(p.graph->node(id).shape)) continue;
    eval.size_for(id);
  }
  std::size_t next_cross = 0;
  for (NodeId id : order) {
    const Node& node = p.graph->node(id);
    if (ir::varies_across_rows(node.shape)) continue;
    if (ir::is_reduction(node.op) && node.axis == ir::Axis::across_rows) {
      eval.values(id) = totals[next_cross++];
    } else if (ir::is_reduction(node.op)) {
      eval.reduce_along_row(id);
    } else {
      eval.evaluate(id, 0);
    }
  }
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    const ir::Slot& slot = p.slots[i];
    if (slot.role != Role::written) continue;
    if (slot.shape == Shape::column) {
      for (std::int64_t c = 0; c < in.cols; ++c) out.slots[i][c] = eval.at(slot.value, c);
    } else if (slot.shape == Shape::scalar) {
      out.slots[i][0] = eval.at(slot.value, 0);
    }
  }
  return out;
}

}  // namespace tilenorm
