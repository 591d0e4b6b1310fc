// The lowering passes one by one: what each rewrites, what it rejects, and that none of them
// changes what the program computes.
#include "tilenorm/dsl/passes.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

namespace dsl = tilenorm::dsl;
namespace ir = tilenorm::ir;
namespace passes = tilenorm::passes;
using ir::Op;

// The expression behind `id` in prefix form, with leaves by slot name and N for the row
// length. Operands of commutative ops are sorted, so the text does not depend on which order
// a pass happened to put them in.
std::string expression(const ir::Program& program, ir::NodeId id) {
  const ir::Node& node = program.graph->node(id);
  switch (node.op) {
    case Op::load_row:
      return program.row_inputs.at(node.index);
    case Op::load_column:
      return program.columns.at(node.index);
    case Op::scalar_param:
      return program.scalars.at(node.index);
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
  std::string text = std::string(ir::op_name(node.op)) + "(";
  for (std::size_t i = 0; i < args.size(); ++i) text += (i ? ", " : "") + args[i];
  return text + ")";
}

std::string output_expression(const ir::Program& program) {
  return expression(program, program.row_outputs.at(0).value);
}

std::string saved_expression(const ir::Program& program) {
  return expression(program, program.row_stats.at(0).value);
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
  const auto elements = static_cast<std::size_t>(inputs.rows * inputs.cols);
  std::uint64_t seed = 1;
  for (std::size_t i = 0; i < program.row_inputs.size(); ++i) {
    inputs.row_inputs.push_back(
        tilenorm::random_values(elements, seed++, -2.0, 2.0, tilenorm::DType::f32));
  }
  for (std::size_t i = 0; i < program.columns.size(); ++i) {
    inputs.columns.push_back(tilenorm::random_values(37, seed++, 0.5, 1.5, tilenorm::DType::f32));
  }
  for (std::size_t i = 0; i < program.scalars.size(); ++i) inputs.scalars.push_back(0.25 + 0.5 * i);
  return tilenorm::interpret(program, inputs);
}

void check_same_results(const tilenorm::InterpreterOutputs& expected,
                        const tilenorm::InterpreterOutputs& actual) {
  // Pulling factors out of a sum reorders fp64 rounding, nothing more.
  const tilenorm::Tolerance tight{1e-12, 1e-12};
  REQUIRE(actual.row_outputs.size() == expected.row_outputs.size());
  REQUIRE(actual.row_stats.size() == expected.row_stats.size());
  for (std::size_t i = 0; i < expected.row_outputs.size(); ++i) {
    const auto comparison =
        tilenorm::compare(actual.row_outputs[i], expected.row_outputs[i], tight);
    CHECK_MESSAGE(comparison.ok(), "row output ", i, ": ", comparison.describe());
  }
  for (std::size_t i = 0; i < expected.row_stats.size(); ++i) {
    const auto comparison = tilenorm::compare(actual.row_stats[i], expected.row_stats[i], tight);
    CHECK_MESSAGE(comparison.ok(), "saved statistic ", i, ": ", comparison.describe());
  }
}

// Runs the pipeline by hand and checks the numbers after every pass.
tilenorm::LoweredProgram lower_checking_every_pass(const ir::Program& program) {
  const auto expected = interpret_on_random_inputs(program);
  passes::verify(program);
  const ir::Program simplified = passes::simplify(program);
  {
    INFO("after simplify:\n", simplified.to_string());
    check_same_results(expected, interpret_on_random_inputs(simplified));
  }
  const ir::Program shared = passes::cse(simplified);
  {
    INFO("after cse:\n", shared.to_string());
    check_same_results(expected, interpret_on_random_inputs(shared));
  }
  tilenorm::LoweredProgram lowered = passes::schedule_reductions(shared);
  {
    INFO("after schedule_reductions:\n", lowered.to_string());
    check_same_results(expected, interpret_on_random_inputs(lowered.program));
  }
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

// Restores std::cerr and TILENORM_DUMP_IR however the test leaves.
class CapturedIrDump {
 public:
  explicit CapturedIrDump(const char* setting) : previous_(std::cerr.rdbuf(captured_.rdbuf())) {
    ::setenv("TILENORM_DUMP_IR", setting, 1);
  }
  ~CapturedIrDump() {
    ::unsetenv("TILENORM_DUMP_IR");
    std::cerr.rdbuf(previous_);
  }
  CapturedIrDump(const CapturedIrDump&) = delete;
  CapturedIrDump& operator=(const CapturedIrDump&) = delete;
  std::string text() const { return captured_.str(); }

 private:
  std::ostringstream captured_;
  std::streambuf* previous_;
};

}  // namespace

// ---- verify

TEST_CASE("verify: accepts every built-in kernel") {
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    CAPTURE(kernel.name);
    CHECK_NOTHROW(passes::verify(kernel.program));
  }
}

