// The lowering passes one by one: what each rewrites, what it rejects, and that none of them
// changes what the program computes.
#include "tilenorm/dsl/passes.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/scoped.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

namespace dsl = tilenorm::dsl;
namespace ir = tilenorm::ir;
namespace passes = tilenorm::passes;
using ir::Axis;
using ir::Op;
using ir::Role;
using ir::Shape;

// The expression behind `id` in prefix form, with loads by slot name and N for the row
// length. Operands of commutative ops are sorted, so the text does not depend on which order
// a pass happened to put them in. Reductions across rows are marked.
std::string expression(const ir::Program& program, ir::NodeId id) {
  const ir::Node& node = program.graph->node(id);
  switch (node.op) {
    case Op::load:
      return program.slots.at(node.index).name;
    case Op::row_length:
      return "N";
    case Op::constant: {
      std::ostringstream text;
      text << std::setprecision(17) << node.value;
      return text.str();
    }
    default:
      break;
  }
  std::vector<std::string> args;
  for (int i = 0; i < node.arity; ++i) args.push_back(expression(program, node.args[i]));
  if (ir::is_commutative(node.op)) std::sort(args.begin(), args.end());
  std::string text(ir::op_name(node.op));
  if (ir::is_reduction(node.op) && node.axis == Axis::across_rows) text += "<across_rows>";
  text += "(";
  for (std::size_t i = 0; i < args.size(); ++i) text += (i ? ", " : "") + args[i];
  return text + ")";
}

// The expression stored into the written slot called `name`.
std::string slot_expression(const ir::Program& program, const std::string& name) {
  const auto slot = program.find_slot(name);
  REQUIRE_MESSAGE(slot.has_value(), "no slot named ", name);
  REQUIRE(program.slots[*slot].role == Role::written);
  return expression(program, program.slots[*slot].value);
}

std::string output_expression(const ir::Program& program) {
  return slot_expression(program, "y");
}

// A scalar constant node in the graph of `anchor`, for building what the DSL would fold into
// a single number before the IR ever saw it.
template <class P>
dsl::Scalar<P> constant(const dsl::Tile<P>& anchor, double value) {
  return {anchor.graph(), anchor.graph()->constant(value)};
}

tilenorm::InterpreterOutputs interpret_on_random_inputs(const ir::Program& program) {
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 5;
  inputs.cols = 37;
  std::uint64_t seed = 1;
  double scalar = 0.25;
  for (const ir::Slot& slot : program.slots) {
    inputs.slots.emplace_back();
    if (slot.role != Role::read) continue;
    const auto count = tilenorm::slot_elements(slot.shape, inputs.rows, inputs.cols);
    switch (slot.shape) {
      case Shape::tile:
        inputs.slots.back() =
            tilenorm::random_values(count, seed++, -2.0, 2.0, tilenorm::DType::f32);
        break;
      case Shape::column:
      case Shape::row_scalar:
        inputs.slots.back() =
            tilenorm::random_values(count, seed++, 0.5, 1.5, tilenorm::DType::f32);
        break;
      case Shape::scalar:
        inputs.slots.back() = {scalar};
        scalar += 0.5;
        break;
    }
  }
  return tilenorm::interpret(program, inputs);
}

void check_same_results(const ir::Program& program, const tilenorm::InterpreterOutputs& expected,
                        const tilenorm::InterpreterOutputs& actual) {
  // Pulling factors out of a sum reorders fp64 rounding, nothing more.
  const tilenorm::Tolerance tight{1e-12, 1e-12};
  REQUIRE(actual.slots.size() == expected.slots.size());
  for (std::size_t i = 0; i < expected.slots.size(); ++i) {
    if (program.slots[i].role != Role::written) continue;
    const auto comparison = tilenorm::compare(actual.slots[i], expected.slots[i], tight);
    CHECK_MESSAGE(comparison.ok(), "slot ", program.slots[i].name, ": ", comparison.describe());
  }
}

// Runs the pipeline by hand and checks the numbers after every pass.
tilenorm::LoweredProgram lower_checking_every_pass(const ir::Program& program) {
  const auto expected = interpret_on_random_inputs(program);
  passes::verify(program);
  const ir::Program simplified = passes::simplify(program);
  {
    INFO("after simplify:\n", simplified.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(simplified));
  }
  const ir::Program shared = passes::cse(simplified);
  {
    INFO("after cse:\n", shared.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(shared));
  }
  const ir::Program factored = passes::cse(passes::factor_reductions(shared));
  {
    INFO("after factor_reductions:\n", factored.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(factored));
  }
  const ir::Program fused =
      passes::cse(passes::fuse_moments(factored, tilenorm::MomentFusion::rule));
  {
    INFO("after fuse_moments:\n", fused.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(fused));
  }
  const ir::Program hoisted = passes::cse(passes::hoist_reciprocals(fused));
  {
    INFO("after hoist_reciprocals:\n", hoisted.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(hoisted));
  }
  tilenorm::LoweredProgram lowered = passes::schedule_reductions(hoisted);
  {
    INFO("after schedule_reductions:\n", lowered.to_string());
    check_same_results(program, expected, interpret_on_random_inputs(lowered.program));
  }
  // The fixed pipeline does the same.
  CHECK(tilenorm::lower(program).to_string() == lowered.to_string());
  return lowered;
}

std::string verify_error(const ir::Program& program) {
  try {
    passes::verify(program);
  } catch (const tilenorm::ProgramError& error) {
    return error.what();
  }
  FAIL("verify accepted program '", program.name, "'");
  return {};
}

// A program built on the IR directly, for what the DSL cannot express.
struct RawProgram {
  ir::Program program;
  ir::Graph& g;
  explicit RawProgram(std::string name)
      : program{std::move(name), std::make_shared<ir::Graph>(), {}}, g(*program.graph) {}
  ir::NodeId read(std::string name, Shape shape, std::optional<tilenorm::DType> dtype = {}) {
    const auto slot = static_cast<std::int32_t>(program.slots.size());
    program.slots.push_back({std::move(name), Role::read, shape, dtype, 0, false});
    return g.load(shape, slot);
  }
  void write(std::string name, Shape shape, ir::NodeId value,
             std::optional<tilenorm::DType> dtype = {}) {
    program.slots.push_back({std::move(name), Role::written, shape, dtype, value, false});
  }
};

bool is_forward(const std::string& name) {
  return name.find("_backward") == std::string::npos;
}

