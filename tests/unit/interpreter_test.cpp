// The fp64 interpreter against formulas written out by hand, and the reference helpers that
// tests compare kernels with.
#include "tilenorm/dsl/interpreter.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

using tilenorm::DType;
namespace ir = tilenorm::ir;

constexpr double kEps = 1e-5;

// fp64 against fp64: only the order of a few additions differs.
bool close(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-12 * (1.0 + std::fabs(expected));
}

std::size_t slot_of(const ir::Program& program, const std::string& name) {
  const auto slot = program.find_slot(name);
  REQUIRE_MESSAGE(slot.has_value(), "no slot named ", name);
  return *slot;
}

// The values the interpreter wrote into the slot called `name`.
const std::vector<double>& written(const ir::Program& program,
                                   const tilenorm::InterpreterOutputs& out,
                                   const std::string& name) {
  const std::size_t slot = slot_of(program, name);
  REQUIRE(program.slots[slot].role == ir::Role::written);
  return out.slots.at(slot);
}

// Random x, weight and bias, placed into whichever slots `program` declares them in.
struct NormCase {
  std::int64_t rows;
  std::int64_t cols;
  std::vector<double> x;
  std::vector<double> weight;
  std::vector<double> bias;

  NormCase(std::int64_t row_count, std::int64_t col_count, std::uint64_t seed)
      : rows(row_count),
        cols(col_count),
        x(tilenorm::random_values(static_cast<std::size_t>(rows * cols), seed, -3.0, 3.0,
                                  DType::bf16)),
        weight(tilenorm::random_values(static_cast<std::size_t>(cols), seed + 1, 0.5, 1.5,
                                       DType::bf16)),
        bias(tilenorm::random_values(static_cast<std::size_t>(cols), seed + 2, -1.0, 1.0,
                                     DType::bf16)) {}

  tilenorm::InterpreterInputs inputs_for(const ir::Program& program) const {
    tilenorm::InterpreterInputs inputs;
    inputs.rows = rows;
    inputs.cols = cols;
    inputs.slots.resize(program.slots.size());
    for (std::size_t i = 0; i < program.slots.size(); ++i) {
      const auto& slot = program.slots[i];
      if (slot.role != ir::Role::read) continue;
      if (slot.name == "x") inputs.slots[i] = x;
      if (slot.name == "weight") inputs.slots[i] = weight;
      if (slot.name == "bias") inputs.slots[i] = bias;
      if (slot.name == "eps") inputs.slots[i] = {kEps};
    }
    return inputs;
  }
};

void check_layer_norm(const std::string& name, bool with_weight, bool with_bias) {
  CAPTURE(name);
  const auto& program = tilenorm::kernels::builtin_program(name);
  const NormCase data(7, 133, 11);
  const auto out = tilenorm::interpret(program, data.inputs_for(program));
  const auto mean_out = written(program, out, "mean");
  const auto rstd_out = written(program, out, "rstd");
  const auto y = written(program, out, "y");
  REQUIRE(mean_out.size() == 7);
  REQUIRE(y.size() == 7 * 133);
  for (std::int64_t row = 0; row < data.rows; ++row) {
    const double* x = data.x.data() + row * data.cols;
    double total = 0.0;
    for (std::int64_t c = 0; c < data.cols; ++c) total += x[c];
    const double mean = total / static_cast<double>(data.cols);
    double squares = 0.0;
    for (std::int64_t c = 0; c < data.cols; ++c) squares += (x[c] - mean) * (x[c] - mean);
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(data.cols) + kEps);
    CHECK(close(mean_out[row], mean));
    CHECK(close(rstd_out[row], rstd));
    for (std::int64_t c = 0; c < data.cols; ++c) {
      double expected = (x[c] - mean) * rstd;
      if (with_weight) expected *= data.weight[c];
      if (with_bias) expected += data.bias[c];
      REQUIRE(close(y[row * data.cols + c], expected));
    }
  }
  // Read slots come back empty.
  CHECK(out.slots.at(slot_of(program, "x")).empty());
  CHECK(out.slots.at(slot_of(program, "eps")).empty());
}

