// Reverse-mode autodiff: every derivative rule against central finite differences in fp64,
// the derived LayerNorm and RMSNorm backward against the textbook formulas, and the shape of
// the derived programs (slots, names, modes, reduction phases).
#include "tilenorm/dsl/autodiff.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gradient_check.hpp"
#include "residual_rms_norm.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

namespace dsl = tilenorm::dsl;
namespace ir = tilenorm::ir;
using dsl::Grad;
using tilenorm::DType;
using tilenorm::StatisticsMode;

const std::vector<StatisticsMode> kBothModes = {StatisticsMode::saved, StatisticsMode::recompute};

// Every per-op program reads a row input x, a second row input z, a column w and a learned
// scalar alpha, and builds u = x * w + alpha and v = z * w - alpha from them, so that every
// slot gets a gradient through the operation under test.
#define OP_PROGRAM(name, ...)                    \
  [] {                                           \
    return dsl::make_program(name, [](auto& p) { \
      auto x = p.input("x");                     \
      auto z = p.input("z");                     \
      auto w = p.column("w");                    \
      auto alpha = p.scalar("alpha", Grad::yes); \
      auto u = x * w + alpha;                    \
      auto v = z * w - alpha;                    \
      (void)u;                                   \
      (void)v;                                   \
      __VA_ARGS__;                               \
    });                                          \
  }

// Where the inputs are drawn from. positive: x, z in [0.5, 1.5] and alpha 0.25, so u, v > 0
// (sqrt, log, rsqrt, pow). mixed: x, z of either sign with magnitude in [0.5, 1.5] and alpha
// 0.1, so u and v stay at least 0.15 away from 0 (abs).
enum class Domain { positive, mixed };

struct OpCase {
  const char* name;
  std::function<ir::Program()> build;
  Domain domain;
  // The operations the case exercises (to check that every rule is covered).
  std::vector<ir::Op> ops;
};

gradient_check::Problem make_problem(const ir::Program& forward, Domain domain, std::uint64_t seed,
                                     std::int64_t rows = 3, std::int64_t cols = 7) {
  gradient_check::Problem problem;
  problem.forward = forward;
  problem.inputs.rows = rows;
  problem.inputs.cols = cols;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.5, 1.5);
  std::bernoulli_distribution negative(0.5);
  for (const ir::Slot& slot : forward.slots) {
    problem.inputs.slots.emplace_back();
    if (slot.role != ir::Role::read) continue;
    auto& values = problem.inputs.slots.back();
    values.resize(tilenorm::slot_elements(slot.shape, rows, cols));
    for (double& v : values) {
      v = magnitude(rng);
      if (domain == Domain::mixed && slot.shape == ir::Shape::tile && negative(rng)) v = -v;
    }
    if (slot.name == "alpha") values = {domain == Domain::positive ? 0.25 : 0.1};
    if (slot.name == "eps") values = {1e-5};
  }
  gradient_check::random_incoming(problem, rng);
  return problem;
}

