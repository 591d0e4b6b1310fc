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

constexpr double kEps = 1e-5;

// fp64 against fp64: only the order of a few additions differs.
bool close(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-12 * (1.0 + std::fabs(expected));
}

std::size_t slot_of(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  REQUIRE_MESSAGE(it != names.end(), "no slot named ", name);
  return static_cast<std::size_t>(it - names.begin());
}

std::size_t stat_slot(const tilenorm::ir::Program& program, const std::string& name) {
  for (std::size_t i = 0; i < program.row_stats.size(); ++i) {
    if (program.row_stats[i].name == name) return i;
  }
  FAIL("no saved statistic named ", name);
  return 0;
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

  tilenorm::InterpreterInputs inputs_for(const tilenorm::ir::Program& program) const {
    tilenorm::InterpreterInputs inputs;
    inputs.rows = rows;
    inputs.cols = cols;
    inputs.row_inputs = {x};
    inputs.columns.resize(program.columns.size());
    for (std::size_t i = 0; i < program.columns.size(); ++i) {
      inputs.columns[i] = program.columns[i] == "weight" ? weight : bias;
    }
    inputs.scalars.assign(program.scalars.size(), 0.0);
    inputs.scalars[slot_of(program.scalars, "eps")] = kEps;
    return inputs;
  }
};

void check_layer_norm(const std::string& name, bool with_weight, bool with_bias) {
  CAPTURE(name);
  const auto& program = tilenorm::kernels::builtin_program(name);
  const NormCase data(7, 133, 11);
  const auto out = tilenorm::interpret(program, data.inputs_for(program));
  const auto& mean_out = out.row_stats[stat_slot(program, "mean")];
  const auto& rstd_out = out.row_stats[stat_slot(program, "rstd")];
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
      double y = (x[c] - mean) * rstd;
      if (with_weight) y *= data.weight[c];
      if (with_bias) y += data.bias[c];
      REQUIRE(close(out.row_outputs[0][row * data.cols + c], y));
    }
  }
}

void check_rms_norm(const std::string& name, bool with_weight) {
  CAPTURE(name);
  const auto& program = tilenorm::kernels::builtin_program(name);
  const NormCase data(6, 257, 23);
  const auto out = tilenorm::interpret(program, data.inputs_for(program));
  for (std::int64_t row = 0; row < data.rows; ++row) {
    const double* x = data.x.data() + row * data.cols;
    double squares = 0.0;
    for (std::int64_t c = 0; c < data.cols; ++c) squares += x[c] * x[c];
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(data.cols) + kEps);
    CHECK(close(out.row_stats[stat_slot(program, "rstd")][row], rstd));
    for (std::int64_t c = 0; c < data.cols; ++c) {
      const double y = x[c] * rstd * (with_weight ? data.weight[c] : 1.0);
      REQUIRE(close(out.row_outputs[0][row * data.cols + c], y));
    }
  }
}

// One input row of `cols` values per row; every output is computed elementwise from it.
tilenorm::InterpreterOutputs interpret_rows(const tilenorm::ir::Program& program,
                                            const std::vector<double>& x, std::int64_t cols) {
  tilenorm::InterpreterInputs inputs;
  inputs.cols = cols;
  inputs.rows = static_cast<std::int64_t>(x.size()) / cols;
  inputs.row_inputs = {x};
  return tilenorm::interpret(program, inputs);
}

std::string interpreter_error(const tilenorm::ir::Program& program,
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
    CHECK(one.row_stats[0][0] == all.row_stats[0][row]);
    CHECK(std::equal(one.row_outputs[0].begin(), one.row_outputs[0].end(),
                     all.row_outputs[0].begin() + row * data.cols));
  }
}