void check_rms_norm(const std::string& name, bool with_weight) {
  CAPTURE(name);
  const auto& program = tilenorm::kernels::builtin_program(name);
  const NormCase data(6, 257, 23);
  const auto out = tilenorm::interpret(program, data.inputs_for(program));
  const auto y = written(program, out, "y");
  for (std::int64_t row = 0; row < data.rows; ++row) {
    const double* x = data.x.data() + row * data.cols;
    double squares = 0.0;
    for (std::int64_t c = 0; c < data.cols; ++c) squares += x[c] * x[c];
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(data.cols) + kEps);
    CHECK(close(written(program, out, "rstd")[row], rstd));
    for (std::int64_t c = 0; c < data.cols; ++c) {
      const double expected = x[c] * rstd * (with_weight ? data.weight[c] : 1.0);
      REQUIRE(close(y[row * data.cols + c], expected));
    }
  }
}

// A program whose only read slot is the Tile x: one input row of `cols` values per row.
tilenorm::InterpreterOutputs interpret_rows(const ir::Program& program,
                                            const std::vector<double>& x, std::int64_t cols) {
  tilenorm::InterpreterInputs inputs;
  inputs.cols = cols;
  inputs.rows = static_cast<std::int64_t>(x.size()) / cols;
  inputs.slots.resize(program.slots.size());
  inputs.slots[slot_of(program, "x")] = x;
  return tilenorm::interpret(program, inputs);
}

std::string interpreter_error(const ir::Program& program,
                              const tilenorm::InterpreterInputs& inputs) {
  try {
    tilenorm::interpret(program, inputs);
  } catch (const tilenorm::ProgramError& error) {
    return error.what();
  }
  FAIL("the interpreter accepted the inputs");
  return {};
}

}  // namespace

// ---- the built-in kernels

TEST_CASE("interpreter: layer_norm and its variants match the fp64 formula") {
  check_layer_norm("layer_norm", true, true);
  check_layer_norm("layer_norm_no_bias", true, false);
  check_layer_norm("layer_norm_no_affine", false, false);
}

TEST_CASE("interpreter: rms_norm and rms_norm_no_weight match the fp64 formula") {
  check_rms_norm("rms_norm", true);
  check_rms_norm("rms_norm_no_weight", false);
}

TEST_CASE("interpreter: rows spread over threads give the same answer as one row at a time") {
  // Enough elements that the interpreter splits the rows between workers.
  const auto& program = tilenorm::kernels::builtin_program("rms_norm");
  const NormCase data(33, 8192, 5);
  const auto all = tilenorm::interpret(program, data.inputs_for(program));
  for (std::int64_t row : {0, 16, 32}) {
    NormCase single(1, data.cols, 5);
    single.x.assign(data.x.begin() + row * data.cols, data.x.begin() + (row + 1) * data.cols);
    single.weight = data.weight;
    const auto one = tilenorm::interpret(program, single.inputs_for(program));
    CHECK(written(program, one, "rstd")[0] == written(program, all, "rstd")[row]);
    const auto y_one = written(program, one, "y");
    CHECK(std::equal(y_one.begin(), y_one.end(),
                     written(program, all, "y").begin() + row * data.cols));
  }
}

TEST_CASE("interpreter: sums across rows add the rows in order, however the rows are split") {
  // The column gradients of the derived backward: 40 rows of 4096 values spread over workers,
  // against a sum written out here in row order.
  const auto& program = tilenorm::kernels::builtin_program("rms_norm_backward_recompute");
  const std::int64_t rows = 40, cols = 4096;
  tilenorm::InterpreterInputs inputs;
  inputs.rows = rows;
  inputs.cols = cols;
  inputs.slots.resize(program.slots.size());
  const auto x = tilenorm::random_values(rows * cols, 3, -2.0, 2.0, DType::f32);
  const auto dy = tilenorm::random_values(rows * cols, 4, -1.0, 1.0, DType::f32);
  inputs.slots[slot_of(program, "x")] = x;
  inputs.slots[slot_of(program, "dy")] = dy;
  inputs.slots[slot_of(program, "weight")] = tilenorm::random_values(cols, 5, 0.5, 1.5, DType::f32);
  inputs.slots[slot_of(program, "eps")] = {kEps};
  const auto out = tilenorm::interpret(program, inputs);
  const auto dweight = written(program, out, "dweight");
  REQUIRE(dweight.size() == static_cast<std::size_t>(cols));
  std::vector<double> rstd(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double squares = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) squares += x[r * cols + c] * x[r * cols + c];
    rstd[r] = 1.0 / std::sqrt(squares / static_cast<double>(cols) + kEps);
  }
  for (std::int64_t c = 0; c < cols; c += 97) {
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) total += dy[r * cols + c] * x[r * cols + c] * rstd[r];
    CHECK(close(dweight[c], total));
  }
}