std::vector<OpCase> op_cases() {
  using ir::Op;
  return {
      // ---- one argument (times v: the product rule carries the adjoint in)
      {"neg", OP_PROGRAM("neg", p.output("y", -u * v)), Domain::mixed, {Op::neg}},
      {"abs", OP_PROGRAM("abs", p.output("y", abs(u) * v)), Domain::mixed, {Op::abs}},
      {"sqrt", OP_PROGRAM("sqrt", p.output("y", sqrt(u) * v)), Domain::positive, {Op::sqrt}},
      {"rsqrt", OP_PROGRAM("rsqrt", p.output("y", rsqrt(u) * v)), Domain::positive, {Op::rsqrt}},
      {"exp", OP_PROGRAM("exp", p.output("y", exp(u) * v)), Domain::mixed, {Op::exp}},
      {"log", OP_PROGRAM("log", p.output("y", log(u) * v)), Domain::positive, {Op::log}},
      {"tanh", OP_PROGRAM("tanh", p.output("y", tanh(u) * v)), Domain::mixed, {Op::tanh}},
      {"sigmoid",
       OP_PROGRAM("sigmoid", p.output("y", sigmoid(u) * v)),
       Domain::mixed,
       {Op::sigmoid}},
      // ---- two arguments, between Tiles and broadcast against every other shape
      {"add",
       OP_PROGRAM("add", p.output("y", (u + v) * u + (w + u) * v + mean(v) + u)),
       Domain::mixed,
       {Op::add}},
      {"sub",
       OP_PROGRAM("sub", p.output("y", (u - v) * u + (w - u) * v + (u - mean(v)) * u - alpha)),
       Domain::mixed,
       {Op::sub}},
      {"mul",
       OP_PROGRAM("mul", p.output("y", u * v * u + mean(v) * u + alpha * u * w)),
       Domain::mixed,
       {Op::mul}},
      {"div",
       OP_PROGRAM("div", p.output("y", u / v + mean(u) / v + w / u + v / alpha + 1.0 / u)),
       Domain::positive,
       {Op::div}},
      {"min",
       OP_PROGRAM("min", p.output("y", min(u, v) * u + min(w, v) + min(mean(u), v) * 2.0 +
                                           min(u * alpha, -0.2))),
       Domain::mixed,
       {Op::min}},
      {"max",
       OP_PROGRAM("max", p.output("y", max(u, v) * v + max(v, w) + max(u, mean(v)) * u +
                                           max(alpha * v, 0.3))),
       Domain::mixed,
       {Op::max}},
      {"pow_constant_exponent",
       OP_PROGRAM("pow_constant", p.output("y", pow(u, 2.5) * v + pow(v, -0.5) + pow(u, 3.0))),
       Domain::positive,
       {Op::pow}},
      {"pow_scalar_exponent",
       OP_PROGRAM("pow_scalar", p.output("y", pow(u, alpha) * v + pow(v, alpha + 1.0))),
       Domain::positive,
       {Op::pow}},
      {"pow_tile_exponent",
       OP_PROGRAM("pow_tile", p.output("y", pow(v, u) + pow(2.0, u) * v + pow(w, v))),
       Domain::positive,
       {Op::pow}},
      // Comparisons have a zero gradient: the values are 0 or 1 on either side.
      {"comparisons",
       OP_PROGRAM("comparisons", p.output("y", (u < v) * 3.0 + (u <= mean(v)) * u + (u > w) * v +
                                                   (u >= alpha) + u * 0.5)),
       Domain::mixed,
       {Op::less, Op::less_equal, Op::greater, Op::greater_equal}},
      {"select",
       OP_PROGRAM("select", p.output("y", where(u > v, u * u, v * 2.0) + where(w > 1.0, u, v) +
                                              where(u > 0.0, exp(u), u * alpha) +
                                              where(mean(u) > mean(v), u, 0.5))),
       Domain::mixed,
       {Op::select}},
      // ---- reductions along the row
      {"sum",
       OP_PROGRAM("sum", p.output("y", u * sum(u * v) + sum(v) * w)),
       Domain::mixed,
       {Op::reduce_sum}},
      {"mean",
       OP_PROGRAM("mean", auto centered = u - mean(u);
                  p.output("y", centered * rsqrt(mean(centered * centered) + 1.0) * v)),
       Domain::mixed,
       {Op::reduce_mean}},
      {"comoment",
       OP_PROGRAM("comoment", p.output("y", u * comoment(u, v * w) + comoment(v, v) * w +
                                                comoment(u, w) * alpha)),
       Domain::mixed,
       {Op::comoment}},
      {"max_reduce",
       OP_PROGRAM("max_reduce", p.output("y", exp(u - max(u)) * v + max(v * w))),
       Domain::mixed,
       {Op::reduce_max}},
      {"min_reduce",
       OP_PROGRAM("min_reduce", p.output("y", u * min(u * v) + exp(min(v) - v))),
       Domain::mixed,
       {Op::reduce_min}},
      // ---- saved statistics, read back in saved mode
      {"saved_statistics",
       OP_PROGRAM("saved", auto m = mean(u); auto s = max(v); p.save("m", m); p.save("s", s);
                  p.output("y", (u - m) * exp(v - s)); p.output("y2", u * sum(v))),
       Domain::mixed,
       {Op::reduce_mean, Op::reduce_max, Op::reduce_sum}},
  };
}

std::size_t slot_of(const ir::Program& program, const std::string& name) {
  const auto slot = program.find_slot(name);
  REQUIRE_MESSAGE(slot.has_value(), "no slot named ", name);
  return *slot;
}

// The gradients the backward program of a built-in norm writes, for the data of `problem`.
tilenorm::InterpreterOutputs built_in_gradients(const gradient_check::Problem& problem,
                                                const std::string& name) {
  const auto& backward = tilenorm::kernels::builtin_program(name);
  return tilenorm::interpret(backward, gradient_check::backward_inputs(problem, backward));
}

