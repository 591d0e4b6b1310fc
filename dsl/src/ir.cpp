#include "tilenorm/dsl/ir.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>
#include <sstream>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm::ir {

std::string_view shape_name(Shape s) {
  switch (s) {
    case Shape::scalar:
      return "Scalar";
    case Shape::column:
      return "Column";
    case Shape::row_scalar:
      return "RowScalar";
    case Shape::tile:
      return "Tile";
  }
  return "?";
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::load_row:
      return "load_row";
    case Op::load_column:
      return "load_column";
    case Op::scalar_param:
      return "scalar_param";
    case Op::constant:
      return "constant";
    case Op::row_length:
      return "row_length";
    case Op::neg:
      return "neg";
    case Op::abs:
      return "abs";
    case Op::sqrt:
      return "sqrt";
    case Op::rsqrt:
      return "rsqrt";
    case Op::exp:
      return "exp";
    case Op::log:
      return "log";
    case Op::tanh:
      return "tanh";
    case Op::sigmoid:
      return "sigmoid";
    case Op::round_to:
      return "round_to";
    case Op::add:
      return "add";
    case Op::sub:
      return "sub";
    case Op::mul:
      return "mul";
    case Op::div:
      return "div";
    case Op::min:
      return "min";
    case Op::max:
      return "max";
    case Op::less:
      return "less";
    case Op::less_equal:
      return "less_equal";
    case Op::greater:
      return "greater";
    case Op::greater_equal:
      return "greater_equal";
    case Op::select:
      return "select";
    case Op::reduce_sum:
      return "sum";
    case Op::reduce_mean:
      return "mean";
    case Op::reduce_max:
      return "max_reduce";
    case Op::reduce_min:
      return "min_reduce";
  }
  return "?";
}

int op_arity(Op op) {
  switch (op) {
    case Op::load_row:
    case Op::load_column:
    case Op::scalar_param:
    case Op::constant:
    case Op::row_length:
      return 0;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::min:
    case Op::max:
    case Op::less:
    case Op::less_equal:
    case Op::greater:
    case Op::greater_equal:
      return 2;
    case Op::select:
      return 3;
    default:
      return 1;
  }
}

bool is_reduction(Op op) {
  return op == Op::reduce_sum || op == Op::reduce_mean || op == Op::reduce_max ||
         op == Op::reduce_min;
}

bool is_commutative(Op op) {
  return op == Op::add || op == Op::mul || op == Op::min || op == Op::max;
}

bool Node::operator==(const Node& other) const {
  // Constants compare by bit pattern so that -0.0 and 0.0 (and NaNs) stay distinct.
  return op == other.op && shape == other.shape && arity == other.arity && args == other.args &&
         index == other.index &&
         std::bit_cast<std::uint64_t>(value) == std::bit_cast<std::uint64_t>(other.value) &&
         dtype == other.dtype;
}