TEST_CASE("verify: rejects a program without a row input") {
  ir::Program program;
  program.name = "headless";
  program.graph = std::make_shared<ir::Graph>();
  program.row_outputs.push_back({"y", program.graph->leaf(Op::load_row, ir::Shape::tile, 0)});
  CHECK(verify_error(program) ==
        "program 'headless': declares no row input; a norm reads at least one [M, N] tensor");
}

TEST_CASE("verify: rejects a program without a row output") {
  const auto program = dsl::make_program("stats_only", [](auto& p) {
    auto x = p.input("x");
    p.save("mean", mean(x));
  });
  CHECK(verify_error(program) ==
        "program 'stats_only': writes no row output; add one with output(name, tile)");
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
  CHECK(verify_error(bad_program_name) ==
        "program name 'layer-norm' is not an identifier (letters, digits and '_', not starting "
        "with a digit)");
  const auto leading_digit =
      dsl::make_program("norm", [](auto& p) { p.output("y", p.input("1x")); });
  CHECK(verify_error(leading_digit) == "program 'norm': row input name '1x' is not an identifier");
  const auto with_space = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * p.column("my weight"));
  });
  CHECK(verify_error(with_space) == "program 'norm': column name 'my weight' is not an identifier");
  const auto empty = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x + p.scalar(""));
  });
  CHECK(verify_error(empty) == "program 'norm': scalar name '' is not an identifier");
  const auto bad_output = dsl::make_program("norm", [](auto& p) {
    auto x = p.input("x");
    p.save("rstd!", mean(x));
    p.output("y", x);
  });
  CHECK(verify_error(bad_output) ==
        "program 'norm': saved statistic name 'rstd!' is not an identifier");
}