std::vector<std::string> slot_names(const ir::Program& program) {
  std::vector<std::string> names;
  for (const auto& slot : program.slots) names.push_back(slot.name);
  return names;
}

}  // namespace

// ---- every derivative rule against finite differences

TEST_CASE("autodiff: every derivative rule matches central finite differences") {
  const auto cases = op_cases();
  std::set<ir::Op> covered;
  int compared = 0;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const OpCase& op_case = cases[c];
    CAPTURE(op_case.name);
    const ir::Program forward = op_case.build();
    for (ir::Op op : op_case.ops) covered.insert(op);
    // The operation under test is really in the program.
    for (ir::Op op : op_case.ops) {
      const auto reachable = forward.reachable_nodes();
      CHECK(std::any_of(reachable.begin(), reachable.end(),
                        [&](ir::NodeId id) { return forward.graph->node(id).op == op; }));
    }
    const auto problem = make_problem(forward, op_case.domain, 1000 + c);
    compared += gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  }
  // x (21), z (21), w (7) and alpha (1), in two modes, per case.
  CHECK(compared == static_cast<int>(cases.size()) * 50 * 2);
  // Every operation with a derivative rule is covered, except the cast (tested below).
  for (std::size_t i = 0; i < ir::kOpCount; ++i) {
    const auto op = static_cast<ir::Op>(i);
    if (!ir::op_info(op).gradient || op == ir::Op::round_to) continue;
    CAPTURE(ir::op_name(op));
    CHECK(covered.count(op) == 1);
  }
}

TEST_CASE("autodiff: the finite-difference check catches a wrong gradient") {
  // The same machinery against a backward program that is off by a little: it must notice.
  const auto forward = OP_PROGRAM("tanh_check", p.output("y", tanh(u) * v))();
  auto problem = make_problem(forward, Domain::mixed, 7);
  const auto elements = gradient_check::all_elements(problem);
  const auto derived = gradient_check::derive(problem, StatisticsMode::recompute);
  int wrong = 0;
  for (const auto& element : elements) {
    const auto fd = gradient_check::finite_difference(problem, element);
    const double gradient = gradient_check::gradient_at(problem, derived, element);
    CHECK(std::fabs(gradient - fd.derivative) <= fd.tolerance);
    // An error of 1e-4 is well outside the tolerance.
    if (std::fabs(gradient + 1e-4 - fd.derivative) > fd.tolerance) ++wrong;
  }
  CHECK(wrong == static_cast<int>(elements.size()));
}

TEST_CASE("autodiff: a cast passes the gradient straight through") {
  // d cast(u) / du is taken to be 1 (a straight-through estimator): the gradient of the
  // program with the cast equals the finite differences of the same program without it.
  for (DType target : {DType::bf16, DType::f16, DType::f32}) {
    CAPTURE(tilenorm::dtype_name(target));
    ir::Program with_cast;
    if (target == DType::bf16) {
      with_cast = OP_PROGRAM("cast", p.output("y", cast<DType::bf16>(u) + u * v))();
    } else if (target == DType::f16) {
      with_cast = OP_PROGRAM("cast", p.output("y", cast<DType::f16>(u) + u * v))();
    } else {
      with_cast = OP_PROGRAM("cast", p.output("y", cast<DType::f32>(u) + u * v))();
    }
    const auto without_cast = OP_PROGRAM("cast", p.output("y", u + u * v))();
    REQUIRE(with_cast.hash() != without_cast.hash());
    const auto problem = make_problem(with_cast, Domain::mixed, 99);
    gradient_check::check(problem, {StatisticsMode::recompute},
                          gradient_check::all_elements(problem), &without_cast);
    // And the forward really rounds (for the 16-bit types): the check above is not trivial.
    if (target != DType::f32) {
      auto reference = problem;
      reference.forward = without_cast;
      CHECK(gradient_check::loss(problem, problem.inputs).value !=
            gradient_check::loss(reference, problem.inputs).value);
    }
  }
}

TEST_CASE("autodiff: gradients through several outputs and shared subexpressions add up") {
  const auto forward = dsl::make_program("shared_paths", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto b = p.column("b");
    auto t = tanh(x * w);
    p.output("y1", t * b);
    p.output("y2", t * t + sigmoid(x));
    p.output("y3", exp(-t) * mean(t));
  });
  const auto problem = make_problem(forward, Domain::mixed, 5, 4, 9);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  const auto backward = tilenorm::backward(forward);
  CHECK(slot_names(backward) ==
        std::vector<std::string>{"x", "w", "b", "dy1", "dy2", "dy3", "dx", "dw", "db"});
}

