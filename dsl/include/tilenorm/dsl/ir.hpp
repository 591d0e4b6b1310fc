#pragma once
// The run-time IR: a hash-consed DAG of nodes. Structurally equal nodes get the same id, so
// construction already shares common subexpressions, and node ids are a topological order
// (arguments are always created before their users). What each operation means is declared
// once, in the op table (ops.hpp).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"

namespace tilenorm::ir {

// A value's shape class is two bits: does it vary along a row (from column to column), and
// does it vary across rows (from row to row). Broadcasting two values is the bitwise or of
// their classes; a reduction clears one bit.
enum class Shape : std::uint8_t { scalar = 0, column = 1, row_scalar = 2, tile = 3 };

// The shape bit a reduction clears: along the row (Tile -> RowScalar, Column -> Scalar) or
// across rows (Tile -> Column, RowScalar -> Scalar).
enum class Axis : std::uint8_t { along_row = 1, across_rows = 2 };

constexpr Shape broadcast(Shape a, Shape b) {
  return static_cast<Shape>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr Shape operator|(Shape a, Shape b) {
  return broadcast(a, b);
}
constexpr bool varies(Shape s, Axis axis) {
  return (static_cast<std::uint8_t>(s) & static_cast<std::uint8_t>(axis)) != 0;
}
constexpr bool varies_along_row(Shape s) {
  return varies(s, Axis::along_row);
}
constexpr bool varies_across_rows(Shape s) {
  return varies(s, Axis::across_rows);
}
constexpr Shape reduced(Shape s, Axis axis) {
  return static_cast<Shape>(static_cast<std::uint8_t>(s) & ~static_cast<std::uint8_t>(axis));
}
// True when a value of shape `inner` can be used where `outer` is expected (a broadcast).
constexpr bool fits_in(Shape inner, Shape outer) {
  return broadcast(inner, outer) == outer;
}
std::string_view shape_name(Shape s);
std::string_view axis_name(Axis a);

// Every operation; its properties are in the op table (ops.hpp), one row each.
enum class Op : std::uint8_t {
  // Leaves.
  load,        // read slot number `index` (its shape is the slot's)
  constant,    // `value`                      (scalar)
  row_length,  // N, the number of columns     (scalar)
  // Elementwise, one argument.
  neg,
  abs,
  sqrt,
  rsqrt,
  exp,
  log,
  tanh,
  sigmoid,
  round_to,  // round to the storage type `dtype` and back (a cast)
  // Elementwise, two arguments.
  add,
  sub,
  mul,
  div,
  min,
  max,
  pow,
  less,
  less_equal,
  greater,
  greater_equal,  // 1 or 0
  // Elementwise, three arguments: args[0] != 0 ? args[1] : args[2].
  select,
  // Reductions along `axis`.
  reduce_sum,
  reduce_mean,
  reduce_max,
  reduce_min,
  // The co-moment of two values along the row: sum of (a - mean(a)) * (b - mean(b)). It takes
  // one reduction phase where the centered sum it replaces takes two (fuse_moments).
  comoment,
};
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::comoment) + 1;

using NodeId = std::uint32_t;

struct Node {
  Op op{};
  Shape shape{};
  Axis axis = Axis::along_row;  // reductions only
  std::uint8_t arity = 0;
  std::array<NodeId, 3> args{};
  std::int32_t index = 0;    // slot number of a load
  double value = 0.0;        // constant value
  DType dtype = DType::f32;  // target of round_to

  bool operator==(const Node& other) const;
};

struct NodeHash {
  std::size_t operator()(const Node& node) const;
};

class Graph {
 public:
  // Returns the id of a node equal to `node`, adding it if it is new. Computes the shape.
  NodeId intern(Node node);
  const Node& node(NodeId id) const { return nodes_.at(id); }
  std::size_t size() const { return nodes_.size(); }

  // Convenience constructors; each one interns.
  NodeId load(Shape shape, std::int32_t slot);
  NodeId constant(double value);
  NodeId row_length();
  NodeId unary(Op op, NodeId a, DType dtype = DType::f32);
  NodeId binary(Op op, NodeId a, NodeId b);
  NodeId select(NodeId condition, NodeId if_true, NodeId if_false);
  NodeId reduce(Op op, NodeId value, Axis axis = Axis::along_row);
  NodeId comoment(NodeId a, NodeId b);

 private:
  std::vector<Node> nodes_;
  std::unordered_map<Node, NodeId, NodeHash> interned_;
};

// A slot is one named value the program reads or writes. Its shape says what it is:
//   Tile       an [M, N] tensor with a row stride     (x, y, dy, dx)
//   Column     an [N] vector shared by every row       (weight, bias, dweight)
//   RowScalar  an [M] fp32 vector, one value per row   (saved mean and rstd)
//   Scalar     one fp32 value: a launch argument when read (eps), a device float when written
enum class Role : std::uint8_t { read, written };
std::string_view role_name(Role role);

struct Slot {
  std::string name;
  Role role = Role::read;
  Shape shape = Shape::tile;
  // The storage type. Unset: Tiles use the launch's row dtype, Columns the launch's parameter
  // dtype. RowScalar and Scalar slots are always fp32.
  std::optional<DType> dtype;
  NodeId value = 0;         // written slots: the value stored
  bool needs_grad = false;  // read slots: autodiff derives d<name> for it
};

// What a slot is called in messages: "row input", "column output", "saved statistic", ...
std::string_view slot_kind(const Slot& slot);

// A slot's storage type in a launch whose Tiles are `row_dtype` and Columns `param_dtype`.
DType storage_dtype(const Slot& slot, DType row_dtype, DType param_dtype);

// A norm program: its slots and the graph their values point into.
struct Program {
  std::string name;
  std::shared_ptr<Graph> graph;
  std::vector<Slot> slots;

  // The index of the slot called `name`, if any.
  std::optional<std::size_t> find_slot(std::string_view name) const;
  // Nodes reachable from the written slots, in increasing id order (a topological order).
  std::vector<NodeId> reachable_nodes() const;
  // Human-readable SSA listing of the slots and the reachable nodes.
  std::string to_string() const;
  // Stable structural identity: equal for equal programs on every platform and run.
  std::string hash() const;
};

}  // namespace tilenorm::ir
