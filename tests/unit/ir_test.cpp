// The IR: hash-consing, shape inference, the text listing and the structural hash.
#include "tilenorm/dsl/ir.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"

namespace {

using tilenorm::DType;
using tilenorm::dsl::Grad;
using tilenorm::ir::Axis;
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
  Grad input_grad = Grad::yes;
  Grad scalar_grad = Grad::no;
  std::optional<DType> input_dtype = std::nullopt;
  std::optional<DType> output_dtype = std::nullopt;
};

// Each value is built in its own statement: the order of operand evaluation inside one
// expression is unspecified, and node ids (so the listing) follow creation order.
tilenorm::ir::Program tiny_program(const TinyProgramChoices& choices) {
  return tilenorm::dsl::make_program(choices.name, [&choices](auto& p) {
    auto x = p.input(choices.input, choices.input_grad, choices.input_dtype);
    if (choices.with_dead_nodes) {
      auto unused_tile = exp(x * 3.0);
      auto unused_sum = sum(unused_tile);
      (void)unused_sum;
    }
    auto w = p.column(choices.column);
    auto eps = p.scalar(choices.scalar, choices.scalar_grad);
    auto combined = choices.multiply ? x * w : x + w;
    auto average = mean(combined);
    auto variance = average * average;
    auto rstd = rsqrt(variance + eps);
    p.save(choices.saved, rstd);
    auto centered = combined - average;
    p.output(choices.output, centered * choices.scale, choices.output_dtype);
  });
}

// The four shape classes as loads (and a reduction) of one graph.
struct ShapedLeaves {
  Graph graph;
  NodeId tile = graph.load(Shape::tile, 0);
  NodeId column = graph.load(Shape::column, 1);
  NodeId scalar = graph.load(Shape::scalar, 2);
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
    CHECK(pow(x, 2.0).id() == pow(x, 2.0).id());
    CHECK(pow(x, 2.0).id() != pow(x, 3.0).id());
    p.output("y", first);
  });
  // Dead: mean(first), the two casts, w * x, mean(x), sum(x), pow(x, 2), 3 and pow(x, 3).
  CHECK(program.graph->size() == program.reachable_nodes().size() + 9);
}

TEST_CASE("ir: constants are interned by bit pattern") {
  Graph graph;
  CHECK(graph.constant(1.5) == graph.constant(1.5));
  CHECK(graph.constant(0.0) != graph.constant(-0.0));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(graph.constant(nan) == graph.constant(nan));
  CHECK(graph.size() == 4);
}

TEST_CASE("ir: loads are interned by slot and shape, and the row length once") {
  Graph graph;
  CHECK(graph.load(Shape::tile, 0) == graph.load(Shape::tile, 0));
  CHECK(graph.load(Shape::tile, 0) != graph.load(Shape::tile, 1));
  CHECK(graph.load(Shape::column, 0) != graph.load(Shape::tile, 0));
  CHECK(graph.row_length() == graph.row_length());
  CHECK(graph.node(graph.row_length()).shape == Shape::scalar);
  CHECK(graph.node(graph.load(Shape::row_scalar, 3)).shape == Shape::row_scalar);
  CHECK(graph.node(graph.load(Shape::row_scalar, 3)).index == 3);
  CHECK(graph.size() == 5);
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
      CHECK(tilenorm::ir::fits_in(a, b) == (expected_broadcast(a, b) == b));
      const NodeId less = leaves.graph.binary(Op::less, leaves.of(a), leaves.of(b));
      CHECK(leaves.graph.node(less).shape == expected_broadcast(a, b));
      const NodeId power = leaves.graph.binary(Op::pow, leaves.of(a), leaves.of(b));
      CHECK(leaves.graph.node(power).shape == expected_broadcast(a, b));
    }
  }
}