TEST_CASE("autodiff: the residual RMSNorm example's two outputs both reach x and residual") {
  const auto forward = residual_rms_norm(Grad::yes);
  const auto problem = make_problem(forward, Domain::mixed, 5, 4, 9);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  // Saved mode reads h back (one row) instead of x and residual (two).
  CHECK(slot_names(tilenorm::backward(forward)) ==
        std::vector<std::string>{"weight", "eps", "dh", "dy", "h", "dx", "dresidual", "dweight"});
  CHECK(slot_names(tilenorm::backward(forward, {.mode = StatisticsMode::recompute})) ==
        std::vector<std::string>{"x", "residual", "weight", "eps", "dh", "dy", "dx", "dresidual",
                                 "dweight"});
  // As the example declares it, the residual's gradient is dx's and is not written again.
  const auto example = residual_rms_norm();
  const auto example_problem = make_problem(example, Domain::mixed, 5, 4, 9);
  gradient_check::check(example_problem, kBothModes, gradient_check::all_elements(example_problem));
  CHECK(slot_names(tilenorm::backward(example)) ==
        std::vector<std::string>{"weight", "eps", "dh", "dy", "h", "dx", "dweight"});
}

TEST_CASE("autodiff: a saved maximum is recomputed, not read back") {
  // The gradient goes to the elements equal to the maximum. Read back, the fp64 maximum of
  // x * 0.5 / 1.25 matches no element of the lowered backward's x * 0.5 * 0.8 (found by the
  // random programs): every element would get 0 / 0.
  const auto forward = dsl::make_program("saved_max", [](auto& p) {
    auto x = p.input("x");
    auto scaled = x * 0.5 / 1.25;
    auto largest = max(scaled);
    auto m = mean(x);
    p.save("largest", largest);
    p.save("m", m);
    p.output("y", exp(scaled - largest) + m);
  });
  const auto problem = make_problem(forward, Domain::mixed, 9);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  CHECK(slot_names(tilenorm::backward(forward)) == std::vector<std::string>{"x", "dy", "dx"});
}

TEST_CASE("autodiff: saved mode reads a row output back only where that reads fewer rows") {
  // y = x * x: its gradient 2 x dy needs x whichever way, so reading y too would add a row.
  const auto square = dsl::make_program("square", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * x);
  });
  CHECK(slot_names(tilenorm::backward(square)) == std::vector<std::string>{"x", "dy", "dx"});
  // s = x + z carries y = s * s's gradient to both: one row s read back in place of two.
  const auto sum_squared = dsl::make_program("sum_squared", [](auto& p) {
    auto x = p.input("x");
    auto z = p.input("z");
    auto s = x + z;
    p.output("s", s);
    p.output("y", s * s);
  });
  const auto problem = make_problem(sum_squared, Domain::mixed, 7);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  CHECK(slot_names(tilenorm::backward(sum_squared)) ==
        std::vector<std::string>{"ds", "dy", "s", "dx", "dz"});
}

TEST_CASE("autodiff: a row input used only through a reduction gets a broadcast gradient") {
  // y = z * mean(x): dx = sum(dy * z) / N is the same for every element of a row.
  const auto forward = dsl::make_program("through_mean", [](auto& p) {
    auto x = p.input("x");
    auto z = p.input("z", Grad::no);
    p.output("y", z * mean(x));
  });
  const auto problem = make_problem(forward, Domain::mixed, 17);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  const auto backward = tilenorm::backward(forward);
  const auto& dx = backward.slots[slot_of(backward, "dx")];
  CHECK(dx.shape == ir::Shape::tile);
  CHECK(backward.graph->node(dx.value).shape == ir::Shape::row_scalar);
  CHECK_FALSE(backward.find_slot("dz").has_value());
}

// ---- the derived norms against the textbook formulas