TEST_CASE("interpreter: zero rows give empty outputs, and column sums of nothing are zero") {
  const auto& program = tilenorm::kernels::builtin_program("layer_norm_no_affine");
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 0;
  inputs.cols = 16;
  inputs.slots.resize(program.slots.size());
  inputs.slots[slot_of(program, "eps")] = {kEps};
  const auto out = tilenorm::interpret(program, inputs);
  REQUIRE(out.slots.size() == program.slots.size());
  CHECK(written(program, out, "y").empty());
  CHECK(written(program, out, "mean").empty());
  CHECK(written(program, out, "rstd").empty());

  const auto& backward = tilenorm::kernels::builtin_program("layer_norm_backward_recompute");
  tilenorm::InterpreterInputs backward_inputs;
  backward_inputs.rows = 0;
  backward_inputs.cols = 5;
  backward_inputs.slots.resize(backward.slots.size());
  backward_inputs.slots[slot_of(backward, "eps")] = {kEps};
  backward_inputs.slots[slot_of(backward, "weight")] = {1, 2, 3, 4, 5};
  const auto gradients = tilenorm::interpret(backward, backward_inputs);
  CHECK(written(backward, gradients, "dx").empty());
  CHECK(written(backward, gradients, "dweight") == std::vector<double>(5, 0.0));
  CHECK(written(backward, gradients, "dbias") == std::vector<double>(5, 0.0));
}

// ---- individual operations

TEST_CASE("interpreter: max and min reductions") {
  const auto program = tilenorm::dsl::make_program("extremes", [](auto& p) {
    auto x = p.input("x");
    auto largest = max(x);
    auto smallest = min(x);
    p.save("largest", largest);
    p.save("smallest", smallest);
    p.output("y", (x - smallest) / (largest - smallest));
  });
  const std::vector<double> x = {-3.0, 7.5,  0.0,  2.0,  //
                                 -1.0, -2.0, -0.5, -8.0};
  const auto out = interpret_rows(program, x, 4);
  CHECK(written(program, out, "largest") == std::vector<double>{7.5, -0.5});
  CHECK(written(program, out, "smallest") == std::vector<double>{-3.0, -8.0});
  const auto y = written(program, out, "y");
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 1.0);
  CHECK(y[3] == doctest::Approx(5.0 / 10.5));
  CHECK(y[7] == 0.0);
}

TEST_CASE("interpreter: comparisons give 1 or 0, and where() selects") {
  const auto program = tilenorm::dsl::make_program("compare", [](auto& p) {
    auto x = p.input("x");
    auto average = mean(x);
    p.output("less", x < average);
    p.output("less_equal", x <= average);
    p.output("greater", x > average);
    p.output("greater_equal", x >= average);
    p.output("leaky", where(x > 0.0, x, x * 0.25));
    p.output("clamped", min(max(x, -1.0), 1.0));
  });
  const std::vector<double> x = {-4.0, 1.0, 1.0, 6.0};  // mean 1: ties on purpose
  const auto out = interpret_rows(program, x, 4);
  CHECK(written(program, out, "less") == std::vector<double>{1, 0, 0, 0});
  CHECK(written(program, out, "less_equal") == std::vector<double>{1, 1, 1, 0});
  CHECK(written(program, out, "greater") == std::vector<double>{0, 0, 0, 1});
  CHECK(written(program, out, "greater_equal") == std::vector<double>{0, 1, 1, 1});
  CHECK(written(program, out, "leaky") == std::vector<double>{-1.0, 1.0, 1.0, 6.0});
  CHECK(written(program, out, "clamped") == std::vector<double>{-1.0, 1.0, 1.0, 1.0});
}