TEST_CASE("ir: varies and reduced follow the two shape bits") {
  CHECK(tilenorm::ir::varies(Shape::tile, Axis::along_row));
  CHECK(tilenorm::ir::varies(Shape::tile, Axis::across_rows));
  CHECK(tilenorm::ir::varies(Shape::column, Axis::along_row));
  CHECK_FALSE(tilenorm::ir::varies(Shape::column, Axis::across_rows));
  CHECK_FALSE(tilenorm::ir::varies(Shape::row_scalar, Axis::along_row));
  CHECK(tilenorm::ir::varies(Shape::row_scalar, Axis::across_rows));
  CHECK_FALSE(tilenorm::ir::varies(Shape::scalar, Axis::along_row));
  CHECK_FALSE(tilenorm::ir::varies(Shape::scalar, Axis::across_rows));
  CHECK(tilenorm::ir::reduced(Shape::tile, Axis::along_row) == Shape::row_scalar);
  CHECK(tilenorm::ir::reduced(Shape::tile, Axis::across_rows) == Shape::column);
  CHECK(tilenorm::ir::reduced(Shape::column, Axis::along_row) == Shape::scalar);
  CHECK(tilenorm::ir::reduced(Shape::row_scalar, Axis::across_rows) == Shape::scalar);
  CHECK(tilenorm::ir::axis_name(Axis::along_row) == "along_row");
  CHECK(tilenorm::ir::axis_name(Axis::across_rows) == "across_rows");
  CHECK(tilenorm::ir::role_name(tilenorm::ir::Role::read) == "read");
  CHECK(tilenorm::ir::role_name(tilenorm::ir::Role::written) == "written");
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
  // Reductions clear the bit of their axis.
  CHECK(g.node(g.reduce(Op::reduce_sum, leaves.tile, Axis::across_rows)).shape == Shape::column);
  CHECK(g.node(g.reduce(Op::reduce_sum, leaves.column, Axis::along_row)).shape == Shape::scalar);
  CHECK(g.node(g.reduce(Op::reduce_sum, leaves.row_scalar, Axis::across_rows)).shape ==
        Shape::scalar);
}

TEST_CASE(
    "ir: reductions along an axis the value does not vary on, and dangling arguments, are "
    "rejected") {
  ShapedLeaves leaves;
  Graph& g = leaves.graph;
  CHECK(message_of_program_error([&] { g.reduce(Op::reduce_mean, leaves.row_scalar); }) ==
        "reduction 'mean' along_row needs a value that varies along the row, got a RowScalar");
  CHECK(message_of_program_error([&] { g.reduce(Op::reduce_max, leaves.scalar); }) ==
        "reduction 'max_reduce' along_row needs a value that varies along the row, got a Scalar");
  CHECK(message_of_program_error([&] {
          g.reduce(Op::reduce_sum, leaves.column, Axis::across_rows);
        }) == "reduction 'sum' across_rows needs a value that varies across rows, got a Column");
  CHECK(message_of_program_error(
            [&] { g.reduce(Op::reduce_min, leaves.scalar, Axis::across_rows); }) ==
        "reduction 'min_reduce' across_rows needs a value that varies across rows, got a Scalar");
  CHECK(message_of_program_error([&] { g.binary(Op::add, leaves.tile, 99); }) ==
        "IR node 'add' refers to a node that does not exist in this graph");
  CHECK(message_of_program_error([&] { g.select(leaves.tile, leaves.tile, 1000); }) ==
        "IR node 'select' refers to a node that does not exist in this graph");
}

TEST_CASE("ir: nodes that differ only in their axis are different nodes") {
  ShapedLeaves leaves;
  Graph& g = leaves.graph;
  const NodeId along = g.reduce(Op::reduce_sum, leaves.tile, Axis::along_row);
  const NodeId across = g.reduce(Op::reduce_sum, leaves.tile, Axis::across_rows);
  CHECK(along == leaves.row_scalar);
  CHECK(along != across);
  CHECK_FALSE(g.node(along) == g.node(across));
  CHECK(g.reduce(Op::reduce_sum, leaves.tile, Axis::across_rows) == across);
  // The axis of a non-reduction is not part of its identity.
  tilenorm::ir::Node a = g.node(g.unary(Op::exp, leaves.tile));
  a.axis = Axis::across_rows;
  CHECK(g.intern(a) == g.unary(Op::exp, leaves.tile));
}