// Restores std::cerr and TILENORM_DUMP_IR however the test leaves.
class CapturedIrDump {
 public:
  explicit CapturedIrDump(const char* setting)
      : previous_(std::cerr.rdbuf(captured_.rdbuf())), dump_ir_("TILENORM_DUMP_IR", setting) {}
  ~CapturedIrDump() { std::cerr.rdbuf(previous_); }
  CapturedIrDump(const CapturedIrDump&) = delete;
  CapturedIrDump& operator=(const CapturedIrDump&) = delete;
  std::string text() const { return captured_.str(); }

 private:
  std::ostringstream captured_;
  std::streambuf* previous_;
  tilenorm::testing::ScopedEnv dump_ir_;
};

const std::string kIdentifierRule =
    " is not an identifier (letters, digits and '_', not starting with a digit, at most 64 "
    "characters)";

}  // namespace

// ---- verify

TEST_CASE("verify: accepts every built-in kernel, forward and backward") {
  REQUIRE(tilenorm::kernels::builtin_kernels().size() == 15);
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    CAPTURE(kernel.name);
    CHECK(kernel.program.name == kernel.name);
    CHECK_NOTHROW(passes::verify(kernel.program));
  }
}

TEST_CASE("verify: rejects a program without a row input") {
  RawProgram raw("headless");
  raw.write("y", Shape::tile, raw.g.constant(1.0));
  CHECK(verify_error(raw.program) ==
        "program 'headless': declares no row input; a norm reads at least one [M, N] tensor");
  // A Column is not a row input.
  RawProgram column_only("column_only");
  const auto w = column_only.read("w", Shape::column);
  column_only.write("y", Shape::tile, w);
  CHECK(verify_error(column_only.program) ==
        "program 'column_only': declares no row input; a norm reads at least one [M, N] tensor");
}

TEST_CASE("verify: rejects a program that writes nothing") {
  const auto program = dsl::make_program("reads_only", [](auto& p) {
    auto x = p.input("x");
    (void)x;
  });
  CHECK(verify_error(program) ==
        "program 'reads_only': writes no row output; add one with output(name, tile)");
  // A saved statistic alone is a side output, not an output.
  const auto stats_only = dsl::make_program("stats_only", [](auto& p) {
    auto x = p.input("x");
    p.save("mean", mean(x));
  });
  CHECK(verify_error(stats_only) ==
        "program 'stats_only': writes no row output; add one with output(name, tile)");
  // A column output will do: a backward program may write only column gradients.
  RawProgram columns_only("columns_only");
  const auto x = columns_only.read("x", Shape::tile);
  columns_only.write("dw", Shape::column,
                     columns_only.g.reduce(Op::reduce_sum, x, Axis::across_rows));
  CHECK_NOTHROW(passes::verify(columns_only.program));
}

TEST_CASE("verify: rejects a program without a graph") {
  ir::Program program;
  program.name = "empty";
  CHECK(verify_error(program) == "program 'empty': has no graph");
}

TEST_CASE("verify: rejects a name used twice") {
  const auto input_and_column = dsl::make_program("twice", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("x");
    p.output("y", x * w);
  });
  CHECK(verify_error(input_and_column) == "program 'twice': the name 'x' is used twice");
  const auto output_and_saved = dsl::make_program("twice", [](auto& p) {
    auto x = p.input("x");
    p.save("y", mean(x));
    p.output("y", x);
  });
  CHECK(verify_error(output_and_saved) == "program 'twice': the name 'y' is used twice");
  const auto output_and_input = dsl::make_program("twice", [](auto& p) {
    auto x = p.input("x");
    p.output("x", x * 2.0);
  });
  CHECK(verify_error(output_and_input) == "program 'twice': the name 'x' is used twice");
  const auto row_values_and_scalar = dsl::make_program("twice", [](auto& p) {
    auto x = p.input("x");
    auto r = p.row_values("r");
    auto s = p.scalar("r");
    p.output("y", x * r + s);
  });
  CHECK(verify_error(row_values_and_scalar) == "program 'twice': the name 'r' is used twice");
}

TEST_CASE("verify: rejects declared slots that are never used") {
  const auto unused_input = dsl::make_program("unused", [](auto& p) {
    p.input("x");
    auto z = p.input("z");
    p.output("y", z);
  });
  CHECK(verify_error(unused_input) == "program 'unused': row input 'x' is declared but never used");
  const auto unused_column = dsl::make_program("unused", [](auto& p) {
    auto x = p.input("x");
    p.column("bias");
    p.output("y", x);
  });
  CHECK(verify_error(unused_column) ==
        "program 'unused': column 'bias' is declared but never used");
  const auto unused_scalar = dsl::make_program("unused", [](auto& p) {
    auto x = p.input("x");
    p.scalar("eps");
    p.output("y", x);
  });
  CHECK(verify_error(unused_scalar) == "program 'unused': scalar 'eps' is declared but never used");
  const auto unused_row_values = dsl::make_program("unused", [](auto& p) {
    auto x = p.input("x");
    p.row_values("rstd");
    p.output("y", x);
  });
  CHECK(verify_error(unused_row_values) ==
        "program 'unused': row values 'rstd' is declared but never used");
  // Used only by a dead expression still counts as unused.
  const auto only_dead_use = dsl::make_program("unused", [](auto& p) {
    auto x = p.input("x");
    auto eps = p.scalar("eps");
    auto dead = x + eps;
    (void)dead;
    p.output("y", x);
  });
  CHECK(verify_error(only_dead_use) == "program 'unused': scalar 'eps' is declared but never used");
}

TEST_CASE("verify: rejects names that are not identifiers") {
  const auto bad_program_name =
      dsl::make_program("layer-norm", [](auto& p) { p.output("y", p.input("x")); });
  CHECK(verify_error(bad_program_name) == "program name 'layer-norm'" + kIdentifierRule);
  const auto leading_digit =
      dsl::make_program("norm", [](auto& p) { p.output("y", p.input("1x")); });
  CHECK(verify_error(leading_digit) == "program 'norm': row input name '1x'" + kIdentifierRule);
  const auto with_space = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * p.column("my weight"));
  });
  CHECK(verify_error(with_space) == "program 'norm': column name 'my weight'" + kIdentifierRule);
  const auto empty = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x + p.scalar(""));
  });
  CHECK(verify_error(empty) == "program 'norm': scalar name ''" + kIdentifierRule);
  const auto bad_output = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.save("rstd!", mean(x));
    p.output("y", x);
  });
  CHECK(verify_error(bad_output) ==
        "program 'norm': saved statistic name 'rstd!'" + kIdentifierRule);
  const auto bad_row_output =
      dsl::make_program("norm", [](auto& p) { p.output("y.out", p.input("x")); });
  CHECK(verify_error(bad_row_output) ==
        "program 'norm': row output name 'y.out'" + kIdentifierRule);
}