TEST_CASE("interpreter: cast rounds to the storage type, ties to even") {
  const auto program = tilenorm::dsl::make_program("casts", [](auto& p) {
    auto x = p.input("x");
    p.output("bf16", cast<DType::bf16>(x));
    p.output("fp16", cast<DType::f16>(x));
    p.output("fp32", cast<DType::f32>(x));
  });
  // bf16 keeps 7 fraction bits, fp16 10: 2^-8 and 2^-11 are the half-ulps at 1.
  const std::vector<double> x = {
      1.0 + 0x1p-8,            // bf16 tie -> even (1)
      1.0 + 3 * 0x1p-8,        // bf16 tie -> even (1 + 2^-6)
      1.0 + 0x1p-8 + 0x1p-20,  // bf16 above the tie -> up
      1.0 + 0x1p-11,           // fp16 tie -> even (1)
      70000.0,                 // beyond fp16's range
      1.0 + 0x1p-40,           // below fp32's precision
  };
  const auto out = interpret_rows(program, x, static_cast<std::int64_t>(x.size()));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(written(program, out, "bf16") ==
        std::vector<double>{1.0, 1.0 + 0x1p-6, 1.0 + 0x1p-7, 1.0, 70144.0, 1.0});
  CHECK(written(program, out, "fp16") ==
        std::vector<double>{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1.0 + 0x1p-8, 1.0, inf, 1.0});
  CHECK(written(program, out, "fp32") == std::vector<double>{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8,
                                                             1.0 + 0x1p-8 + 0x1p-20, 1.0 + 0x1p-11,
                                                             70000.0, 1.0});
}

TEST_CASE("interpreter: elementwise math functions") {
  const auto program = tilenorm::dsl::make_program("math", [](auto& p) {
    auto x = p.input("x");
    p.output("exp", exp(x));
    p.output("log", log(abs(x)));
    p.output("tanh", tanh(x));
    p.output("sigmoid", sigmoid(x));
    p.output("abs", abs(x));
    p.output("sqrt", sqrt(abs(x)));
    p.output("rsqrt", rsqrt(abs(x)));
    p.output("neg", -x);
    p.output("pow", pow(abs(x), 1.5));
    p.output("pow_base", pow(2.0, x));
  });
  const std::vector<double> x = {-2.5, -0.75, 0.125, 1.0, 3.5, 9.0};
  const auto out = interpret_rows(program, x, 3);
  auto y = [&](const char* name) { return written(program, out, name); };
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(x[i]);
    const double magnitude = std::fabs(x[i]);
    CHECK(y("exp")[i] == doctest::Approx(std::exp(x[i])).epsilon(1e-15));
    CHECK(y("log")[i] == doctest::Approx(std::log(magnitude)).epsilon(1e-15));
    CHECK(y("tanh")[i] == doctest::Approx(std::tanh(x[i])).epsilon(1e-15));
    CHECK(y("sigmoid")[i] == doctest::Approx(1.0 / (1.0 + std::exp(-x[i]))).epsilon(1e-15));
    CHECK(y("abs")[i] == magnitude);
    CHECK(y("sqrt")[i] == doctest::Approx(std::sqrt(magnitude)).epsilon(1e-15));
    CHECK(y("rsqrt")[i] == doctest::Approx(1.0 / std::sqrt(magnitude)).epsilon(1e-15));
    CHECK(y("neg")[i] == -x[i]);
    CHECK(y("pow")[i] == doctest::Approx(magnitude * std::sqrt(magnitude)).epsilon(1e-15));
    CHECK(y("pow_base")[i] == doctest::Approx(std::exp2(x[i])).epsilon(1e-15));
  }
}

