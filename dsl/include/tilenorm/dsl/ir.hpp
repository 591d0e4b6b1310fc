#pragma once
// The run-time IR: a hash-consed DAG of nodes. Structurally equal nodes get the same id, so
// construction already shares common subexpressions, and node ids are a topological order
// (arguments are always created before their users).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"

namespace tilenorm::ir {

// A value's shape class is two bits: does it vary along a row (across columns), and does it
// vary from row to row. Broadcasting two values is the bitwise or of their classes.
enum class Shape : std::uint8_t { scalar = 0, column = 1, row_scalar = 2, tile = 3 };

constexpr Shape broadcast(Shape a, Shape b) {
  return static_cast<Shape>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr Shape operator|(Shape a, Shape b) {
  return broadcast(a, b);
}
constexpr bool varies_along_row(Shape s) {
  return (static_cast<std::uint8_t>(s) & 1) != 0;
}
std::string_view shape_name(Shape s);

enum class Op : std::uint8_t {
  // Leaves.
  load_row,      // row input number `index`            (tile)
  load_column,   // column parameter number `index`     (column)
  scalar_param,  // launch scalar number `index`        (scalar)
  constant,      // `value`                             (scalar)
  row_length,    // N, the number of columns            (scalar)
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
  less,
  less_equal,
  greater,
  greater_equal,  // 1 or 0
  // Elementwise, three arguments: args[0] != 0 ? args[1] : args[2].
  select,
  // Reductions along the row: tile -> row_scalar.
  reduce_sum,
  reduce_mean,
  reduce_max,
  reduce_min,
};

std::string_view op_name(Op op);
int op_arity(Op op);
bool is_reduction(Op op);
bool is_commutative(Op op);

using NodeId = std::uint32_t;

struct Node {
  Op op{};
  Shape shape{};
  std::uint8_t arity = 0;
  std::array<NodeId, 3> args{};
  std::int32_t index = 0;    // slot number of a leaf
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
  NodeId leaf(Op op, Shape shape, std::int32_t index);
  NodeId constant(double value);
  NodeId unary(Op op, NodeId a, DType dtype = DType::f32);
  NodeId binary(Op op, NodeId a, NodeId b);
  NodeId select(NodeId condition, NodeId if_true, NodeId if_false);
  NodeId reduce(Op op, NodeId tile);

 private:
  std::vector<Node> nodes_;
  std::unordered_map<Node, NodeId, NodeHash> interned_;
};

// One named value the kernel writes.
struct Output {
  std::string name;
  NodeId value;
};

// A norm program: its declared slots, its outputs and the graph they point into.
struct Program {
  std::string name;
  std::shared_ptr<Graph> graph;
  std::vector<std::string> row_inputs;  // [M, N] tensors read
  std::vector<std::string> columns;     // [N] parameters
  std::vector<std::string> scalars;     // launch scalars (fp32)
  std::vector<Output> row_outputs;      // [M, N] tensors written (tiles)
  std::vector<Output> row_stats;        // [M] fp32 side outputs (row scalars)

  // Nodes reachable from the outputs, in increasing id order (a topological order).
  std::vector<NodeId> reachable_nodes() const;
  // Human-readable SSA listing of the reachable nodes and the outputs.
  std::string to_string() const;
  // Stable structural identity: equal for equal programs on every platform and run.
  std::string hash() const;
};

}  // namespace tilenorm::ir