TEST_CASE("ir: the DSL types carry the same shapes as the graph") {
  tilenorm::dsl::make_program("shapes", [](auto& p) {
    auto tile = p.input("x");
    auto column = p.column("w");
    auto scalar = p.scalar("s");
    auto stat = p.row_values("r");
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
    check(stat, Shape::row_scalar);
    check(stat * column, Shape::tile);
    check(pow(column, 2.0), Shape::column);
    check(pow(2.0, stat), Shape::row_scalar);
    check(pow(tile, scalar), Shape::tile);
    p.output("y", tile + column + scalar + stat);
  });
}

TEST_CASE("ir: the builder records each slot's role, shape, dtype and gradient flag") {
  const auto program = tilenorm::dsl::make_program("slots", [](auto& p) {
    auto x = p.input("x");
    auto z = p.input("z", Grad::no, DType::f32);
    auto w = p.column("w");
    auto b = p.column("b", Grad::no, DType::bf16);
    auto eps = p.scalar("eps");
    auto alpha = p.scalar("alpha", Grad::yes);
    auto r = p.row_values("r");
    p.save("m", mean(x));
    p.output("y", x * w + b + z * alpha + eps + r, DType::f16);
  });
  using tilenorm::ir::Role;
  struct Expected {
    const char* name;
    Role role;
    Shape shape;
    std::optional<DType> dtype;
    bool needs_grad;
  };
  const Expected expected[] = {
      {"x", Role::read, Shape::tile, std::nullopt, true},
      {"z", Role::read, Shape::tile, DType::f32, false},
      {"w", Role::read, Shape::column, std::nullopt, true},
      {"b", Role::read, Shape::column, DType::bf16, false},
      {"eps", Role::read, Shape::scalar, DType::f32, false},
      {"alpha", Role::read, Shape::scalar, DType::f32, true},
      {"r", Role::read, Shape::row_scalar, DType::f32, false},
      {"m", Role::written, Shape::row_scalar, DType::f32, false},
      {"y", Role::written, Shape::tile, DType::f16, false},
  };
  REQUIRE(program.slots.size() == std::size(expected));
  for (std::size_t i = 0; i < program.slots.size(); ++i) {
    const auto& slot = program.slots[i];
    CAPTURE(slot.name);
    CHECK(slot.name == expected[i].name);
    CHECK(slot.role == expected[i].role);
    CHECK(slot.shape == expected[i].shape);
    CHECK(slot.dtype == expected[i].dtype);
    CHECK(slot.needs_grad == expected[i].needs_grad);
    CHECK(program.find_slot(slot.name) == i);
    if (slot.role == Role::read) {
      // The load of slot i is node ... of the graph, with the slot's shape.
      const NodeId load = program.graph->load(slot.shape, static_cast<std::int32_t>(i));
      CHECK(program.graph->node(load).op == Op::load);
    }
  }
  CHECK_FALSE(program.find_slot("nope").has_value());
  CHECK_FALSE(program.find_slot("").has_value());
}

TEST_CASE("ir: to_string lists the slots and the reachable nodes with dense numbers") {
  const auto program = tilenorm::dsl::make_program("listing", [](auto& p) {
    auto x = p.input("x");
    auto unused = exp(x);  // dead: not listed
    (void)unused;
    auto w = p.column("w", Grad::no, DType::f32);
    auto alpha = p.scalar("alpha", Grad::yes);
    auto weighted = x * w;
    auto total = sum(weighted);
    p.save("total", total);
    auto shifted = weighted + 1.5;
    auto raised = pow(shifted, alpha);
    p.output("y", cast<DType::bf16>(raised));
  });
  CHECK(program.to_string() ==
        "program listing\n"
        "  read Tile x (needs grad)\n"
        "  read Column w : fp32\n"
        "  read Scalar alpha : fp32 (needs grad)\n"
        "  written RowScalar total : fp32\n"
        "  written Tile y\n"
        "  %0 = load x  : Tile\n"
        "  %1 = load w  : Column\n"
        "  %2 = load alpha  : Scalar\n"
        "  %3 = mul %0, %1  : Tile\n"
        "  %4 = sum %3  : RowScalar\n"
        "  %5 = constant 1.5  : Scalar\n"
        "  %6 = add %3, %5  : Tile\n"
        "  %7 = pow %6, %2  : Tile\n"
        "  %8 = round_to<bf16> %7  : Tile\n"
        "  store total = %4\n"
        "  store y = %8\n");
}