TEST_CASE("interpreter: columns, scalars, row values and the row length broadcast") {
  const auto program = tilenorm::dsl::make_program("broadcasts", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto s = p.scalar("s");
    auto r = p.row_values("r");
    auto n = p.row_length();
    p.save("sum_over_n", sum(x) / n + r);
    p.output("y", x * w + s);
  });
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 2;
  inputs.cols = 3;
  inputs.slots = {{1, 2, 3, 4, 5, 6}, {10, 100, 1000}, {0.5}, {0.25, -0.25}, {}, {}};
  const auto out = tilenorm::interpret(program, inputs);
  CHECK(written(program, out, "sum_over_n") == std::vector<double>{2.25, 4.75});
  CHECK(written(program, out, "y") ==
        std::vector<double>{10.5, 200.5, 3000.5, 40.5, 500.5, 6000.5});
}

TEST_CASE("interpreter: reductions across rows, and what depends on them") {
  // Built on the IR: the DSL has no reductions across rows (autodiff makes them).
  ir::Program program;
  program.name = "across";
  program.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *program.graph;
  using ir::Axis;
  using ir::Op;
  using ir::Role;
  using ir::Shape;
  const auto x = g.load(Shape::tile, 0);
  const auto w = g.load(Shape::column, 1);
  const auto column_sums = g.reduce(Op::reduce_sum, g.binary(Op::mul, x, w), Axis::across_rows);
  const auto row_maxima = g.reduce(Op::reduce_max, x);
  const auto total = g.reduce(Op::reduce_sum, row_maxima, Axis::across_rows);
  const auto scaled = g.binary(Op::div, column_sums, total);  // after both: a Column
  program.slots = {
      {"x", Role::read, Shape::tile, {}, 0, true},
      {"w", Role::read, Shape::column, {}, 0, true},
      {"y", Role::written, Shape::tile, {}, g.binary(Op::mul, x, w), false},
      {"column_sums", Role::written, Shape::column, {}, column_sums, false},
      {"scaled", Role::written, Shape::column, {}, scaled, false},
      {"total", Role::written, Shape::scalar, DType::f32, total, false},
  };
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 3;
  inputs.cols = 2;
  inputs.slots = {{1, 2, 3, -4, 5, 6}, {10, 100}, {}, {}, {}, {}};
  const auto out = tilenorm::interpret(program, inputs);
  CHECK(written(program, out, "y") == std::vector<double>{10, 200, 30, -400, 50, 600});
  CHECK(written(program, out, "column_sums") == std::vector<double>{90, 400});
  CHECK(written(program, out, "total") == std::vector<double>{2 + 3 + 6});
  CHECK(written(program, out, "scaled") == std::vector<double>{90.0 / 11, 400.0 / 11});
}

TEST_CASE("interpreter: a written slot holds a broadcast value of a smaller shape") {
  // Autodiff writes such slots (a gradient that does not vary along the row, or zero).
  ir::Program program;
  program.name = "broadcast_write";
  program.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *program.graph;
  using ir::Op;
  using ir::Role;
  using ir::Shape;
  const auto x = g.load(Shape::tile, 0);
  program.slots = {
      {"x", Role::read, Shape::tile, {}, 0, false},
      {"row_mean", Role::written, Shape::tile, {}, g.reduce(Op::reduce_mean, x), false},
      {"zero", Role::written, Shape::tile, {}, g.constant(0.0), false},
      {"twos", Role::written, Shape::column, {}, g.constant(2.0), false},
      {"stat", Role::written, Shape::row_scalar, DType::f32, g.constant(-1.0), false},
  };
  const auto out = interpret_rows(program, {1, 3, 5, 7}, 2);
  CHECK(written(program, out, "row_mean") == std::vector<double>{2, 2, 6, 6});
  CHECK(written(program, out, "zero") == std::vector<double>{0, 0, 0, 0});
  CHECK(written(program, out, "twos") == std::vector<double>{2, 2});
  CHECK(written(program, out, "stat") == std::vector<double>{-1, -1});
}

TEST_CASE("interpreter: slot_elements gives the dense size of each shape") {
  using ir::Shape;
  CHECK(tilenorm::slot_elements(Shape::tile, 3, 5) == 15);
  CHECK(tilenorm::slot_elements(Shape::column, 3, 5) == 5);
  CHECK(tilenorm::slot_elements(Shape::row_scalar, 3, 5) == 3);
  CHECK(tilenorm::slot_elements(Shape::scalar, 3, 5) == 1);
  CHECK(tilenorm::slot_elements(Shape::tile, 0, 5) == 0);
}