TEST_CASE("verify: names are at most 64 characters, and unprintable ones are shown safely") {
  const std::string longest(64, 'a');
  const auto fits = dsl::make_program(longest, [&](auto& p) { p.output("y", p.input(longest)); });
  CHECK_NOTHROW(passes::verify(fits));
  const std::string too_long = std::string(64, 'b') + "c";
  const auto long_input =
      dsl::make_program("norm", [&](auto& p) { p.output("y", p.input(too_long)); });
  CHECK(verify_error(long_input) ==
        "program 'norm': row input name '" + std::string(64, 'b') + "...'" + kIdentifierRule);
  const auto long_program =
      dsl::make_program(too_long, [](auto& p) { p.output("y", p.input("x")); });
  CHECK(verify_error(long_program) ==
        "program name '" + std::string(64, 'b') + "...'" + kIdentifierRule);
  const auto control = dsl::make_program("norm", [](auto& p) { p.output("y", p.input("x\n\ty")); });
  CHECK(verify_error(control) == "program 'norm': row input name 'x??y'" + kIdentifierRule);
}

TEST_CASE("verify: slot names may not start with '_', contain \"__\" or be keywords") {
  auto input_named = [](const std::string& name) {
    return dsl::make_program("norm", [&name](auto& p) { p.output("y", p.input(name)); });
  };
  CHECK(verify_error(input_named("_x")) ==
        "program 'norm': slot name '_x' starts with '_' or contains \"__\" (reserved in "
        "generated C++)");
  CHECK(verify_error(input_named("x__y")) ==
        "program 'norm': slot name 'x__y' starts with '_' or contains \"__\" (reserved in "
        "generated C++)");
  for (const char* keyword : {"float", "do", "int", "threadIdx", "half", "new"}) {
    CAPTURE(keyword);
    CHECK(verify_error(input_named(keyword)) ==
          "program 'norm': slot name '" + std::string(keyword) + "' is a C++ or CUDA keyword");
  }
  // Close to a keyword is fine.
  for (const char* name : {"x_y", "floats", "Float", "do_", "x_"}) {
    CAPTURE(name);
    CHECK_NOTHROW(passes::verify(input_named(name)));
  }
  const auto keyword_output =
      dsl::make_program("norm", [](auto& p) { p.output("return", p.input("x")); });
  CHECK(verify_error(keyword_output) ==
        "program 'norm': slot name 'return' is a C++ or CUDA keyword");
}

TEST_CASE("verify: the prefix tn_ is reserved for generated names") {
  const auto reserved = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * p.scalar("tn_workspace"));
  });
  CHECK(verify_error(reserved) ==
        "program 'norm': scalar name 'tn_workspace' uses the reserved prefix 'tn_'");
  const auto reserved_output =
      dsl::make_program("norm", [](auto& p) { p.output("tn_y", p.input("x")); });
  CHECK(verify_error(reserved_output) ==
        "program 'norm': row output name 'tn_y' uses the reserved prefix 'tn_'");
  // Only the exact prefix: these are ordinary names.
  const auto similar = dsl::make_program("tn_norm", [](auto& p) {
    auto x = p.input("tn");
    auto w = p.column("TN_w");
    p.output("atn_y", x * w);
  });
  CHECK_NOTHROW(passes::verify(similar));
}

TEST_CASE("verify: rejects written values of the wrong shape, and accepts broadcasts") {
  RawProgram raw("raw");
  const auto x = raw.read("x", Shape::tile);
  raw.write("y", Shape::tile, x);
  raw.write("total", Shape::row_scalar, x, tilenorm::DType::f32);
  CHECK(verify_error(raw.program) ==
        "program 'raw': saved statistic 'total' is a RowScalar but its value is a Tile");
  raw.program.slots[2] = {"dw", Role::written, Shape::column, {}, x, false};
  CHECK(verify_error(raw.program) ==
        "program 'raw': column output 'dw' is a Column but its value is a Tile");
  const auto row_sum = raw.g.reduce(Op::reduce_sum, x);
  raw.program.slots[2] = {"s", Role::written, Shape::scalar, tilenorm::DType::f32, row_sum, false};
  CHECK(verify_error(raw.program) ==
        "program 'raw': scalar output 's' is a Scalar but its value is a RowScalar");
  raw.program.slots[2] = {"dw", Role::written, Shape::column, {}, row_sum, false};
  CHECK(verify_error(raw.program) ==
        "program 'raw': column output 'dw' is a Column but its value is a RowScalar");
  // A smaller shape broadcasts into a larger slot.
  raw.program.slots[2] = {
      "total", Role::written, Shape::row_scalar, tilenorm::DType::f32, raw.g.constant(1.0), false};
  raw.program.slots[1].value = row_sum;
  CHECK_NOTHROW(passes::verify(raw.program));
  raw.program.slots[2].value = 12345;
  CHECK(verify_error(raw.program) == "program 'raw': saved statistic 'total' refers to no node");
}

TEST_CASE("verify: rejects loads of slots that are not declared inputs, or of the wrong shape") {
  RawProgram raw("raw");
  const auto x = raw.read("x", Shape::tile);
  raw.write("y", Shape::tile, raw.g.binary(Op::add, x, raw.g.load(Shape::tile, 1)));
  CHECK(verify_error(raw.program) ==
        "program 'raw': reads slot number 1, which is not a declared input");
  raw.program.slots[1].value = raw.g.binary(Op::add, x, raw.g.load(Shape::tile, 7));
  CHECK(verify_error(raw.program) ==
        "program 'raw': reads slot number 7, which is not a declared input");
  raw.program.slots[1].value = raw.g.binary(Op::add, x, raw.g.load(Shape::tile, -1));
  CHECK(verify_error(raw.program) ==
        "program 'raw': reads slot number -1, which is not a declared input");
  raw.program.slots[1].value = raw.g.binary(Op::add, x, raw.g.load(Shape::column, 0));
  CHECK(verify_error(raw.program) == "program 'raw': reads row input 'x' as a Column");
}