std::size_t NodeHash::operator()(const Node& node) const {
  std::size_t h = static_cast<std::size_t>(node.op) * 0x9E3779B97F4A7C15ull;
  auto mix = [&h](std::uint64_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
  for (int i = 0; i < node.arity; ++i) mix(node.args[i]);
  mix(static_cast<std::uint64_t>(node.index));
  mix(std::bit_cast<std::uint64_t>(node.value));
  mix(static_cast<std::uint64_t>(node.dtype));
  return h;
}

NodeId Graph::intern(Node node) {
  node.arity = static_cast<std::uint8_t>(op_arity(node.op));
  for (int i = 0; i < node.arity; ++i) {
    if (node.args[i] >= nodes_.size()) {
      throw ProgramError("IR node '" + std::string(op_name(node.op)) +
                         "' refers to a node that does not exist in this graph");
    }
  }
  for (int i = node.arity; i < 3; ++i) node.args[i] = 0;
  if (node.op != Op::constant) node.value = 0.0;
  if (node.op != Op::round_to) node.dtype = DType::f32;
  if (is_reduction(node.op)) {
    const Shape arg = nodes_[node.args[0]].shape;
    if (arg != Shape::tile) {
      throw ProgramError("reduction '" + std::string(op_name(node.op)) + "' needs a Tile, got a " +
                         std::string(shape_name(arg)));
    }
    node.shape = Shape::row_scalar;
  } else if (node.arity > 0) {
    node.shape = nodes_[node.args[0]].shape;
    for (int i = 1; i < node.arity; ++i)
      node.shape = broadcast(node.shape, nodes_[node.args[i]].shape);
  }
  auto [it, inserted] = interned_.try_emplace(node, static_cast<NodeId>(nodes_.size()));
  if (inserted) nodes_.push_back(node);
  return it->second;
}

NodeId Graph::leaf(Op op, Shape shape, std::int32_t index) {
  Node n;
  n.op = op;
  n.shape = shape;
  n.index = index;
  return intern(n);
}

NodeId Graph::constant(double value) {
  Node n;
  n.op = Op::constant;
  n.shape = Shape::scalar;
  n.value = value;
  return intern(n);
}

NodeId Graph::unary(Op op, NodeId a, DType dtype) {
  Node n;
  n.op = op;
  n.args = {a, 0, 0};
  n.dtype = dtype;
  return intern(n);
}

NodeId Graph::binary(Op op, NodeId a, NodeId b) {
  Node n;
  n.op = op;
  n.args = {a, b, 0};
  return intern(n);
}

NodeId Graph::select(NodeId condition, NodeId if_true, NodeId if_false) {
  Node n;
  n.op = Op::select;
  n.args = {condition, if_true, if_false};
  return intern(n);
}

NodeId Graph::reduce(Op op, NodeId tile) {
  Node n;
  n.op = op;
  n.args = {tile, 0, 0};
  return intern(n);
}

std::vector<NodeId> Program::reachable_nodes() const {
  std::vector<bool> seen(graph->size(), false);
  std::vector<NodeId> stack;
  for (const auto* outputs : {&row_outputs, &row_stats}) {
    for (const Output& out : *outputs) stack.push_back(out.value);
  }
  while (!stack.empty()) {
    NodeId id = stack.back();
    stack.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    const Node& n = graph->node(id);
    for (int i = 0; i < n.arity; ++i) stack.push_back(n.args[i]);
  }
  std::vector<NodeId> result;
  for (NodeId id = 0; id < seen.size(); ++id) {
    if (seen[id]) result.push_back(id);
  }
  return result;
}

namespace {

std::string format_constant(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Renders the reachable nodes with dense local numbers, so that the text (and the hash built
// from it) does not depend on how many dead nodes the graph holds.
std::string render(const Program& p, bool with_shapes) {
  std::ostringstream out;
  out << "program " << p.name << "\n";
  auto list = [&out](std::string_view what, const std::vector<std::string>& names) {
    out << "  " << what << ":";
    for (const auto& n : names) out << ' ' << n;
    out << "\n";
  };
  list("row_inputs", p.row_inputs);
  list("columns", p.columns);
  list("scalars", p.scalars);
  std::unordered_map<NodeId, std::size_t> local;
  for (NodeId id : p.reachable_nodes()) {
    const Node& n = p.graph->node(id);
    const std::size_t number = local.size();
    local[id] = number;
    out << "  %" << number << " = " << op_name(n.op);
    switch (n.op) {
      case Op::load_row:
        out << ' ' << p.row_inputs.at(n.index);
        break;
      case Op::load_column:
        out << ' ' << p.columns.at(n.index);
        break;
      case Op::scalar_param:
        out << ' ' << p.scalars.at(n.index);
        break;
      case Op::constant:
        out << ' ' << format_constant(n.value);
        break;
      case Op::round_to:
        out << '<' << dtype_name(n.dtype) << '>';
        break;
      default:
        break;
    }
    for (int i = 0; i < n.arity; ++i) out << (i ? ", %" : " %") << local.at(n.args[i]);
    if (with_shapes) out << "  : " << shape_name(n.shape);
    out << "\n";
  }
  for (const Output& o : p.row_outputs)
    out << "  output " << o.name << " = %" << local.at(o.value) << "\n";
  for (const Output& o : p.row_stats)
    out << "  save " << o.name << " = %" << local.at(o.value) << "\n";
  return out.str();
}

}  // namespace

std::string Program::to_string() const {
  return render(*this, true);
}

std::string Program::hash() const {
  // FNV-1a over the canonical listing: stable across platforms, compilers and runs.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : render(*this, false)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace tilenorm::ir
