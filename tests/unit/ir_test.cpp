// The IR: hash-consing, shape inference, the text listing and the structural hash.
#include "tilenorm/dsl/ir.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"

namespace {

using tilenorm::DType;
using tilenorm::ir::Graph;
using tilenorm::ir::NodeId;
using tilenorm::ir::Op;
using tilenorm::ir::Shape;

// Every choice that must show up in the hash, so that each test changes exactly one of them.
struct TinyProgramChoices {
  std::string name = "tiny";
  std::string input = "x";
  std::string column = "w";
  std::string scalar = "eps";
  std::string output = "y";
  std::string saved = "rstd";
  bool multiply = true;  // x * w, else x + w
  double scale = 1.5;
  bool with_dead_nodes = false;
};

// Each value is built in its own statement: the order of operand evaluation inside one
// expression is unspecified, and node ids (so the listing) follow creation order.
tilenorm::ir::Program tiny_program(const TinyProgramChoices& choices) {
  return tilenorm::dsl::make_program(choices.name, [&choices](auto& p) {
    auto x = p.input(choices.input);
    if (choices.with_dead_nodes) {
      auto unused_tile = exp(x * 3.0);
      auto unused_sum = sum(unused_tile);
      (void)unused_sum;
    }
    auto w = p.column(choices.column);
    auto eps = p.scalar(choices.scalar);
    auto combined = choices.multiply ? x * w : x + w;
    auto average = mean(combined);
    auto variance = average * average;
    auto rstd = rsqrt(variance + eps);
    p.save(choices.saved, rstd);
    auto centered = combined - average;
    p.output(choices.output, centered * choices.scale);
  });
}

// The four shape classes as leaves (and a reduction) of one graph.
struct ShapedLeaves {
  Graph graph;
  NodeId tile = graph.leaf(Op::load_row, Shape::tile, 0);
  NodeId column = graph.leaf(Op::load_column, Shape::column, 0);
  NodeId scalar = graph.leaf(Op::scalar_param, Shape::scalar, 0);
  NodeId row_scalar = graph.reduce(Op::reduce_sum, tile);

  NodeId of(Shape shape) const {
    switch (shape) {
      case Shape::scalar:
        return scalar;
      case Shape::column:
        return column;
      case Shape::row_scalar:
        return row_scalar;
      case Shape::tile:
        return tile;
    }
    return tile;
  }
};

constexpr Shape kAllShapes[] = {Shape::scalar, Shape::column, Shape::row_scalar, Shape::tile};

// The broadcast table written out by hand rather than derived from the bit encoding.
Shape expected_broadcast(Shape a, Shape b) {
  if (a == Shape::tile || b == Shape::tile) return Shape::tile;
  if (a == b) return a;
  if (a == Shape::scalar) return b;
  if (b == Shape::scalar) return a;
  return Shape::tile;  // a Column against a RowScalar varies both ways
}

template <class Value>
constexpr Shape static_shape() {
  return std::remove_cvref_t<Value>::shape;
}

std::string message_of_program_error(auto&& action) {
  try {
    action();
  } catch (const tilenorm::ProgramError& error) {
    return error.what();
  }
  FAIL("expected a tilenorm::ProgramError");
  return {};
}

}  // namespace

TEST_CASE("ir: building the same expression twice yields the same node") {
  const auto program = tilenorm::dsl::make_program("shared", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto first = x * w + 2.0;
    const std::size_t nodes = first.graph()->size();
    auto second = x * w + 2.0;
    CHECK(first.id() == second.id());
    CHECK(first.graph()->size() == nodes);
    CHECK(mean(first).id() == mean(second).id());
    CHECK(cast<DType::bf16>(x).id() == cast<DType::bf16>(x).id());
    CHECK(cast<DType::bf16>(x).id() != cast<DType::f16>(x).id());
    CHECK((x * w).id() != (w * x).id());  // commutation is cse's job, not construction's
    CHECK(mean(x).id() != sum(x).id());
    p.output("y", first);
  });
  CHECK(program.graph->size() == program.reachable_nodes().size() + 6);
}