TEST_CASE("verify: statistics and scalars are fp32") {
  RawProgram raw("raw");
  const auto x = raw.read("x", Shape::tile);
  raw.write("y", Shape::tile, x, tilenorm::DType::bf16);
  raw.write("m", Shape::row_scalar, raw.g.reduce(Op::reduce_mean, x), tilenorm::DType::f16);
  CHECK(verify_error(raw.program) == "program 'raw': saved statistic 'm' must be fp32");
  raw.program.slots[2].dtype = tilenorm::DType::f32;
  CHECK_NOTHROW(passes::verify(raw.program));
  raw.program.slots[2].dtype.reset();  // unset means fp32 for statistics
  CHECK_NOTHROW(passes::verify(raw.program));
  raw.program.slots.push_back({"s", Role::read, Shape::scalar, tilenorm::DType::bf16, 0, false});
  raw.program.slots[1].value = raw.g.binary(Op::mul, x, raw.g.load(Shape::scalar, 3));
  CHECK(verify_error(raw.program) == "program 'raw': scalar 's' must be fp32");
}

TEST_CASE("verify: reductions across rows are sums, and nothing row-varying follows them") {
  RawProgram raw("raw");
  const auto x = raw.read("x", Shape::tile);
  raw.write("y", Shape::tile, x);
  const auto column_sum = raw.g.reduce(Op::reduce_sum, x, Axis::across_rows);
  raw.write("dw", Shape::column, column_sum);
  CHECK_NOTHROW(passes::verify(raw.program));
  raw.program.slots[2].value = raw.g.reduce(Op::reduce_max, x, Axis::across_rows);
  CHECK(verify_error(raw.program) ==
        "program 'raw': only sums reduce across rows, not 'max_reduce'");
  raw.program.slots[2].value = raw.g.reduce(Op::reduce_mean, x, Axis::across_rows);
  CHECK(verify_error(raw.program) == "program 'raw': only sums reduce across rows, not 'mean'");
  // A row-varying value that needs every row first would need a grid-wide barrier.
  raw.program.slots[2].value = column_sum;
  raw.program.slots[1].value = raw.g.binary(Op::mul, x, column_sum);
  CHECK(verify_error(raw.program) ==
        "program 'raw': a value that varies across rows depends on a reduction across rows "
        "(that needs a grid-wide barrier, which tilenorm does not generate)");
  // So would a reduction along the row of one (its result is a Scalar, but it is computed per
  // row in the main kernel).
  raw.program.slots[1].value = x;
  raw.program.slots[2] = {"s",
                          Role::written,
                          Shape::scalar,
                          tilenorm::DType::f32,
                          raw.g.reduce(Op::reduce_sum, column_sum),
                          false};
  CHECK(verify_error(raw.program) ==
        "program 'raw': a reduction along the row depends on a reduction across rows");
  // Column and Scalar arithmetic after them is fine (the finishing kernel does it).
  raw.program.slots[2] = {
      "dw",
      Role::written,
      Shape::column,
      {},
      raw.g.binary(Op::mul, raw.g.unary(Op::exp, column_sum), raw.g.constant(2.0)),
      false};
  CHECK_NOTHROW(passes::verify(raw.program));
}

TEST_CASE("verify: constants outside the fp32 range are rejected, infinities are not") {
  const auto huge = dsl::make_program("huge", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * 1e300);
  });
  CHECK(verify_error(huge) ==
        "program 'huge': the constant 1.0000000000000001e+300 is outside the fp32 range; "
        "kernels compute in fp32, so it would become infinity");
  const auto negative = dsl::make_program("negative", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x + (-3.5e38));
  });
  CHECK(
      verify_error(negative).starts_with("program 'negative': the constant -3.5e+38 is "
                                         "outside the fp32 range"));
  const auto largest = dsl::make_program("largest", [](auto& p) {
    auto x = p.input("x");
    p.output("y", max(x, -static_cast<double>(FLT_MAX)));
  });
  CHECK_NOTHROW(passes::verify(largest));
  const auto infinite = dsl::make_program("infinite", [](auto& p) {
    auto x = p.input("x");
    p.output("y", min(x, std::numeric_limits<double>::infinity()));
  });
  CHECK_NOTHROW(passes::verify(infinite));
}

// ---- simplify

TEST_CASE("simplify: folds constants") {
  dsl::ProgramBuilder<struct FoldTag> p("fold");
  auto x = p.input("x");
  auto six = constant(x, 2.0) * constant(x, 3.0);
  p.output("y", x * six);
  const auto program = std::move(p).build();
  const auto simplified = passes::simplify(program);
  CHECK(output_expression(program) == "mul(mul(2, 3), x)");
  CHECK(output_expression(simplified) == "mul(6, x)");
  lower_checking_every_pass(program);
}

TEST_CASE("simplify: folds through unary ops, casts, pow and selects") {
  dsl::ProgramBuilder<struct FoldTag> p("fold");
  auto x = p.input("x");
  auto rounded = cast<tilenorm::DType::bf16>(constant(x, 1.0 + 0x1p-8 + 0x1p-20));
  auto picked = where(constant(x, 1.0) < constant(x, 2.0), rounded, constant(x, 5.0));
  auto root = sqrt(constant(x, 16.0));
  auto cube = pow(constant(x, 2.0), constant(x, 3.0));
  p.output("y", x * picked + root + cube);
  const auto simplified = passes::simplify(std::move(p).build());
  // 1 + 2^-8 + 2^-20 is just above the midpoint of two bf16 neighbours: 1 + 2^-7 wins.
  CHECK(output_expression(simplified) == "add(8, add(4, mul(1.0078125, x)))");
}

TEST_CASE("simplify: folds in fp32, as the device computes") {
  dsl::ProgramBuilder<struct Fp32Tag> p("fp32_fold");
  auto x = p.input("x");
  // 0.1 is not an fp32 number: the fp32 sum 0.1f + 0.2f is 0.300000012, and 1/3 is rounded.
  auto sum = constant(x, 0.1) + constant(x, 0.2);
  auto third = constant(x, 1.0) / constant(x, 3.0);
  auto small = exp(constant(x, -104.0));  // underflows to a subnormal in fp32
  p.output("y", x * sum + third + small);
  const auto simplified = passes::simplify(std::move(p).build());
  std::ostringstream expected;
  expected << std::setprecision(17) << "add(" << static_cast<double>(std::exp(-104.0f)) << ", add("
           << static_cast<double>(1.0f / 3.0f) << ", mul(" << static_cast<double>(0.1f + 0.2f)
           << ", x)))";
  CHECK(output_expression(simplified) == expected.str());
  CHECK(static_cast<double>(0.1f + 0.2f) != 0.1 + 0.2);
}