namespace {

struct NormData {
  gradient_check::Problem problem;
  std::vector<double> x, dy, w;
  double eps = 1e-5;
  std::int64_t rows, cols;
};

NormData norm_data(const std::string& forward_name, std::int64_t rows, std::int64_t cols,
                   std::uint64_t seed) {
  NormData data;
  data.rows = rows;
  data.cols = cols;
  data.problem = make_problem(tilenorm::kernels::builtin_program(forward_name), Domain::mixed, seed,
                              rows, cols);
  auto& slots = data.problem.inputs.slots;
  const auto& forward = data.problem.forward;
  // x centered away from zero, weights of both signs, as in real use.
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.3, 1.5);
  for (double& v : slots[slot_of(forward, "x")]) v = normal(rng);
  data.x = slots[slot_of(forward, "x")];
  if (auto w = forward.find_slot("weight")) {
    for (double& v : slots[*w]) v = normal(rng);
    data.w = slots[*w];
  } else {
    data.w.assign(static_cast<std::size_t>(cols), 1.0);
  }
  data.dy = data.problem.incoming[slot_of(forward, "y")];
  return data;
}

bool close(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-10 * (1.0 + std::fabs(expected));
}

}  // namespace

TEST_CASE("autodiff: the derived LayerNorm backward is the textbook formula") {
  for (const char* name : {"layer_norm", "layer_norm_no_bias", "layer_norm_no_affine"}) {
    CAPTURE(name);
    const NormData data = norm_data(name, 5, 33, 21);
    const std::int64_t n = data.cols;
    std::vector<double> dx(data.x.size()), dw(n, 0.0), db(n, 0.0);
    for (std::int64_t r = 0; r < data.rows; ++r) {
      const double* x = data.x.data() + r * n;
      const double* dy = data.dy.data() + r * n;
      double mean = 0.0;
      for (std::int64_t c = 0; c < n; ++c) mean += x[c];
      mean /= static_cast<double>(n);
      double var = 0.0;
      for (std::int64_t c = 0; c < n; ++c) var += (x[c] - mean) * (x[c] - mean);
      var /= static_cast<double>(n);
      const double rstd = 1.0 / std::sqrt(var + data.eps);
      double mean_g = 0.0, mean_g_xhat = 0.0;
      for (std::int64_t c = 0; c < n; ++c) {
        const double g = dy[c] * data.w[c];
        const double xhat = (x[c] - mean) * rstd;
        mean_g += g / static_cast<double>(n);
        mean_g_xhat += g * xhat / static_cast<double>(n);
        dw[c] += dy[c] * xhat;
        db[c] += dy[c];
      }
      for (std::int64_t c = 0; c < n; ++c) {
        const double g = dy[c] * data.w[c];
        const double xhat = (x[c] - mean) * rstd;
        dx[r * n + c] = rstd * (g - mean_g - xhat * mean_g_xhat);
      }
    }
    for (const char* suffix : {"_backward", "_backward_recompute"}) {
      const std::string backward_name = std::string(name) + suffix;
      CAPTURE(backward_name);
      const auto& backward = tilenorm::kernels::builtin_program(backward_name);
      const auto out = built_in_gradients(data.problem, backward_name);
      const auto& got_dx = out.slots[slot_of(backward, "dx")];
      REQUIRE(got_dx.size() == dx.size());
      for (std::size_t i = 0; i < dx.size(); ++i) REQUIRE(close(got_dx[i], dx[i]));
      if (auto slot = backward.find_slot("dweight")) {
        for (std::int64_t c = 0; c < n; ++c) CHECK(close(out.slots[*slot][c], dw[c]));
      } else {
        CHECK(std::string(name) == "layer_norm_no_affine");
      }
      if (auto slot = backward.find_slot("dbias")) {
        for (std::int64_t c = 0; c < n; ++c) CHECK(close(out.slots[*slot][c], db[c]));
      } else {
        CHECK(std::string(name) != "layer_norm");
      }
    }
  }
}

