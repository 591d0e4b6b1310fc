#include "tilenorm/dsl/ir.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>
#include <sstream>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/ops.hpp"

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

std::string_view axis_name(Axis a) {
  switch (a) {
    case Axis::along_row:
      return "along_row";
    case Axis::across_rows:
      return "across_rows";
  }
  return "?";
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::read:
      return "read";
    case Role::written:
      return "written";
  }
  return "?";
}

std::string_view slot_kind(const Slot& slot) {
  const bool read = slot.role == Role::read;
  switch (slot.shape) {
    case Shape::tile:
      return read ? "row input" : "row output";
    case Shape::column:
      return read ? "column" : "column output";
    case Shape::row_scalar:
      return read ? "row values" : "saved statistic";
    case Shape::scalar:
      return read ? "scalar" : "scalar output";
  }
  return "slot";
}

DType storage_dtype(const Slot& slot, DType row_dtype, DType param_dtype) {
  if (slot.dtype) return *slot.dtype;
  switch (slot.shape) {
    case Shape::tile:
      return row_dtype;
    case Shape::column:
      return param_dtype;
    case Shape::row_scalar:
    case Shape::scalar:
      return DType::f32;
  }
  return DType::f32;
}

bool Node::operator==(const Node& other) const {
  // Constants compare by bit pattern so that -0.0 and 0.0 (and NaNs) stay distinct.
  return op == other.op && shape == other.shape && axis == other.axis && arity == other.arity &&
         args == other.args && index == other.index &&
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
  mix(static_cast<std::uint64_t>(node.axis));
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
  if (node.op != Op::load) node.index = 0;
  if (is_reduction(node.op)) {
    Shape arg = nodes_[node.args[0]].shape;  // a co-moment reduces its broadcast operands
    for (int i = 1; i < node.arity; ++i) arg = broadcast(arg, nodes_[node.args[i]].shape);
    if (!varies(arg, node.axis)) {
      throw ProgramError("reduction '" + std::string(op_name(node.op)) + "' " +
                         std::string(axis_name(node.axis)) + " needs a value that varies " +
                         (node.axis == Axis::along_row ? "along the row" : "across rows") +
                         ", got a " + std::string(shape_name(arg)));
    }
    node.shape = reduced(arg, node.axis);
  } else {
    node.axis = Axis::along_row;
    if (node.op == Op::constant || node.op == Op::row_length) node.shape = Shape::scalar;
    if (node.arity > 0) {
      node.shape = nodes_[node.args[0]].shape;
      for (int i = 1; i < node.arity; ++i)
        node.shape = broadcast(node.shape, nodes_[node.args[i]].shape);
    }
  }
  auto [it, inserted] = interned_.try_emplace(node, static_cast<NodeId>(nodes_.size()));
  if (inserted) nodes_.push_back(node);
  return it->second;
}

NodeId Graph::load(Shape shape, std::int32_t slot) {
  Node n;
  n.op = Op::load;
  n.shape = shape;
  n.index = slot;
  return intern(n);
}

NodeId Graph::row_length() {
  Node n;
  n.op = Op::row_length;
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

NodeId Graph::reduce(Op op, NodeId value, Axis axis) {
  Node n;
  n.op = op;
  n.axis = axis;
  n.args = {value, 0, 0};
  return intern(n);
}

NodeId Graph::comoment(NodeId a, NodeId b) {
  Node n;
  n.op = Op::comoment;
  n.args = {a, b, 0};
  return intern(n);
}

std::optional<std::size_t> Program::find_slot(std::string_view name) const {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].name == name) return i;
  }
  return std::nullopt;
}

std::vector<NodeId> Program::reachable_nodes() const {
  std::vector<bool> seen(graph->size(), false);
  std::vector<NodeId> stack;
  for (const Slot& slot : slots) {
    if (slot.role == Role::written) stack.push_back(slot.value);
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
  for (const Slot& slot : p.slots) {
    out << "  " << role_name(slot.role) << ' ' << shape_name(slot.shape) << ' ' << slot.name;
    if (slot.dtype) out << " : " << dtype_name(*slot.dtype);
    if (slot.needs_grad) out << " (needs grad)";
    out << "\n";
  }
  std::unordered_map<NodeId, std::size_t> local;
  for (NodeId id : p.reachable_nodes()) {
    const Node& n = p.graph->node(id);
    const std::size_t number = local.size();
    local[id] = number;
    out << "  %" << number << " = " << op_name(n.op);
    if (n.op == Op::load) out << ' ' << p.slots.at(n.index).name;
    if (n.op == Op::constant) out << ' ' << format_constant(n.value);
    if (n.op == Op::round_to) out << '<' << dtype_name(n.dtype) << '>';
    if (is_reduction(n.op) && n.axis != Axis::along_row) out << '<' << axis_name(n.axis) << '>';
    for (int i = 0; i < n.arity; ++i) out << (i ? ", %" : " %") << local.at(n.args[i]);
    if (with_shapes) out << "  : " << shape_name(n.shape);
    out << "\n";
  }
  for (const Slot& slot : p.slots) {
    if (slot.role == Role::written)
      out << "  store " << slot.name << " = %" << local.at(slot.value) << "\n";
  }
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