TEST_CASE("simplify: removes identities") {
  dsl::ProgramBuilder<struct IdentityTag> p("identities");
  auto x = p.input("x");
  auto w = p.column("w");
  auto times_one = x * 1.0;
  auto one_times = 1.0 * times_one;
  // Only -0 is an additive identity: x + (+0) would turn x = -0 into +0.
  auto plus_zero = one_times + (-0.0);
  auto zero_plus = -0.0 + plus_zero;
  auto minus_zero = zero_plus - 0.0;
  auto over_one = minus_zero / 1.0;
  auto double_negation = -(-over_one);
  auto weighted = double_negation * w;
  p.output("y", weighted);
  const auto program = std::move(p).build();
  CHECK(output_expression(passes::simplify(program)) == "mul(w, x)");
  lower_checking_every_pass(program);
}

TEST_CASE("simplify: cascades, so a folded constant can enable an identity") {
  dsl::ProgramBuilder<struct CascadeTag> p("cascade");
  auto x = p.input("x");
  auto one = exp(constant(x, 0.0));
  auto zero = constant(x, 2.0) - constant(x, 2.0);
  auto scaled = x * one;
  p.output("y", scaled - zero);
  CHECK(output_expression(passes::simplify(std::move(p).build())) == "x");
}

TEST_CASE("simplify: adding +0 is kept, because it changes -0 into +0") {
  dsl::ProgramBuilder<struct SignedZeroTag> p("signed_zero");
  auto x = p.input("x");
  p.output("y", x + 0.0);
  CHECK(output_expression(passes::simplify(std::move(p).build())) == "add(0, x)");
}

TEST_CASE("simplify: keeps what is not an identity and never drops a broadcast") {
  dsl::ProgramBuilder<struct BroadcastTag> p("broadcast");
  auto x = p.input("x");
  auto r = mean(x);
  auto kept_scalar = r * 1.0;
  p.save("r", kept_scalar);
  auto zero_tile = x * 0.0;               // not folded: x may be inf or NaN
  auto spread = zero_tile + kept_scalar;  // a RowScalar broadcast across the row
  auto reversed = 0.0 - spread;           // not an identity
  p.output("y", reversed);
  const auto program = std::move(p).build();
  const auto simplified = passes::simplify(program);
  CHECK(slot_expression(simplified, "r") == "mean(x)");
  CHECK(output_expression(simplified) == "sub(0, add(mean(x), mul(0, x)))");
  CHECK(simplified.graph->node(simplified.slots[*simplified.find_slot("y")].value).shape ==
        Shape::tile);
  CHECK(simplified.graph->node(simplified.slots[*simplified.find_slot("r")].value).shape ==
        Shape::row_scalar);
  lower_checking_every_pass(program);
}

TEST_CASE("simplify: an identity against a broadcast constant keeps the shape") {
  // 1 * s for a Scalar s inside a Column expression: removing the 1 must not turn the
  // Column into a Scalar.
  RawProgram raw("keep_shape");
  const auto x = raw.read("x", Shape::tile);
  const auto w = raw.read("w", Shape::column);
  const auto ones = raw.g.binary(Op::mul, raw.g.constant(1.0), raw.g.unary(Op::exp, w));
  raw.write("y", Shape::tile, raw.g.binary(Op::mul, x, ones));
  const auto simplified = passes::simplify(raw.program);
  CHECK(output_expression(simplified) == "mul(exp(w), x)");
  lower_checking_every_pass(raw.program);
}

TEST_CASE("simplify: leaves every built-in kernel unchanged in meaning") {
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    CAPTURE(kernel.name);
    lower_checking_every_pass(kernel.program);
  }
}

// ---- cse

TEST_CASE("cse: commuted operands share one node and dead nodes are dropped") {
  dsl::ProgramBuilder<struct CseTag> p("commuted");
  auto x = p.input("x");
  auto w = p.column("w");
  auto s = p.scalar("s");
  auto dead = exp(x) * w;
  (void)dead;
  auto forward = x * w;
  auto backward = w * x;
  REQUIRE(forward.id() != backward.id());
  auto left = forward + s;
  auto right = s + backward;
  auto both = max(left, right);
  p.output("y", both);
  const auto program = std::move(p).build();
  const auto shared = passes::cse(program);
  const ir::Node& root = shared.graph->node(shared.slots[*shared.find_slot("y")].value);
  CHECK(root.op == Op::max);
  CHECK(root.args[0] == root.args[1]);
  CHECK(shared.graph->size() == shared.reachable_nodes().size());
  CHECK(shared.graph->size() == 6);  // x, w, s, x * w, + s, max
  CHECK(program.graph->size() > shared.graph->size());
  lower_checking_every_pass(program);
}

TEST_CASE("cse: does not reorder the operands of operations that do not commute") {
  const auto program = dsl::make_program("ordered", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto a = pow(abs(x) + 0.5, w);
    auto b = pow(w, x);
    auto c = w - x;
    auto d = x - w;
    auto e = x < w;
    auto f = w < x;
    p.output("y", a + b + c + d + e + f);
  });
  const auto shared = passes::cse(program);
  CHECK(shared.graph->size() == program.graph->size());
  lower_checking_every_pass(program);
}

// ---- factor_reductions and schedule_reductions

TEST_CASE("schedule_reductions: RMSNorm and LayerNorm need one phase each") {
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    if (!is_forward(kernel.name)) continue;
    CAPTURE(kernel.name);
    const auto lowered = tilenorm::lower(kernel.program);
    const bool is_layer_norm = kernel.name.starts_with("layer_norm");
    REQUIRE(lowered.reduction_phases.size() == 1u);
    CHECK(lowered.reduction_phases[0].size() == (is_layer_norm ? 2u : 1u));
    CHECK(lowered.cross_row_reductions.empty());
  }
  // The variance, written as the mean of squared deviations, became a co-moment beside the
  // mean (fuse_moments); without that pass it waits for the mean, in a second phase.
  const auto layer_norm = tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
  CHECK(expression(layer_norm.program, layer_norm.reduction_phases[0][0]) == "mean(x)");
  CHECK(expression(layer_norm.program, layer_norm.reduction_phases[0][1]) == "comoment(x, x)");
  CHECK(slot_expression(layer_norm.program, "rstd") == "rsqrt(add(div(comoment(x, x), N), eps))");
  const auto unfused = passes::schedule_reductions(passes::cse(passes::factor_reductions(
      passes::cse(passes::simplify(tilenorm::kernels::builtin_program("layer_norm"))))));
  REQUIRE(unfused.reduction_phases.size() == 2u);
  CHECK(expression(unfused.program, unfused.reduction_phases[1][0]) ==
        "mean(mul(sub(x, mean(x)), sub(x, mean(x))))");
}