TEST_CASE("ir: constants are interned by bit pattern") {
  Graph graph;
  CHECK(graph.constant(1.5) == graph.constant(1.5));
  CHECK(graph.constant(0.0) != graph.constant(-0.0));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(graph.constant(nan) == graph.constant(nan));
  CHECK(graph.size() == 4);
}

TEST_CASE("ir: node ids are a topological order") {
  const auto program = tiny_program({.with_dead_nodes = true});
  for (NodeId id = 0; id < program.graph->size(); ++id) {
    const auto& node = program.graph->node(id);
    for (int i = 0; i < node.arity; ++i) CHECK(node.args[i] < id);
  }
}

TEST_CASE("ir: binary shapes broadcast for every pair of shape classes") {
  ShapedLeaves leaves;
  for (Shape a : kAllShapes) {
    for (Shape b : kAllShapes) {
      CAPTURE(tilenorm::ir::shape_name(a));
      CAPTURE(tilenorm::ir::shape_name(b));
      const NodeId sum = leaves.graph.binary(Op::add, leaves.of(a), leaves.of(b));
      CHECK(leaves.graph.node(sum).shape == expected_broadcast(a, b));
      CHECK(tilenorm::ir::broadcast(a, b) == expected_broadcast(a, b));
      const NodeId less = leaves.graph.binary(Op::less, leaves.of(a), leaves.of(b));
      CHECK(leaves.graph.node(less).shape == expected_broadcast(a, b));
    }
  }
}

TEST_CASE("ir: unary, select and reduction shapes") {
  ShapedLeaves leaves;
  Graph& g = leaves.graph;
  for (Shape s : kAllShapes) {
    CAPTURE(tilenorm::ir::shape_name(s));
    CHECK(g.node(g.unary(Op::exp, leaves.of(s))).shape == s);
    CHECK(g.node(g.unary(Op::round_to, leaves.of(s), DType::bf16)).shape == s);
  }
  CHECK(g.node(g.select(leaves.column, leaves.row_scalar, leaves.scalar)).shape == Shape::tile);
  CHECK(g.node(g.select(leaves.scalar, leaves.scalar, leaves.column)).shape == Shape::column);
  CHECK(g.node(g.select(leaves.row_scalar, leaves.scalar, leaves.scalar)).shape ==
        Shape::row_scalar);
  CHECK(g.node(g.reduce(Op::reduce_max, leaves.tile)).shape == Shape::row_scalar);
  CHECK(g.node(g.constant(3.0)).shape == Shape::scalar);
}

TEST_CASE("ir: reductions of anything but a Tile and dangling arguments are rejected") {
  ShapedLeaves leaves;
  Graph& g = leaves.graph;
  CHECK(message_of_program_error([&] { g.reduce(Op::reduce_sum, leaves.column); }) ==
        "reduction 'sum' needs a Tile, got a Column");
  CHECK(message_of_program_error([&] { g.reduce(Op::reduce_mean, leaves.row_scalar); }) ==
        "reduction 'mean' needs a Tile, got a RowScalar");
  CHECK(message_of_program_error([&] { g.reduce(Op::reduce_max, leaves.scalar); }) ==
        "reduction 'max_reduce' needs a Tile, got a Scalar");
  CHECK(message_of_program_error([&] { g.binary(Op::add, leaves.tile, 99); }) ==
        "IR node 'add' refers to a node that does not exist in this graph");
}