TEST_CASE("autodiff: the derived RMSNorm backward is the textbook formula") {
  for (const char* name : {"rms_norm", "rms_norm_no_weight"}) {
    CAPTURE(name);
    const NormData data = norm_data(name, 6, 41, 31);
    const std::int64_t n = data.cols;
    std::vector<double> dx(data.x.size()), dw(n, 0.0);
    for (std::int64_t r = 0; r < data.rows; ++r) {
      const double* x = data.x.data() + r * n;
      const double* dy = data.dy.data() + r * n;
      double squares = 0.0;
      for (std::int64_t c = 0; c < n; ++c) squares += x[c] * x[c];
      const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(n) + data.eps);
      double mean_g_x = 0.0;
      for (std::int64_t c = 0; c < n; ++c) {
        mean_g_x += dy[c] * data.w[c] * x[c] / static_cast<double>(n);
        dw[c] += dy[c] * x[c] * rstd;
      }
      for (std::int64_t c = 0; c < n; ++c) {
        const double g = dy[c] * data.w[c];
        dx[r * n + c] = rstd * (g - x[c] * rstd * rstd * mean_g_x);
      }
    }
    for (const char* suffix : {"_backward", "_backward_recompute"}) {
      const std::string backward_name = std::string(name) + suffix;
      CAPTURE(backward_name);
      const auto& backward = tilenorm::kernels::builtin_program(backward_name);
      const auto out = built_in_gradients(data.problem, backward_name);
      const auto& got_dx = out.slots[slot_of(backward, "dx")];
      REQUIRE(got_dx.size() == dx.size());
      for (std::size_t i = 0; i < dx.size(); ++i) REQUIRE(close(got_dx[i], dx[i]));
      const auto dweight = backward.find_slot("dweight");
      CHECK(dweight.has_value() == (std::string(name) == "rms_norm"));
      if (dweight) {
        for (std::int64_t c = 0; c < n; ++c) CHECK(close(out.slots[*dweight][c], dw[c]));
      }
    }
  }
}

TEST_CASE("autodiff: the built-in backward kernels are the derivatives of the forward ones") {
  for (const char* name : {"layer_norm", "layer_norm_no_bias", "layer_norm_no_affine", "rms_norm",
                           "rms_norm_no_weight"}) {
    CAPTURE(name);
    const auto& forward = tilenorm::kernels::builtin_program(name);
    CHECK(tilenorm::kernels::builtin_program(std::string(name) + "_backward").hash() ==
          tilenorm::backward(forward, {StatisticsMode::saved}).hash());
    CHECK(tilenorm::kernels::builtin_program(std::string(name) + "_backward_recompute").hash() ==
          tilenorm::backward(forward, {StatisticsMode::recompute}).hash());
    const NormData data = norm_data(name, 3, 12, 41);
    gradient_check::check(data.problem, kBothModes, gradient_check::all_elements(data.problem));
  }
}