TEST_CASE(
    "schedule_reductions: the derived backward kernels need one phase with saved "
    "statistics, and the forward's two phases when recomputing") {
  struct Expected {
    const char* name;
    std::vector<std::size_t> phase_sizes;
    std::size_t cross_row;
  };
  const Expected expected[] = {
      {"layer_norm_backward", {2}, 2},
      {"layer_norm_no_bias_backward", {2}, 1},
      {"layer_norm_no_affine_backward", {2}, 0},
      {"rms_norm_backward", {1}, 1},
      {"rms_norm_no_weight_backward", {1}, 0},
      // Recomputing: mean(x) and sum(dy * w) first, then the variance and sum(dy * w * x)
      // (fuse_moments leaves programs that sum across rows as they are).
      {"layer_norm_backward_recompute", {2, 2}, 2},
      {"layer_norm_no_bias_backward_recompute", {2, 2}, 1},
      // Without column gradients nothing sums across rows: co-moments, one phase.
      {"layer_norm_no_affine_backward_recompute", {4}, 0},
      {"rms_norm_backward_recompute", {2}, 1},
      {"rms_norm_no_weight_backward_recompute", {2}, 0},
  };
  for (const auto& e : expected) {
    CAPTURE(e.name);
    const auto lowered = tilenorm::lower(tilenorm::kernels::builtin_program(e.name));
    std::vector<std::size_t> sizes;
    for (const auto& phase : lowered.reduction_phases) sizes.push_back(phase.size());
    CHECK(sizes == e.phase_sizes);
    CHECK(lowered.cross_row_reductions.size() == e.cross_row);
    for (ir::NodeId r : lowered.cross_row_reductions) {
      CHECK(lowered.program.graph->node(r).axis == Axis::across_rows);
      CHECK(lowered.after_cross_row[r]);
      CHECK(lowered.program.graph->node(r).shape == Shape::column);
    }
  }
  const auto rms = tilenorm::lower(tilenorm::kernels::builtin_program("rms_norm_backward"));
  CHECK(expression(rms.program, rms.reduction_phases[0][0]) == "sum(mul(mul(dy, weight), x))");
  CHECK(slot_expression(rms.program, "dweight") == "sum<across_rows>(mul(dy, mul(rstd, x)))");
}

// KernelConfig::moments: lower() keeps the program lowered with fuse_moments on and off where
// that gives another program than the rule, and those compute what the program computes.
TEST_CASE("lower: the moments knob's other lowerings, where they differ from the rule") {
  struct Expected {
    const char* name;
    std::vector<std::size_t> on_phases;   // empty: on lowers as the rule does
    std::vector<std::size_t> off_phases;  // likewise for off
  };
  const Expected expected[] = {
      // The recomputing backwards with column sums: the rule keeps two phases, on fuses them.
      {"layer_norm_backward_recompute", {4}, {}},
      {"layer_norm_no_bias_backward_recompute", {4}, {}},
      // Forwards and the rest: the rule already fuses; off takes the second phase back.
      {"layer_norm", {}, {1, 1}},
      {"layer_norm_no_affine_backward_recompute", {}, {2, 2}},
      // Nothing centered to fuse.
      {"layer_norm_backward", {}, {}},
      {"rms_norm", {}, {}},
      {"rms_norm_backward_recompute", {}, {}},
  };
  auto phase_sizes = [](const tilenorm::LoweredProgram& lowered) {
    std::vector<std::size_t> sizes;
    for (const auto& phase : lowered.reduction_phases) sizes.push_back(phase.size());
    return sizes;
  };
  for (const auto& e : expected) {
    CAPTURE(e.name);
    const ir::Program& program = tilenorm::kernels::builtin_program(e.name);
    const auto lowered = tilenorm::lower(program);
    const auto want = interpret_on_random_inputs(program);
    CHECK(&tilenorm::with_moments(lowered, tilenorm::MomentFusion::rule) == &lowered);
    for (const auto fusion : {tilenorm::MomentFusion::on, tilenorm::MomentFusion::off}) {
      CAPTURE(tilenorm::moment_fusion_name(fusion));
      const auto& other =
          fusion == tilenorm::MomentFusion::on ? lowered.moments_on : lowered.moments_off;
      const auto& phases = fusion == tilenorm::MomentFusion::on ? e.on_phases : e.off_phases;
      const tilenorm::LoweredProgram& chosen = tilenorm::with_moments(lowered, fusion);
      if (phases.empty()) {
        CHECK(other == nullptr);
        CHECK(&chosen == &lowered);
        continue;
      }
      REQUIRE(other != nullptr);
      CHECK(&chosen == other.get());
      CHECK(phase_sizes(chosen) == phases);
      CHECK(chosen.cross_row_reductions.size() == lowered.cross_row_reductions.size());
      // The other lowering has no further alternatives of its own: with_moments is idempotent.
      CHECK(chosen.moments_on == nullptr);
      CHECK(chosen.moments_off == nullptr);
      CHECK(&tilenorm::with_moments(chosen, fusion) == &chosen);
      INFO("lowered with moments ", tilenorm::moment_fusion_name(fusion), ":\n",
           chosen.to_string());
      check_same_results(program, want, interpret_on_random_inputs(chosen.program));
    }
  }
}