TEST_CASE("ir: the DSL types carry the same shapes as the graph") {
  tilenorm::dsl::make_program("shapes", [](auto& p) {
    auto tile = p.input("x");
    auto column = p.column("w");
    auto scalar = p.scalar("s");
    auto row_scalar = mean(tile);
    auto check = [](auto value, Shape expected) {
      static_assert(tilenorm::dsl::is_value_v<decltype(value)>);
      CHECK(static_shape<decltype(value)>() == expected);
      CHECK(value.graph()->node(value.id()).shape == expected);
    };
    check(scalar + scalar, Shape::scalar);
    check(scalar + column, Shape::column);
    check(scalar + row_scalar, Shape::row_scalar);
    check(scalar + tile, Shape::tile);
    check(column + column, Shape::column);
    check(column + row_scalar, Shape::tile);
    check(column + tile, Shape::tile);
    check(row_scalar + row_scalar, Shape::row_scalar);
    check(row_scalar + tile, Shape::tile);
    check(tile + tile, Shape::tile);
    check(2.0 * column, Shape::column);
    check(row_scalar / 3, Shape::row_scalar);
    check(where(column > 0.0, row_scalar, 1.0), Shape::tile);
    check(cast<DType::f16>(column), Shape::column);
    check(max(tile * column), Shape::row_scalar);
    check(p.row_length(), Shape::scalar);
    p.output("y", tile + column + scalar);
  });
}

TEST_CASE("ir: to_string lists the reachable nodes with dense numbers") {
  const auto program = tilenorm::dsl::make_program("listing", [](auto& p) {
    auto x = p.input("x");
    auto unused = exp(x);  // dead: not listed
    (void)unused;
    auto w = p.column("w");
    auto weighted = x * w;
    auto total = sum(weighted);
    p.save("total", total);
    auto shifted = weighted + 1.5;
    p.output("y", cast<DType::bf16>(shifted));
  });
  CHECK(program.to_string() ==
        "program listing\n"
        "  row_inputs: x\n"
        "  columns: w\n"
        "  scalars:\n"
        "  %0 = load_row x  : Tile\n"
        "  %1 = load_column w  : Column\n"
        "  %2 = mul %0, %1  : Tile\n"
        "  %3 = sum %2  : RowScalar\n"
        "  %4 = constant 1.5  : Scalar\n"
        "  %5 = add %2, %4  : Tile\n"
        "  %6 = round_to<bf16> %5  : Tile\n"
        "  output y = %6\n"
        "  save total = %3\n");
}

TEST_CASE("ir: reachable_nodes follows the outputs and the saved statistics") {
  const auto program = tiny_program({.with_dead_nodes = true});
  const auto reachable = program.reachable_nodes();
  CHECK(std::is_sorted(reachable.begin(), reachable.end()));
  CHECK(reachable.size() == tiny_program({}).graph->size());
  CHECK(reachable.size() < program.graph->size());
}

TEST_CASE("ir: the hash is equal for programs built separately") {
  CHECK(tiny_program({}).hash() == tiny_program({}).hash());
  const std::string hash = tiny_program({}).hash();
  CHECK(hash.size() == 16);
  CHECK(hash.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("ir: the hash ignores dead nodes") {
  const auto plain = tiny_program({});
  const auto with_dead = tiny_program({.with_dead_nodes = true});
  REQUIRE(with_dead.graph->size() > plain.graph->size());
  CHECK(with_dead.hash() == plain.hash());
  CHECK(with_dead.to_string() == plain.to_string());
}

TEST_CASE("ir: the hash changes with every op, constant and name") {
  const std::vector<TinyProgramChoices> variants = {
      {},
      {.name = "tiny2"},
      {.input = "z"},
      {.column = "gamma"},
      {.scalar = "epsilon"},
      {.output = "out"},
      {.saved = "inv_std"},
      {.multiply = false},
      {.scale = 2.5},
      {.scale = -1.5},
  };
  std::set<std::string> hashes;
  for (const auto& variant : variants) hashes.insert(tiny_program(variant).hash());
  CHECK(hashes.size() == variants.size());
}

TEST_CASE("ir: the hash of a fixed program is pinned") {
  // The same on every platform and compiler; a change here invalidates every tuning
  // database, so it must be deliberate.
  CHECK(tiny_program({}).hash() == "9c010789316d51fa");
}