TEST_CASE(
    "autodiff: the LayerNorm and RMSNorm backward need one reduction phase with saved "
    "statistics") {
  const auto layer_norm = tilenorm::lower(tilenorm::backward(
      tilenorm::kernels::builtin_program("layer_norm"), {StatisticsMode::saved}));
  REQUIRE(layer_norm.reduction_phases.size() == 1);
  CHECK(layer_norm.reduction_phases[0].size() == 2);   // sum(g) and sum(g * xhat)
  CHECK(layer_norm.cross_row_reductions.size() == 2);  // dweight and dbias
  const auto rms_norm = tilenorm::lower(
      tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"), {StatisticsMode::saved}));
  REQUIRE(rms_norm.reduction_phases.size() == 1);
  CHECK(rms_norm.reduction_phases[0].size() == 1);   // sum(g * x)
  CHECK(rms_norm.cross_row_reductions.size() == 1);  // dweight
  // Recomputing the statistics costs the forward's phases (without co-moments, which
  // fuse_moments keeps out of backwards), and no more.
  const auto layer_norm_recompute = tilenorm::lower(tilenorm::backward(
      tilenorm::kernels::builtin_program("layer_norm"), {StatisticsMode::recompute}));
  CHECK(layer_norm_recompute.reduction_phases.size() == 2);
  const auto rms_norm_recompute = tilenorm::lower(tilenorm::backward(
      tilenorm::kernels::builtin_program("rms_norm"), {StatisticsMode::recompute}));
  CHECK(rms_norm_recompute.reduction_phases.size() == 1);
}

// ---- the shape of the derived programs

TEST_CASE("autodiff: the backward reads what it needs and writes one gradient per Grad::yes slot") {
  const auto& layer_norm = tilenorm::kernels::builtin_program("layer_norm");
  const auto saved = tilenorm::backward(layer_norm, {StatisticsMode::saved});
  // eps is not needed once rstd is read back, and bias only shifts y.
  CHECK(slot_names(saved) ==
        std::vector<std::string>{"x", "weight", "dy", "mean", "rstd", "dx", "dweight", "dbias"});
  const auto recompute = tilenorm::backward(layer_norm, {StatisticsMode::recompute});
  CHECK(slot_names(recompute) ==
        std::vector<std::string>{"x", "eps", "weight", "dy", "dx", "dweight", "dbias"});
  for (const auto* program : {&saved, &recompute}) {
    CAPTURE(program->name);
    for (const auto& slot : program->slots) {
      CAPTURE(slot.name);
      CHECK_FALSE(slot.needs_grad);
      const bool is_gradient = slot.name == "dx" || slot.name == "dweight" || slot.name == "dbias";
      CHECK((slot.role == ir::Role::written) == is_gradient);
    }
  }
  const auto& mean_slot = saved.slots[slot_of(saved, "mean")];
  CHECK(mean_slot.shape == ir::Shape::row_scalar);
  CHECK(mean_slot.dtype == DType::f32);
  CHECK(saved.slots[slot_of(saved, "dx")].shape == ir::Shape::tile);
  CHECK(saved.slots[slot_of(saved, "dweight")].shape == ir::Shape::column);
  CHECK(saved.slots[slot_of(saved, "dy")].shape == ir::Shape::tile);
  CHECK(tilenorm::gradient_name("weight") == "dweight");
  CHECK(tilenorm::statistics_mode_name(StatisticsMode::saved) == "saved");
  CHECK(tilenorm::statistics_mode_name(StatisticsMode::recompute) == "recompute");
}

TEST_CASE(
    "autodiff: gradients take the dtype of their slot, incoming gradients that of the "
    "output") {
  const auto forward = dsl::make_program("typed", [](auto& p) {
    auto x = p.input("x", Grad::yes, DType::f32);
    auto z = p.input("z");
    auto w = p.column("w", Grad::yes, DType::bf16);
    auto b = p.column("b");
    auto alpha = p.scalar("alpha", Grad::yes);
    auto eps = p.scalar("eps");
    p.output("y", x * w + z * b * alpha + eps, DType::f16);
  });
  const auto backward = tilenorm::backward(forward);
  auto slot = [&](const char* name) -> const ir::Slot& {
    return backward.slots[slot_of(backward, name)];
  };
  CHECK(slot("dx").dtype == DType::f32);
  CHECK(slot("dz").dtype == std::nullopt);
  CHECK(slot("dw").dtype == DType::bf16);
  CHECK(slot("db").dtype == std::nullopt);
  CHECK(slot("dalpha").dtype == DType::f32);
  CHECK(slot("dalpha").shape == ir::Shape::scalar);
  CHECK(slot("dy").dtype == DType::f16);
  CHECK(slot("dy").role == ir::Role::read);
  CHECK_FALSE(backward.find_slot("deps").has_value());
  // eps only shifts y: its value is not needed for any gradient.
  CHECK_FALSE(backward.find_slot("eps").has_value());
  const auto problem = make_problem(forward, Domain::mixed, 3);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
}

TEST_CASE(
    "autodiff: Grad::no slots get no gradient, and an output nothing flows into is "
    "dropped") {
  const auto forward = dsl::make_program("partial", [](auto& p) {
    auto x = p.input("x");
    auto z = p.input("z", Grad::no);
    auto w = p.column("w", Grad::no);
    p.output("y", x * w + z);
    p.output("side", z * w);  // depends on no Grad::yes slot
  });
  const auto backward = tilenorm::backward(forward, {StatisticsMode::recompute});
  // dx = dy * w: neither x nor z is read, nor the incoming gradient of `side`.
  CHECK(slot_names(backward) == std::vector<std::string>{"w", "dy", "dx"});
  const auto problem = make_problem(forward, Domain::mixed, 11);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
}

TEST_CASE("autodiff: without saved statistics both modes derive the same program") {
  const auto forward = OP_PROGRAM("plain", p.output("y", tanh(u) * mean(v)))();
  const auto saved = tilenorm::backward(forward, {StatisticsMode::saved});
  const auto recompute = tilenorm::backward(forward, {StatisticsMode::recompute});
  CHECK(saved.name == "plain_backward");
  CHECK(recompute.name == "plain_backward_recompute");
  auto renamed = saved;
  renamed.name = recompute.name;
  CHECK(renamed.hash() == recompute.hash());
  // Deterministic.
  CHECK(tilenorm::backward(forward).hash() == saved.hash());
}

TEST_CASE("autodiff: with saved statistics the backward reads them instead of recomputing") {
  const auto& rms_norm = tilenorm::kernels::builtin_program("rms_norm");
  const auto saved = tilenorm::lower(tilenorm::backward(rms_norm, {StatisticsMode::saved}));
  const auto recompute = tilenorm::lower(tilenorm::backward(rms_norm, {StatisticsMode::recompute}));
  auto counts = [](const tilenorm::LoweredProgram& lowered) {
    int reductions = 0, rsqrts = 0;
    for (ir::NodeId id : lowered.program.reachable_nodes()) {
      const auto op = lowered.program.graph->node(id).op;
      reductions += ir::is_reduction(op);
      rsqrts += op == ir::Op::rsqrt;
    }
    return std::pair{reductions, rsqrts};
  };
  CHECK(counts(saved) == std::pair{2, 0});      // sum(g * x), and dweight across rows
  CHECK(counts(recompute) == std::pair{3, 1});  // plus mean(x * x), and its rsqrt
}

TEST_CASE(
    "autodiff: the backward of a program with Column and Scalar gradients is a valid "
    "two-kernel program") {
  const auto forward = OP_PROGRAM("everything", p.output("y", u * v))();
  const auto backward = tilenorm::lower(tilenorm::backward(forward));
  std::set<std::string> written;
  for (const auto& slot : backward.program.slots)
    if (slot.role == ir::Role::written) written.insert(slot.name);
  CHECK(written == std::set<std::string>{"dx", "dz", "dw", "dalpha"});
  // dw is a sum across rows; dalpha a sum along the row, then across rows.
  int column_sums = 0, scalar_sums = 0;
  for (ir::NodeId r : backward.cross_row_reductions) {
    const auto shape = backward.program.graph->node(r).shape;
    column_sums += shape == ir::Shape::column;
    scalar_sums += shape == ir::Shape::scalar;
  }
  CHECK(column_sums == 1);
  CHECK(scalar_sums == 1);
}

// When no gradient reaches any Grad::yes slot (here x is only compared), backward() says so
// instead of returning a program that reads nothing.
TEST_CASE("autodiff: a backward whose gradients are all zero is reported") {
  const auto step = dsl::make_program("step", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w", Grad::no);
    p.output("y", (x > 0.5) * w);
  });
  CHECK_THROWS_WITH_AS(tilenorm::backward(step, {StatisticsMode::recompute}),
                       "program 'step': every gradient is identically zero (no Grad::yes slot is "
                       "on a path from an output that carries a gradient), so there is nothing to "
                       "compute",
                       tilenorm::ProgramError);
  // And the finite differences agree: they are zero.
  const auto problem = make_problem(step, Domain::mixed, 1);
  gradient_check::check(problem, {StatisticsMode::recompute},
                        gradient_check::all_elements(problem));
}