TEST_CASE("schedule_reductions: phase_after and after_cross_row place every node") {
  const auto lowered =
      tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm_backward_recompute"));
  const auto& g = *lowered.program.graph;
  REQUIRE(lowered.phase_after.size() == g.size());
  REQUIRE(lowered.after_cross_row.size() == g.size());
  for (ir::NodeId id : lowered.program.reachable_nodes()) {
    const ir::Node& n = g.node(id);
    int latest = -1;
    bool after = ir::is_reduction(n.op) && n.axis == Axis::across_rows;
    for (int i = 0; i < n.arity; ++i) {
      latest = std::max(latest, lowered.phase_after[n.args[i]]);
      after = after || lowered.after_cross_row[n.args[i]];
    }
    CAPTURE(id);
    if (ir::is_reduction(n.op) && n.axis == Axis::along_row) {
      CHECK(lowered.phase_after[id] == latest + 1);
      const auto& phase = lowered.reduction_phases.at(lowered.phase_after[id]);
      CHECK(std::find(phase.begin(), phase.end(), id) != phase.end());
    } else {
      CHECK(lowered.phase_after[id] == latest);
    }
    CHECK(lowered.after_cross_row[id] == after);
  }
  // The gradient dx waits for both phases; the loads wait for none.
  const auto dx = lowered.program.slots[*lowered.program.find_slot("dx")].value;
  CHECK(lowered.phase_after[dx] == 1);
  for (ir::NodeId id : lowered.program.reachable_nodes()) {
    if (g.node(id).op == Op::load) CHECK(lowered.phase_after[id] == -1);
  }
}

TEST_CASE("schedule_reductions: independent reductions share one phase") {
  const auto program = dsl::make_program("extremes", [](auto& p) {
    auto x = p.input("x");
    auto average = mean(x);
    auto largest = max(x);
    auto smallest = min(x);
    p.save("average", average);
    p.save("largest", largest);
    p.save("smallest", smallest);
    p.output("y", (x - average) / (largest - smallest));
  });
  const auto lowered = lower_checking_every_pass(program);
  REQUIRE(lowered.reduction_phases.size() == 1);
  CHECK(lowered.reduction_phases[0].size() == 3);
}

TEST_CASE("factor_reductions: sum(x * r) becomes r * sum(x)") {
  const auto program = dsl::make_program("scaled_sum", [](auto& p) {
    auto x = p.input("x");
    auto s = p.scalar("s");
    auto r = max(x);
    auto scaled = x * r;
    p.save("total", sum(scaled));
    auto divided = x / r;
    auto negated = -divided;
    auto times_scalar = s * negated;
    p.output("y", x * sum(times_scalar));
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "total") == "mul(max_reduce(x), sum(x))");
  CHECK(output_expression(lowered.program) == "mul(mul(neg(div(sum(x), max_reduce(x))), s), x)");
  // Without the rewrite, both sums would wait for max(x): two phases instead of one.
  REQUIRE(lowered.reduction_phases.size() == 1);
  CHECK(lowered.reduction_phases[0].size() == 2);
}

TEST_CASE("factor_reductions: sum(x + r) becomes sum(x) + N * r") {
  const auto program = dsl::make_program("shifted_sum", [](auto& p) {
    auto x = p.input("x");
    auto r = max(x);
    auto shifted = x + r;
    p.save("total", sum(shifted));
    auto reversed = r - x;
    p.output("y", x * sum(reversed));
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "total") == "add(mul(N, max_reduce(x)), sum(x))");
  CHECK(output_expression(lowered.program) == "mul(sub(mul(N, max_reduce(x)), sum(x)), x)");
  CHECK(lowered.reduction_phases.size() == 1);
}

TEST_CASE("factor_reductions: mean(x + r) becomes mean(x) + r") {
  const auto program = dsl::make_program("shifted_mean", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto r = min(x);
    auto shifted = x + r;
    p.save("average", mean(shifted));
    auto nested = (x - r) * 3.0 + 1.0;  // both rules, recursively
    auto not_pulled = x * w + r;        // the Column keeps x * w inside the mean
    auto combined = mean(nested) + mean(not_pulled);
    p.output("y", x * combined);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "average") == "add(mean(x), min_reduce(x))");
  CHECK(output_expression(lowered.program) ==
        "mul(add(add(1, mul(3, sub(mean(x), min_reduce(x)))), add(mean(mul(w, x)), "
        "min_reduce(x))), x)");
  CHECK(lowered.reduction_phases.size() == 1);
}

TEST_CASE("factor_reductions: max and min are not rewritten") {
  const auto program = dsl::make_program("shifted_max", [](auto& p) {
    auto x = p.input("x");
    auto r = mean(x);
    auto shifted = x - r;
    p.save("largest", max(shifted));
    p.output("y", shifted);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "largest") == "max_reduce(sub(x, mean(x)))");
  CHECK(lowered.reduction_phases.size() == 2);
}

TEST_CASE("factor_reductions: a sum of terms that wait on reductions is split") {
  // sum(exp(x - max(x)) + x * x): the second term need not wait for max(x).
  const auto program = dsl::make_program("split", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto largest = max(x);
    auto waiting = exp(x * w - largest);  // nothing to pull out: the term waits
    auto free = x * x;
    p.save("total", sum(waiting + free));
    auto difference = sum(free - waiting);
    p.output("y", x * difference);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "total") ==
        "add(sum(exp(sub(mul(w, x), max_reduce(x)))), sum(mul(x, x)))");
  CHECK(output_expression(lowered.program) ==
        "mul(sub(sum(mul(x, x)), sum(exp(sub(mul(w, x), max_reduce(x))))), x)");
  // sum(x * x) and max(x) in phase 0, the waiting sum in phase 1.
  REQUIRE(lowered.reduction_phases.size() == 2);
  CHECK(lowered.reduction_phases[0].size() == 2);
  CHECK(lowered.reduction_phases[1].size() == 1);
}

TEST_CASE("factor_reductions: a sum whose terms wait on nothing stays one reduction") {
  const auto program = dsl::make_program("unsplit", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto terms = x * x + x * w;
    p.save("total", sum(terms));
    p.output("y", x);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "total") == "sum(add(mul(w, x), mul(x, x)))");
  REQUIRE(lowered.reduction_phases.size() == 1);
  CHECK(lowered.reduction_phases[0].size() == 1);
}

