#include "tilenorm/dsl/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <string>
#include <thread>

#include "eval.hpp"
#include "tilenorm/dsl/error.hpp"

namespace tilenorm {
namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;

void check_inputs(const ir::Program& p, const InterpreterInputs& in) {
  auto fail = [&p](const std::string& what) {
    throw ProgramError("interpreter, program '" + p.name + "': " + what);
  };
  if (in.rows < 0 || in.cols < 1) fail("needs rows >= 0 and cols >= 1");
  if (in.row_inputs.size() != p.row_inputs.size()) fail("wrong number of row inputs");
  if (in.columns.size() != p.columns.size()) fail("wrong number of columns");
  if (in.scalars.size() != p.scalars.size()) fail("wrong number of scalars");
  const auto elements = static_cast<std::size_t>(in.rows * in.cols);
  for (std::size_t i = 0; i < in.row_inputs.size(); ++i) {
    if (in.row_inputs[i].size() != elements)
      fail("row input '" + p.row_inputs[i] + "' has the wrong size");
  }
  for (std::size_t i = 0; i < in.columns.size(); ++i) {
    if (in.columns[i].size() != static_cast<std::size_t>(in.cols)) {
      fail("column '" + p.columns[i] + "' has the wrong size");
    }
  }
}

// Evaluates rows [first, last). Every node holds `cols` values; values that do not vary
// along the row are stored once and read through `at`.
void interpret_rows(const ir::Program& p, const std::vector<NodeId>& order,
                    const InterpreterInputs& in, std::int64_t first, std::int64_t last,
                    InterpreterOutputs& out) {
  const std::int64_t n = in.cols;
  std::vector<std::vector<double>> values(p.graph->size());
  for (NodeId id : order) {
    values[id].resize(ir::varies_along_row(p.graph->node(id).shape) ? n : 1);
  }
  auto at = [&values](NodeId id, std::int64_t col) {
    const auto& v = values[id];
    return v.size() == 1 ? v[0] : v[col];
  };
  for (std::int64_t row = first; row < last; ++row) {
    for (NodeId id : order) {
      const Node& node = p.graph->node(id);
      auto& dst = values[id];
      switch (node.op) {
        case Op::load_row: {
          const double* src = in.row_inputs[node.index].data() + row * n;
          std::copy(src, src + n, dst.begin());
          break;
        }
        case Op::load_column:
          std::copy(in.columns[node.index].begin(), in.columns[node.index].end(), dst.begin());
          break;
        case Op::scalar_param:
          dst[0] = in.scalars[node.index];
          break;
        case Op::constant:
          dst[0] = node.value;
          break;
        case Op::row_length:
          dst[0] = static_cast<double>(n);
          break;
        case Op::reduce_sum:
        case Op::reduce_mean: {
          double total = 0.0;
          for (std::int64_t c = 0; c < n; ++c) total += at(node.args[0], c);
          dst[0] = node.op == Op::reduce_mean ? total / static_cast<double>(n) : total;
          break;
        }
        case Op::reduce_max:
        case Op::reduce_min: {
          const bool is_max = node.op == Op::reduce_max;
          double best = is_max ? -std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::infinity();
          for (std::int64_t c = 0; c < n; ++c) {
            best = is_max ? std::fmax(best, at(node.args[0], c))
                          : std::fmin(best, at(node.args[0], c));
          }
          dst[0] = best;
          break;
        }
        default:
          for (std::size_t c = 0; c < dst.size(); ++c) {
            auto arg = [&](int i) {
              return i < node.arity ? at(node.args[i], static_cast<std::int64_t>(c)) : 0.0;
            };
            dst[c] = detail::evaluate_elementwise(node, arg(0), arg(1), arg(2));
          }
      }
    }
    for (std::size_t i = 0; i < p.row_outputs.size(); ++i) {
      for (std::int64_t c = 0; c < n; ++c)
        out.row_outputs[i][row * n + c] = at(p.row_outputs[i].value, c);
    }
    for (std::size_t i = 0; i < p.row_stats.size(); ++i)
      out.row_stats[i][row] = values[p.row_stats[i].value][0];
  }
}

}  // namespace

InterpreterOutputs interpret(const ir::Program& p, const InterpreterInputs& in) {
  check_inputs(p, in);
  InterpreterOutputs out;
  out.row_outputs.assign(p.row_outputs.size(),
                         std::vector<double>(static_cast<std::size_t>(in.rows * in.cols)));
  out.row_stats.assign(p.row_stats.size(), std::vector<double>(static_cast<std::size_t>(in.rows)));
  const std::vector<NodeId> order = p.reachable_nodes();
  const std::int64_t workers = std::clamp<std::int64_t>(
      std::min<std::int64_t>(std::thread::hardware_concurrency(), in.rows * in.cols / 65536), 1,
      64);
  const std::int64_t per_worker = (in.rows + workers - 1) / workers;
  std::vector<std::future<void>> jobs;
  for (std::int64_t first = 0; first < in.rows; first += per_worker) {
    const std::int64_t last = std::min(in.rows, first + per_worker);
    jobs.push_back(std::async(
        std::launch::async, [&, first, last] { interpret_rows(p, order, in, first, last, out); }));
  }
  for (auto& job : jobs) job.get();
  return out;
}

}  // namespace tilenorm