TEST_CASE("ir: to_string marks reductions across rows with their axis") {
  tilenorm::ir::Program program;
  program.name = "axes";
  program.graph = std::make_shared<Graph>();
  Graph& g = *program.graph;
  const NodeId x = g.load(Shape::tile, 0);
  const NodeId column_sum = g.reduce(Op::reduce_sum, x, Axis::across_rows);
  const NodeId total = g.reduce(Op::reduce_sum, column_sum, Axis::along_row);
  program.slots = {{"x", tilenorm::ir::Role::read, Shape::tile, {}, 0, false},
                   {"total", tilenorm::ir::Role::written, Shape::scalar, DType::f32, total, false}};
  CHECK(program.to_string() ==
        "program axes\n"
        "  read Tile x\n"
        "  written Scalar total : fp32\n"
        "  %0 = load x  : Tile\n"
        "  %1 = sum<across_rows> %0  : Column\n"
        "  %2 = sum %1  : Scalar\n"
        "  store total = %2\n");
}

TEST_CASE("ir: printing and hashing distinguish the axes of reductions") {
  // sum_along(sum_across(x)) and sum_across(sum_along(x)) are the same number, but not the
  // same program: they are computed in different kernels.
  auto make = [](bool across_first) {
    tilenorm::ir::Program program;
    program.name = "total";
    program.graph = std::make_shared<Graph>();
    Graph& g = *program.graph;
    const NodeId x = g.load(Shape::tile, 0);
    const Axis first = across_first ? Axis::across_rows : Axis::along_row;
    const Axis second = across_first ? Axis::along_row : Axis::across_rows;
    const NodeId total = g.reduce(Op::reduce_sum, g.reduce(Op::reduce_sum, x, first), second);
    program.slots = {
        {"x", tilenorm::ir::Role::read, Shape::tile, {}, 0, false},
        {"total", tilenorm::ir::Role::written, Shape::scalar, DType::f32, total, false}};
    return program;
  };
  const auto across_first = make(true);
  const auto along_first = make(false);
  CHECK(across_first.to_string() != along_first.to_string());
  CHECK(across_first.hash() != along_first.hash());
  CHECK(across_first.hash() == make(true).hash());
  CHECK(along_first.to_string().find("%2 = sum<across_rows> %1  : Scalar") != std::string::npos);
}

TEST_CASE("ir: reachable_nodes follows every written slot") {
  const auto program = tiny_program({.with_dead_nodes = true});
  const auto reachable = program.reachable_nodes();
  CHECK(std::is_sorted(reachable.begin(), reachable.end()));
  CHECK(reachable.size() == tiny_program({}).graph->size());
  CHECK(reachable.size() < program.graph->size());
  // Without the saved statistic, rsqrt(average^2 + eps) is dead.
  auto without_saved = tiny_program({});
  without_saved.slots.erase(without_saved.slots.begin() + *without_saved.find_slot("rstd"));
  CHECK(without_saved.reachable_nodes().size() + 4 == reachable.size());
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

TEST_CASE("ir: the hash changes with every op, constant, name, dtype and gradient flag") {
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
      {.input_grad = Grad::no},
      {.scalar_grad = Grad::yes},
      {.input_dtype = DType::f32},
      {.input_dtype = DType::bf16},
      {.output_dtype = DType::f16},
  };
  std::set<std::string> hashes;
  for (const auto& variant : variants) hashes.insert(tiny_program(variant).hash());
  CHECK(hashes.size() == variants.size());
}

TEST_CASE("ir: the hash changes with the slot order") {
  auto program = tiny_program({});
  const std::string before = program.hash();
  // Swapping the two written slots keeps every node and every name.
  const auto saved = *program.find_slot("rstd");
  const auto output = *program.find_slot("y");
  std::swap(program.slots[saved], program.slots[output]);
  CHECK(program.hash() != before);
}

TEST_CASE("ir: the hash of a fixed program is pinned") {
  // The same on every platform and compiler; a change here invalidates every tuning
  // database, so it must be deliberate.
  CHECK(tiny_program({}).hash() == "d3d54baa0eb1dfa6");
}