// The sum and mean rules hand their argument a RowScalar adjoint that stands for the same
// value at every element of the row. An operand that does not vary along the row (a Scalar or
// RowScalar broadcast into the Tile) must get the sum over the row's N elements. Here
// d/dalpha of sum(dy * x * mean(x + alpha)) is sum(dy * x) over everything (a bug found by the
// random programs once gave a Nth of it); the same holds for d/dx through mean(w - mean(x)).
TEST_CASE(
    "autodiff: an operand broadcast along the row inside a sum or mean gets the full "
    "gradient") {
  const auto shifted = dsl::make_program("shifted_mean", [](auto& p) {
    auto x = p.input("x");
    auto alpha = p.scalar("alpha", Grad::yes);
    p.output("y", x * mean(x + alpha));
  });
  const auto problem = make_problem(shifted, Domain::mixed, 2);
  gradient_check::check(problem, kBothModes, gradient_check::all_elements(problem));
  // By hand: dL/dalpha = sum(dy * x).
  const auto derived = gradient_check::derive(problem, StatisticsMode::recompute);
  double expected = 0.0;
  const auto& x = problem.inputs.slots[slot_of(shifted, "x")];
  const auto& dy = problem.incoming[slot_of(shifted, "y")];
  for (std::size_t i = 0; i < x.size(); ++i) expected += dy[i] * x[i];
  CHECK(gradient_check::gradient_at(problem, derived, {slot_of(shifted, "alpha"), 0}) ==
        doctest::Approx(expected).epsilon(1e-12));

  const auto nested = dsl::make_program("nested_mean", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w", Grad::no);
    p.output("y", x * mean(w - mean(x)));
  });
  const auto nested_problem = make_problem(nested, Domain::mixed, 3);
  gradient_check::check(nested_problem, kBothModes, gradient_check::all_elements(nested_problem));
}