// ---- input checks

TEST_CASE("interpreter: inputs that do not match the slots are rejected") {
  const auto& program = tilenorm::kernels::builtin_program("layer_norm");
  const NormCase data(2, 8, 3);
  const auto good = data.inputs_for(program);
  CHECK_NOTHROW(tilenorm::interpret(program, good));

  auto short_row = good;
  short_row.slots[slot_of(program, "x")].pop_back();
  CHECK(interpreter_error(program, short_row) ==
        "interpreter, program 'layer_norm': slot 'x' has 15 values, expected 16");

  auto long_column = good;
  long_column.slots[slot_of(program, "bias")].push_back(0.0);
  CHECK(interpreter_error(program, long_column) ==
        "interpreter, program 'layer_norm': slot 'bias' has 9 values, expected 8");

  auto missing_slot = good;
  missing_slot.slots.pop_back();
  CHECK(interpreter_error(program, missing_slot) ==
        "interpreter, program 'layer_norm': expected 7 slots, got 6");

  auto extra_slot = good;
  extra_slot.slots.push_back({});
  CHECK(interpreter_error(program, extra_slot) ==
        "interpreter, program 'layer_norm': expected 7 slots, got 8");

  auto no_scalar = good;
  no_scalar.slots[slot_of(program, "eps")].clear();
  CHECK(interpreter_error(program, no_scalar) ==
        "interpreter, program 'layer_norm': slot 'eps' has 0 values, expected 1");

  // Written slots are ignored, whatever they hold.
  auto filled_output = good;
  filled_output.slots[slot_of(program, "y")] = {1.0, 2.0};
  CHECK_NOTHROW(tilenorm::interpret(program, filled_output));

  auto no_cols = good;
  no_cols.cols = 0;
  CHECK(interpreter_error(program, no_cols) ==
        "interpreter, program 'layer_norm': needs rows >= 0 and cols >= 1");
  auto negative_rows = good;
  negative_rows.rows = -1;
  CHECK(interpreter_error(program, negative_rows) ==
        "interpreter, program 'layer_norm': needs rows >= 0 and cols >= 1");
}

TEST_CASE("interpreter: a saved statistic read back has one value per row") {
  const auto& program = tilenorm::kernels::builtin_program("rms_norm_backward");
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 2;
  inputs.cols = 4;
  inputs.slots.resize(program.slots.size());
  inputs.slots[slot_of(program, "x")] = std::vector<double>(8, 1.0);
  inputs.slots[slot_of(program, "dy")] = std::vector<double>(8, 1.0);
  inputs.slots[slot_of(program, "weight")] = std::vector<double>(4, 1.0);
  inputs.slots[slot_of(program, "rstd")] = std::vector<double>(8, 1.0);
  CHECK(interpreter_error(program, inputs) ==
        "interpreter, program 'rms_norm_backward': slot 'rstd' has 8 values, expected 2");
}

// ---- reference helpers

TEST_CASE("reference: random_values are exactly representable and reproducible") {
  for (DType dtype : tilenorm::kAllDTypes) {
    CAPTURE(tilenorm::dtype_name(dtype));
    const auto values = tilenorm::random_values(4096, 42, -1.0, 1.0, dtype);
    REQUIRE(values.size() == 4096);
    for (double v : values) {
      REQUIRE(tilenorm::round_to_dtype(v, dtype) == v);
      // Rounding may land exactly on the upper bound.
      REQUIRE(v >= -1.0);
      REQUIRE(v <= 1.0);
    }
    CHECK(std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) != values.end());
    CHECK(tilenorm::random_values(4096, 42, -1.0, 1.0, dtype) == values);
    CHECK(tilenorm::random_values(4096, 43, -1.0, 1.0, dtype) != values);
  }
}