TEST_CASE("verify: rejects outputs of the wrong shape and undeclared slots") {
  ir::Program program;
  program.name = "raw";
  program.graph = std::make_shared<ir::Graph>();
  const auto x = program.graph->leaf(Op::load_row, ir::Shape::tile, 0);
  program.row_inputs = {"x"};
  program.row_outputs = {{"y", program.graph->reduce(Op::reduce_sum, x)}};
  CHECK(verify_error(program) == "program 'raw': row output 'y' is a RowScalar, not a Tile");

  program.row_outputs = {{"y", x}};
  program.row_stats = {{"total", x}};
  CHECK(verify_error(program) ==
        "program 'raw': saved statistic 'total' is a Tile, not a RowScalar");

  program.row_stats.clear();
  program.row_outputs = {{"y", program.graph->leaf(Op::load_row, ir::Shape::tile, 1)}};
  CHECK(verify_error(program) ==
        "program 'raw': refers to row input number 1, which is not declared");
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

TEST_CASE("simplify: folds through unary ops, casts and selects") {
  dsl::ProgramBuilder<struct FoldTag> p("fold");
  auto x = p.input("x");
  auto rounded = cast<tilenorm::DType::bf16>(constant(x, 1.0 + 0x1p-8 + 0x1p-20));
  auto picked = where(constant(x, 1.0) < constant(x, 2.0), rounded, constant(x, 5.0));
  auto root = sqrt(constant(x, 16.0));
  p.output("y", x * picked + root);
  const auto simplified = passes::simplify(std::move(p).build());
  // 1 + 2^-8 + 2^-20 is just above the midpoint of two bf16 neighbours: 1 + 2^-7 wins.
  CHECK(output_expression(simplified) == "add(4, mul(1.0078125, x))");
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
  CHECK(saved_expression(simplified) == "mean(x)");
  CHECK(output_expression(simplified) == "sub(0, add(mean(x), mul(0, x)))");
  CHECK(simplified.graph->node(simplified.row_outputs[0].value).shape == ir::Shape::tile);
  CHECK(simplified.graph->node(simplified.row_stats[0].value).shape == ir::Shape::row_scalar);
  lower_checking_every_pass(program);
}

TEST_CASE("simplify: leaves the built-in kernels' outputs unchanged in meaning") {
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
  const ir::Node& root = shared.graph->node(shared.row_outputs[0].value);
  CHECK(root.op == Op::max);
  CHECK(root.args[0] == root.args[1]);
  CHECK(shared.graph->size() == shared.reachable_nodes().size());
  CHECK(shared.graph->size() == 6);  // x, w, s, x * w, + s, max
  CHECK(program.graph->size() > shared.graph->size());
  lower_checking_every_pass(program);
}

// ---- schedule_reductions

TEST_CASE("schedule_reductions: RMSNorm needs one phase, LayerNorm two") {
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    CAPTURE(kernel.name);
    const auto lowered = tilenorm::lower(kernel.program);
    const bool is_layer_norm = kernel.name.starts_with("layer_norm");
    REQUIRE(lowered.reduction_phases.size() == (is_layer_norm ? 2u : 1u));
    for (const auto& phase : lowered.reduction_phases) CHECK(phase.size() == 1);
  }
  const auto layer_norm = tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
  CHECK(expression(layer_norm.program, layer_norm.reduction_phases[0][0]) == "mean(x)");
  CHECK(expression(layer_norm.program, layer_norm.reduction_phases[1][0]) ==
        "mean(mul(sub(x, mean(x)), sub(x, mean(x))))");
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

TEST_CASE("schedule_reductions: sum(x * r) becomes r * sum(x)") {
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
  CHECK(saved_expression(lowered.program) == "mul(max_reduce(x), sum(x))");
  CHECK(output_expression(lowered.program) == "mul(mul(neg(div(sum(x), max_reduce(x))), s), x)");
  // Without the rewrite, both sums would wait for max(x): two phases instead of one.
  REQUIRE(lowered.reduction_phases.size() == 1);
  CHECK(lowered.reduction_phases[0].size() == 2);
}

TEST_CASE("schedule_reductions: sum(x + r) becomes sum(x) + N * r") {
  const auto program = dsl::make_program("shifted_sum", [](auto& p) {
    auto x = p.input("x");
    auto r = max(x);
    auto shifted = x + r;
    p.save("total", sum(shifted));
    auto reversed = r - x;
    p.output("y", x * sum(reversed));
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(saved_expression(lowered.program) == "add(mul(N, max_reduce(x)), sum(x))");
  CHECK(output_expression(lowered.program) == "mul(sub(mul(N, max_reduce(x)), sum(x)), x)");
  CHECK(lowered.reduction_phases.size() == 1);
}

TEST_CASE("schedule_reductions: mean(x + r) becomes mean(x) + r") {
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
  CHECK(saved_expression(lowered.program) == "add(mean(x), min_reduce(x))");
  CHECK(output_expression(lowered.program) ==
        "mul(add(add(1, mul(3, sub(mean(x), min_reduce(x)))), add(mean(mul(w, x)), "
        "min_reduce(x))), x)");
  CHECK(lowered.reduction_phases.size() == 1);
}

TEST_CASE("schedule_reductions: max and min are not rewritten") {
  const auto program = dsl::make_program("shifted_max", [](auto& p) {
    auto x = p.input("x");
    auto r = mean(x);
    auto shifted = x - r;
    p.save("largest", max(shifted));
    p.output("y", shifted);
  });
  const auto lowered = lower_checking_every_pass(program);
  CHECK(saved_expression(lowered.program) == "max_reduce(sub(x, mean(x)))");
  CHECK(lowered.reduction_phases.size() == 2);
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
  for (const char* pass : {"front end", "verify", "simplify", "cse", "schedule_reductions"}) {
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
  CHECK(text.ends_with("  reduction phase 0: %2\n  reduction phase 1: %5\n"));
}