TEST_CASE("fuse_moments: centered sums become co-moments only where that saves a phase") {
  const auto program = dsl::make_program("moments", [](auto& p) {
    auto x = p.input("x");
    auto g = p.input("g");
    auto w = p.column("w");
    auto centered = x - mean(x);
    p.save("variance", mean(centered * centered));
    p.save("covariance", sum(centered * (g * w)));
    // Both factors centered: the second one's mean drops out.
    p.save("both", sum((g - mean(g)) * centered));
    // The other factor needs mean(x) itself: no co-moment can do without it.
    p.save("dependent", sum(centered * (centered * w)));
    // The other factor waits for a reduction of mean(x)'s phase anyway: nothing to gain.
    p.save("no_gain", sum(centered * (g * max(g))));
    p.output("y", centered * w);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(slot_expression(lowered.program, "variance") == "div(comoment(x, x), N)");
  CHECK(slot_expression(lowered.program, "covariance") == "comoment(mul(g, w), x)");
  CHECK(slot_expression(lowered.program, "both") == "comoment(g, x)");
  CHECK(slot_expression(lowered.program, "dependent").starts_with("sum(mul("));
  CHECK(slot_expression(lowered.program, "no_gain").starts_with("sum(mul("));
  // mean(x), max(g) and the three co-moments in phase 0 (mean(g) is no longer needed); the
  // two sums that wait for mean(x) after them.
  REQUIRE(lowered.reduction_phases.size() == 2);
  CHECK(lowered.reduction_phases[0].size() == 5);
  CHECK(lowered.reduction_phases[1].size() == 2);
}

TEST_CASE("factor_reductions: centered sums cancel") {
  const auto program = dsl::make_program("centered", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto t = x * w;
    auto centered = t - mean(t);
    p.save("vanished", sum(centered));
    p.save("vanished_mean", mean(centered * 2.0));
    p.save("kept", sum(centered * centered));
    p.output("y", centered);
  });
  tilenorm::LoweredProgram lowered;
  {
    // fp64 leaves rounding residue where the factored program has exact zeros.
    const auto expected = interpret_on_random_inputs(program);
    lowered = tilenorm::lower(program);
    const auto actual = interpret_on_random_inputs(lowered.program);
    const auto slot = *program.find_slot("vanished");
    for (double v : expected.slots[slot]) CHECK(std::fabs(v) < 1e-12);
    for (double v : actual.slots[slot]) CHECK(v == 0.0);
  }
  CHECK(slot_expression(lowered.program, "vanished") == "-0");
  CHECK(slot_expression(lowered.program, "vanished_mean") == "-0");
  // (A centered sum of squares that does not vanish becomes a co-moment: fuse_moments.)
  CHECK(slot_expression(lowered.program, "kept") == "comoment(mul(w, x), mul(w, x))");
  // Only a mean of the same value cancels.
  const auto other = dsl::make_program("not_centered", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto t = x * w;
    p.save("total", sum(t - mean(x)));
    p.output("y", t);
  });
  const auto kept = lower_checking_every_pass(other);
  CHECK(slot_expression(kept.program, "total") == "sub(sum(mul(w, x)), mul(N, mean(x)))");
}

TEST_CASE("factor_reductions: leaves reductions across rows alone") {
  RawProgram raw("across");
  const auto x = raw.read("x", Shape::tile);
  const auto r = raw.g.reduce(Op::reduce_max, x);
  raw.write("y", Shape::tile, x);
  raw.write("dw", Shape::column,
            raw.g.reduce(Op::reduce_sum, raw.g.binary(Op::mul, x, r), Axis::across_rows));
  const auto lowered = lower_checking_every_pass(raw.program);
  CHECK(slot_expression(lowered.program, "dw") == "sum<across_rows>(mul(max_reduce(x), x))");
  REQUIRE(lowered.cross_row_reductions.size() == 1);
  CHECK(lowered.reduction_phases.size() == 1);
}

// ---- the pipeline

TEST_CASE("lower: TILENORM_DUMP_IR=1 prints the IR after every pass") {
  std::string text;
  {
    CapturedIrDump capture("1");
    tilenorm::lower(tilenorm::kernels::builtin_program("rms_norm"));
    text = capture.text();
  }
  std::size_t position = 0;
  for (const char* pass : {"front end", "verify", "simplify", "cse", "factor_reductions",
                           "fuse_moments", "hoist_reciprocals", "schedule_reductions"}) {
    CAPTURE(pass);
    const auto header = "=== tilenorm IR after " + std::string(pass) + " ===\n";
    const auto found = text.find(header, position);
    REQUIRE(found != std::string::npos);
    position = found + header.size();
    CHECK(text.compare(position, 17, "program rms_norm\n") == 0);
  }
  CHECK(text.find("reduction phase 0:", position) != std::string::npos);
}

TEST_CASE("lower: nothing is printed unless TILENORM_DUMP_IR is set to a non-zero value") {
  for (const char* setting : {"0", ""}) {
    CAPTURE(setting);
    CapturedIrDump capture(setting);
    tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
    CHECK(capture.text().empty());
  }
  CHECK(std::getenv("TILENORM_DUMP_IR") == nullptr);
}

TEST_CASE("lower: LoweredProgram::to_string lists the phases with the listing's numbers") {
  const auto lowered = tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm_no_affine"));
  const std::string text = lowered.to_string();
  CHECK(text.starts_with(lowered.program.to_string()));
  CHECK(text.find("  %2 = mean %0  : RowScalar\n") != std::string::npos);
  CHECK(text.find("  %4 = comoment %0, %0  : RowScalar\n") != std::string::npos);
  CHECK(text.ends_with("  reduction phase 0: %2 %4\n"));
  const auto backward = tilenorm::lower(tilenorm::kernels::builtin_program("rms_norm_backward"));
  const std::string backward_text = backward.to_string();
  CHECK(backward_text.find("  %21 = sum<across_rows> %5  : Column\n") != std::string::npos);
  CHECK(backward_text.ends_with("  reduction phase 0: %13\n  cross-row reductions: %21\n"));
}

TEST_CASE("hoist_reciprocals: t / r becomes t * (1 / r), once per row, and nothing else") {
  const auto program = dsl::make_program("divided", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto s = p.scalar("s");
    auto range = max(x) - min(x);
    p.save("per_row", sum(x) / range);
    p.output("y", x / range + w / s + x / w + x / constant(x, 3.0));
  });
  const auto lowered = lower_checking_every_pass(program);
  // A row-varying value over a row-constant one (a row scalar, a scalar or a constant) is
  // multiplied by the reciprocal; a row scalar over a row scalar and anything over a column
  // are left alone.
  CHECK(output_expression(lowered.program) ==
        "add(add(add(mul(div(1, s), w), mul(div(1, sub(max_reduce(x), min_reduce(x))), x)), "
        "div(x, w)), mul(div(1, 3), x))");
  CHECK(slot_expression(lowered.program, "per_row") ==
        "div(sum(x), sub(max_reduce(x), min_reduce(x)))");
}