TEST_CASE("reference: encode and decode round-trip and use the storage layout") {
  for (DType dtype : tilenorm::kAllDTypes) {
    CAPTURE(tilenorm::dtype_name(dtype));
    const auto values = tilenorm::random_values(1000, 7, -100.0, 100.0, dtype);
    const auto bytes = tilenorm::encode(values, dtype);
    CHECK(bytes.size() == values.size() * tilenorm::dtype_size(dtype));
    CHECK(tilenorm::decode(bytes, dtype) == values);
  }
  const std::vector<double> one = {1.0};
  auto bits16 = [](const std::vector<std::byte>& bytes) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, bytes.data(), sizeof bits);
    return bits;
  };
  CHECK(bits16(tilenorm::encode(one, DType::bf16)) == 0x3f80);
  CHECK(bits16(tilenorm::encode(one, DType::f16)) == 0x3c00);
  std::uint32_t bits32 = 0;
  std::memcpy(&bits32, tilenorm::encode(one, DType::f32).data(), sizeof bits32);
  CHECK(bits32 == 0x3f800000u);
  // Encoding rounds like a device store.
  const std::vector<double> between = {1.0 + 0x1p-8 + 0x1p-20};
  CHECK(tilenorm::decode(tilenorm::encode(between, DType::bf16), DType::bf16) ==
        std::vector<double>{1.0 + 0x1p-7});
}

TEST_CASE("reference: compare flags NaN, values outside the tolerance and size mismatches") {
  const tilenorm::Tolerance tolerance{1e-3, 1e-2};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  const std::vector<double> expected = {1.0, -2.0, 100.0, inf};
  const std::vector<double> inside = {1.0 + 0.9e-2, -2.0 - 1e-2, 100.0 + 0.9, inf};
  const auto pass = tilenorm::compare(inside, expected, tolerance);
  CHECK(pass.ok());
  CHECK(pass.checked == 4);
  CHECK(pass.non_finite == 1);
  CHECK(pass.max_abs_error == doctest::Approx(0.9));

  const std::vector<double> outside = {1.0, -2.0, 101.2, inf};
  const auto fail = tilenorm::compare(outside, expected, tolerance);
  CHECK_FALSE(fail.ok());
  CHECK(fail.mismatches == 1);
  CHECK(fail.first_bad_index == 2);
  CHECK(fail.first_bad_actual == 101.2);
  CHECK(fail.first_bad_expected == 100.0);
  CHECK(fail.describe().find("first bad at 2") != std::string::npos);

  const std::vector<double> nan_expected = {1.0, nan};
  const std::vector<double> nan_actual = {1.0, nan};
  CHECK_FALSE(tilenorm::compare(nan_actual, nan_expected, tolerance).ok());
  const std::vector<double> nan_against_finite = {nan, 1.0};
  const std::vector<double> finite = {1.0, 1.0};
  const auto with_nan = tilenorm::compare(nan_against_finite, finite, {1e9, 1e9});
  CHECK_FALSE(with_nan.ok());
  CHECK(with_nan.first_bad_index == 0);
  const std::vector<double> wrong_infinity = {-inf};
  const std::vector<double> right_infinity = {inf};
  CHECK_FALSE(tilenorm::compare(wrong_infinity, right_infinity, {1e9, 1e9}).ok());

  const std::vector<double> shorter = {1.0, -2.0};
  CHECK_FALSE(tilenorm::compare(shorter, expected, tolerance).ok());
  CHECK_FALSE(tilenorm::compare({}, {}, tolerance).ok());  // nothing checked is no pass
}

TEST_CASE("reference: tolerances grow as the storage type narrows") {
  const auto fp32 = tilenorm::tolerance_for(DType::f32);
  const auto fp16 = tilenorm::tolerance_for(DType::f16);
  const auto bf16 = tilenorm::tolerance_for(DType::bf16);
  CHECK(fp32.atol < fp16.atol);
  CHECK(fp16.atol < bf16.atol);
  CHECK(fp32.rtol < fp16.rtol);
  CHECK(fp16.rtol < bf16.rtol);
  // Each covers one rounding to its own type (half an ulp relative to the value).
  CHECK(fp32.rtol >= 0x1p-24);
  CHECK(fp16.rtol >= 0x1p-11);
  CHECK(bf16.rtol >= 0x1p-8);
}