TEST_CASE("interpreter: zero rows give empty outputs") {
  const auto& program = tilenorm::kernels::builtin_program("layer_norm_no_affine");
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 0;
  inputs.cols = 16;
  inputs.row_inputs = {{}};
  inputs.scalars = {kEps};
  const auto out = tilenorm::interpret(program, inputs);
  REQUIRE(out.row_outputs.size() == 1);
  CHECK(out.row_outputs[0].empty());
  REQUIRE(out.row_stats.size() == 2);
  CHECK(out.row_stats[0].empty());
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
  CHECK(out.row_stats[0] == std::vector<double>{7.5, -0.5});
  CHECK(out.row_stats[1] == std::vector<double>{-3.0, -8.0});
  CHECK(out.row_outputs[0][0] == 0.0);
  CHECK(out.row_outputs[0][1] == 1.0);
  CHECK(out.row_outputs[0][3] == doctest::Approx(5.0 / 10.5));
  CHECK(out.row_outputs[0][7] == 0.0);
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
  CHECK(out.row_outputs[0] == std::vector<double>{1, 0, 0, 0});
  CHECK(out.row_outputs[1] == std::vector<double>{1, 1, 1, 0});
  CHECK(out.row_outputs[2] == std::vector<double>{0, 0, 0, 1});
  CHECK(out.row_outputs[3] == std::vector<double>{0, 1, 1, 1});
  CHECK(out.row_outputs[4] == std::vector<double>{-1.0, 1.0, 1.0, 6.0});
  CHECK(out.row_outputs[5] == std::vector<double>{-1.0, 1.0, 1.0, 1.0});
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
  CHECK(out.row_outputs[0] ==
        std::vector<double>{1.0, 1.0 + 0x1p-6, 1.0 + 0x1p-7, 1.0, 70144.0, 1.0});
  CHECK(out.row_outputs[1] ==
        std::vector<double>{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1.0 + 0x1p-8, 1.0, inf, 1.0});
  CHECK(out.row_outputs[2] == std::vector<double>{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8,
                                                  1.0 + 0x1p-8 + 0x1p-20, 1.0 + 0x1p-11, 70000.0,
                                                  1.0});
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
  });
  const std::vector<double> x = {-2.5, -0.75, 0.125, 1.0, 3.5, 9.0};
  const auto out = interpret_rows(program, x, 3);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(x[i]);
    const double magnitude = std::fabs(x[i]);
    CHECK(out.row_outputs[0][i] == doctest::Approx(std::exp(x[i])).epsilon(1e-15));
    CHECK(out.row_outputs[1][i] == doctest::Approx(std::log(magnitude)).epsilon(1e-15));
    CHECK(out.row_outputs[2][i] == doctest::Approx(std::tanh(x[i])).epsilon(1e-15));
    CHECK(out.row_outputs[3][i] == doctest::Approx(1.0 / (1.0 + std::exp(-x[i]))).epsilon(1e-15));
    CHECK(out.row_outputs[4][i] == magnitude);
    CHECK(out.row_outputs[5][i] == doctest::Approx(std::sqrt(magnitude)).epsilon(1e-15));
    CHECK(out.row_outputs[6][i] == doctest::Approx(1.0 / std::sqrt(magnitude)).epsilon(1e-15));
    CHECK(out.row_outputs[7][i] == -x[i]);
  }
}

TEST_CASE("interpreter: columns, scalars and the row length broadcast") {
  const auto program = tilenorm::dsl::make_program("broadcasts", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto s = p.scalar("s");
    auto n = p.row_length();
    p.save("sum_over_n", sum(x) / n);
    p.output("y", x * w + s);
  });
  tilenorm::InterpreterInputs inputs;
  inputs.rows = 2;
  inputs.cols = 3;
  inputs.row_inputs = {{1, 2, 3, 4, 5, 6}};
  inputs.columns = {{10, 100, 1000}};
  inputs.scalars = {0.5};
  const auto out = tilenorm::interpret(program, inputs);
  CHECK(out.row_stats[0] == std::vector<double>{2.0, 5.0});
  CHECK(out.row_outputs[0] == std::vector<double>{10.5, 200.5, 3000.5, 40.5, 500.5, 6000.5});
}

// ---- input checks

TEST_CASE("interpreter: inputs that do not match the declarations are rejected") {
  const auto& program = tilenorm::kernels::builtin_program("layer_norm");
  const NormCase data(2, 8, 3);
  const auto good = data.inputs_for(program);
  CHECK_NOTHROW(tilenorm::interpret(program, good));

  auto short_row = good;
  short_row.row_inputs[0].pop_back();
  CHECK(interpreter_error(program, short_row) ==
        "interpreter, program 'layer_norm': row input 'x' has the wrong size");

  auto long_column = good;
  long_column.columns[slot_of(program.columns, "bias")].push_back(0.0);
  CHECK(interpreter_error(program, long_column) ==
        "interpreter, program 'layer_norm': column 'bias' has the wrong size");

  auto missing_column = good;
  missing_column.columns.pop_back();
  CHECK(interpreter_error(program, missing_column) ==
        "interpreter, program 'layer_norm': wrong number of columns");

  auto extra_input = good;
  extra_input.row_inputs.push_back(good.row_inputs[0]);
  CHECK(interpreter_error(program, extra_input) ==
        "interpreter, program 'layer_norm': wrong number of row inputs");

  auto no_scalars = good;
  no_scalars.scalars.clear();
  CHECK(interpreter_error(program, no_scalars) ==
        "interpreter, program 'layer_norm': wrong number of scalars");

  auto no_cols = good;
  no_cols.cols = 0;
  CHECK(interpreter_error(program, no_cols) ==
        "interpreter, program 'layer_norm': needs rows >= 0 and cols >= 1");
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
