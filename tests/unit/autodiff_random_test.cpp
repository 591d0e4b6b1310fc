// Autodiff on randomly generated programs: a seeded generator of valid forward programs over
// the whole language (elementwise ops, selects, comparisons, pow, constants, Columns, learned
// Scalars, reductions along the row, saved statistics), each differentiated in both modes and
// checked against central finite differences in fp64. Every program is also lowered (forward
// and backward) and must compute the same as before lowering.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.hpp"
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace {

namespace ir = tilenorm::ir;
using ir::NodeId;
using ir::Op;
using ir::Role;
using ir::Shape;
using tilenorm::StatisticsMode;

constexpr std::int64_t kRows = 3;
constexpr std::int64_t kCols = 7;

// Builds one random program. Every value carries a bound on its magnitude; when a bound grows
// past kSquash the value goes through tanh, so values (and their derivatives) stay moderate.
// Operations with a restricted domain get arguments made to fit it (sqrt(abs(a) + 1),
// log(1 + sigmoid(a)), pow(abs(a) + 0.5, k), a / (b * b + 1)), so every value is finite.
class ProgramGenerator {
 public:
  explicit ProgramGenerator(std::uint64_t seed) : rng_(seed) {}

  struct Generated {
    ir::Program program;
    std::vector<std::string> features;  // what it contains, for the coverage tally
  };

  Generated generate(const std::string& name) {
    program_ = ir::Program{name, std::make_shared<ir::Graph>(), {}};
    pool_.clear();
    features_.clear();
    reductions_ = 0;
    ir::Graph& g = graph();

    // Slots: x always needs a gradient; w, alpha and the frozen scalar c vary.
    const NodeId x = read("x", Shape::tile, true, 2.0);
    const bool w_grad = chance(0.8);
    read("w", Shape::column, w_grad, 1.5);
    const bool alpha_grad = chance(0.7);
    const NodeId alpha = read("alpha", Shape::scalar, alpha_grad, 1.5);
    if (chance(0.3)) read("c", Shape::scalar, false, 1.5);  // a frozen scalar
    if (w_grad) feature("column gradient");
    if (alpha_grad) feature("scalar gradient");
    x_ = x;
    x_bound_ = 2.0;
    // Sometimes a residual stream: h = x + r is written out and stands in for both rows, so that
    // saved mode may read h back in place of them.
    std::optional<NodeId> stream;
    if (chance(0.15)) {
      const NodeId r = read("r", Shape::tile, chance(0.5), 2.0);
      std::erase_if(pool_, [&](const Value& v) { return v.id == x || v.id == r; });
      x_ = g.binary(Op::add, x, r);
      x_bound_ = 4.0;
      pool_.push_back({x_, x_bound_});
      stream = x_;
      feature("residual stream");
    }
    alpha_ = alpha;
    for (double value : {0.5, -0.75, 2.0}) pool_.push_back({g.constant(value), std::fabs(value)});

    const int steps = uniform_int(3, 12);
    for (int step = 0; step < steps; ++step) grow();

    // The outputs: the newest value as y, and sometimes another one as y2 (as Tiles).
    NodeId y = as_tile(pool_.back().id);
    std::vector<std::pair<std::string, NodeId>> outputs = {{"y", y}};
    if (stream) {
      outputs.push_back({"h", *stream});
    } else if (chance(0.3)) {
      outputs.push_back({"y2", as_tile(pick().id)});
      feature("two outputs");
    }
    // Every read slot must be used: add the unused ones to y.
    const std::vector<bool> used = used_slots(outputs);
    for (std::size_t i = 0; i < program_.slots.size(); ++i) {
      if (used[i]) continue;
      const NodeId load = g.load(program_.slots[i].shape, static_cast<std::int32_t>(i));
      outputs[0].second =
          g.binary(Op::add, outputs[0].second, g.binary(Op::mul, g.constant(0.25), load));
    }
    // Sometimes save a per-row statistic (a RowScalar of the pool).
    std::vector<NodeId> row_scalars;
    for (const auto& v : pool_)
      if (g.node(v.id).shape == Shape::row_scalar) row_scalars.push_back(v.id);
    if (!row_scalars.empty() && chance(0.6)) {
      program_.slots.push_back(
          {"stat", Role::written, Shape::row_scalar, tilenorm::DType::f32,
           row_scalars[uniform_int(0, static_cast<int>(row_scalars.size()) - 1)], false});
      feature("saved statistic");
    }
    for (const auto& [output_name, value] : outputs)
      program_.slots.push_back({output_name, Role::written, Shape::tile, {}, value, false});
    return {program_, features_};
  }

 private:
  struct Value {
    NodeId id;
    double bound;
  };
  static constexpr double kSquash = 30.0;

  ir::Graph& graph() { return *program_.graph; }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int uniform_int(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  void feature(const std::string& name) { features_.push_back(name); }

  NodeId read(const std::string& name, Shape shape, bool needs_grad, double bound) {
    const auto slot = static_cast<std::int32_t>(program_.slots.size());
    program_.slots.push_back({name, Role::read, shape, {}, 0, needs_grad});
    const NodeId id = graph().load(shape, slot);
    pool_.push_back({id, bound});
    return id;
  }

  // A pool value, favouring recent ones so that programs grow deep as well as wide.
  Value pick() {
    const int n = static_cast<int>(pool_.size());
    const int a = uniform_int(0, n - 1);
    const int b = uniform_int(0, n - 1);
    return pool_[std::max(a, b)];
  }
  Value pick_varying() {  // a value that varies along the row (a Tile or a Column)
    for (int tries = 0; tries < 20; ++tries) {
      const Value v = pick();
      if (graph().node(v.id).shape == Shape::tile) return v;
    }
    return {x_, x_bound_};
  }

  void add(NodeId id, double bound) {
    if (bound > kSquash) {
      id = graph().unary(Op::tanh, id);
      bound = 1.0;
    }
    pool_.push_back({id, bound});
  }

  NodeId c(double value) { return graph().constant(value); }
  NodeId un(Op op, NodeId a) { return graph().unary(op, a); }
  NodeId bin(Op op, NodeId a, NodeId b) { return graph().binary(op, a, b); }

  void grow() {
    ir::Graph& g = graph();
    const int kind = uniform_int(0, 99);
    if (kind < 36) {  // one argument
      const Value a = pick();
      switch (uniform_int(0, 9)) {
        case 0:
          feature("neg");
          return add(un(Op::neg, a.id), a.bound);
        case 1:
          feature("tanh");
          return add(un(Op::tanh, a.id), 1.0);
        case 2:
          feature("sigmoid");
          return add(un(Op::sigmoid, a.id), 1.0);
        case 3:
          feature("exp");
          return add(un(Op::exp, un(Op::tanh, a.id)), std::exp(1.0));
        case 4:
          feature("log");
          return add(un(Op::log, bin(Op::add, c(1.0), un(Op::sigmoid, a.id))), 1.0);
        case 5:
          feature("sqrt");
          feature("abs");
          return add(un(Op::sqrt, bin(Op::add, un(Op::abs, a.id), c(1.0))),
                     std::sqrt(a.bound + 1.0));
        case 6:
          feature("rsqrt");
          return add(un(Op::rsqrt, bin(Op::add, bin(Op::mul, a.id, a.id), c(1.0))), 1.0);
        case 7:
          feature("pow constant exponent");
          return add(bin(Op::pow, bin(Op::add, un(Op::abs, a.id), c(0.5)), c(1.5)),
                     std::pow(a.bound + 0.5, 1.5));
        case 8:
          feature("pow scalar exponent");
          return add(bin(Op::pow, bin(Op::add, un(Op::sigmoid, a.id), c(0.5)), alpha_), 2.25);
        default:
          feature("pow tile exponent");
          return add(
              bin(Op::pow, bin(Op::add, un(Op::sigmoid, a.id), c(0.5)), un(Op::tanh, pick().id)),
              2.0);
      }
    }
    if (kind < 76) {  // two arguments
      const Value a = pick();
      const Value b = pick();
      switch (uniform_int(0, 7)) {
        case 0:
          feature("add");
          return add(bin(Op::add, a.id, b.id), a.bound + b.bound);
        case 1:
          feature("sub");
          return add(bin(Op::sub, a.id, b.id), a.bound + b.bound);
        case 2:
        case 3:
          feature("mul");
          return add(bin(Op::mul, a.id, b.id), a.bound * b.bound);
        case 4:
          feature("div");
          return add(bin(Op::div, a.id, bin(Op::add, bin(Op::mul, b.id, b.id), c(1.0))), a.bound);
        case 5:
          feature("min");
          return add(bin(Op::min, a.id, b.id), std::max(a.bound, b.bound));
        case 6:
          feature("max");
          return add(bin(Op::max, a.id, b.id), std::max(a.bound, b.bound));
        default: {
          static constexpr Op kComparisons[] = {Op::less, Op::less_equal, Op::greater,
                                                Op::greater_equal};
          feature("comparison");
          // A comparison alone has no gradient; scale something by it.
          const NodeId mask = bin(kComparisons[uniform_int(0, 3)], a.id, b.id);
          const Value d = pick();
          return add(bin(Op::mul, mask, d.id), d.bound);
        }
      }
    }
    if (kind < 88) {  // select
      static constexpr Op kComparisons[] = {Op::less, Op::greater};
      feature("select");
      const Value a = pick();
      const Value b = pick();
      const Value t = pick();
      const Value f = pick();
      return add(g.select(bin(kComparisons[uniform_int(0, 1)], a.id, b.id), t.id, f.id),
                 std::max(t.bound, f.bound));
    }
    // A reduction along the row (at most two per program).
    if (reductions_ >= 2) return grow();
    ++reductions_;
    const Value a = pick_varying();
    static constexpr Op kReductions[] = {Op::reduce_sum, Op::reduce_mean, Op::reduce_max,
                                         Op::reduce_min};
    const Op op = kReductions[uniform_int(0, 3)];
    feature(std::string(ir::op_name(op)));
    return add(g.reduce(op, a.id), op == Op::reduce_sum ? a.bound * kCols : a.bound);
  }

  NodeId as_tile(NodeId id) {
    const Shape shape = graph().node(id).shape;
    if (shape == Shape::tile) return id;
    return chance(0.5) ? bin(Op::mul, id, x_) : bin(Op::add, id, x_);
  }

  std::vector<bool> used_slots(const std::vector<std::pair<std::string, NodeId>>& outputs) {
    ir::Program probe = program_;
    for (const auto& [name, value] : outputs)
      probe.slots.push_back({name, Role::written, Shape::tile, {}, value, false});
    std::vector<bool> used(program_.slots.size(), false);
    for (NodeId id : probe.reachable_nodes()) {
      const ir::Node& n = probe.graph->node(id);
      if (n.op == Op::load) used[static_cast<std::size_t>(n.index)] = true;
    }
    return used;
  }

  std::mt19937_64 rng_;
  ir::Program program_;
  std::vector<Value> pool_;
  std::vector<std::string> features_;
  int reductions_ = 0;
  NodeId x_ = 0;  // x, or the residual stream x + r
  double x_bound_ = 2.0;
  NodeId alpha_ = 0;
};

gradient_check::Problem random_problem(const ir::Program& forward, std::mt19937_64& rng) {
  gradient_check::Problem problem;
  problem.forward = forward;
  problem.inputs.rows = kRows;
  problem.inputs.cols = kCols;
  // Continuous random values: ties (max, min, comparisons) have probability zero.
  std::uniform_real_distribution<double> tile(-2.0, 2.0), positive(0.5, 1.5);
  for (const ir::Slot& slot : forward.slots) {
    problem.inputs.slots.emplace_back();
    if (slot.role != Role::read) continue;
    auto& values = problem.inputs.slots.back();
    values.resize(tilenorm::slot_elements(slot.shape, kRows, kCols));
    for (double& v : values) v = slot.shape == Shape::tile ? tile(rng) : positive(rng);
  }
  gradient_check::random_incoming(problem, rng);
  return problem;
}

// A few random elements of each slot that needs a gradient: 3 of x, 2 of w, the scalar.
std::vector<gradient_check::Element> random_elements(const gradient_check::Problem& problem,
                                                     std::mt19937_64& rng) {
  std::vector<gradient_check::Element> elements;
  for (std::size_t i = 0; i < problem.forward.slots.size(); ++i) {
    const ir::Slot& slot = problem.forward.slots[i];
    if (slot.role != Role::read || !slot.needs_grad) continue;
    const int count = slot.shape == Shape::tile ? 3 : slot.shape == Shape::column ? 2 : 1;
    std::uniform_int_distribution<std::size_t> index(0, problem.inputs.slots[i].size() - 1);
    for (int k = 0; k < count; ++k) elements.push_back({i, index(rng)});
  }
  return elements;
}

// Whether tilenorm::backward mis-scales a gradient of `forward` because of the known bug
// reported in autodiff_test.cpp ("an operand broadcast along the row inside a sum or mean
// gets the full gradient"): an operand that does not vary along the row receives, from a node
// that does, a contribution that does not vary along the row either, and nothing else makes
// its adjoint vary along the row, so the sum over the row's N elements is lost.
//
// Mirrors the shapes of the contributions the derivative rules make (ops.cpp), on the
// simplified forward program that backward() differentiates.
bool loses_broadcast_sum(const ir::Program& original) {
  const ir::Program forward = tilenorm::passes::cse(tilenorm::passes::simplify(original));
  const ir::Graph& g = *forward.graph;
  const std::vector<NodeId> order = forward.reachable_nodes();
  std::vector<bool> needs(g.size(), false);
  for (NodeId id : order) {
    const ir::Node& n = g.node(id);
    if (n.op == Op::load) needs[id] = forward.slots[static_cast<std::size_t>(n.index)].needs_grad;
    for (int i = 0; i < n.arity; ++i) needs[id] = needs[id] || needs[n.args[i]];
  }
  std::vector<std::optional<Shape>> adjoint(g.size());
  std::vector<bool> short_contribution(g.size(), false);
  for (const ir::Slot& slot : forward.slots) {
    if (slot.role == Role::written && slot.shape == Shape::tile && needs[slot.value])
      adjoint[slot.value] = Shape::tile;
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& n = g.node(*it);
    if (!adjoint[*it] || n.arity == 0) continue;
    const Shape a = *adjoint[*it];
    const Shape self = n.shape;
    auto arg = [&](int i) { return g.node(n.args[i]).shape; };
    std::vector<std::pair<int, Shape>> contributions;
    switch (n.op) {
      case Op::neg:
      case Op::round_to:
        contributions = {{0, a}};
        break;
      case Op::abs:
      case Op::log:
        contributions = {{0, a | arg(0)}};
        break;
      case Op::sqrt:
      case Op::rsqrt:
      case Op::exp:
      case Op::tanh:
      case Op::sigmoid:
        contributions = {{0, a | self}};
        break;
      case Op::add:
      case Op::sub:
        contributions = {{0, a}, {1, a}};
        break;
      case Op::mul:
        contributions = {{0, a | arg(1)}, {1, a | arg(0)}};
        break;
      case Op::div:
        contributions = {{0, a | arg(1)}, {1, a | self | arg(1)}};
        break;
      case Op::min:
      case Op::max:
        contributions = {{0, a | arg(0) | arg(1)}, {1, a | arg(0) | arg(1)}};
        break;
      case Op::pow:
        contributions = {{0, a | arg(0) | arg(1)}, {1, a | self | arg(0)}};
        break;
      case Op::select:
        contributions = {{1, a | arg(0)}, {2, a | arg(0)}};
        break;
      case Op::reduce_sum:
      case Op::reduce_mean:
        contributions = {{0, self}};
        break;
      case Op::reduce_max:
      case Op::reduce_min:
        contributions = {{0, arg(0) | self}};
        break;
      default:  // comparisons: no gradient
        break;
    }
    for (const auto& [i, shape] : contributions) {
      const NodeId target = n.args[i];
      if (!needs[target]) continue;
      adjoint[target] = adjoint[target] ? (*adjoint[target] | shape) : shape;
      if (!ir::is_reduction(n.op) && ir::varies_along_row(self) && !ir::varies_along_row(shape))
        short_contribution[target] = true;
    }
  }
  for (NodeId id : order) {
    if (short_contribution[id] && !ir::varies_along_row(g.node(id).shape) &&
        !ir::varies_along_row(*adjoint[id]))
      return true;
  }
  return false;
}

constexpr int kPrograms = 1200;

}  // namespace

TEST_CASE("autodiff: random programs match finite differences in both modes") {
  std::map<std::string, int> tally;
  int compared = 0, with_saved = 0, with_read_back = 0, affected = 0;
  std::mt19937_64 data_rng(2024);
  for (int i = 0; i < kPrograms; ++i) {
    CAPTURE(i);
    ProgramGenerator generator(static_cast<std::uint64_t>(i) * 7919 + 1);
    auto generated = generator.generate("random_" + std::to_string(i));
    for (const auto& f : generated.features) ++tally[f];
    const ir::Program& forward = generated.program;
    INFO("forward:\n", forward.to_string());
    REQUIRE_NOTHROW(tilenorm::passes::verify(forward));
    const auto problem = random_problem(forward, data_rng);
    // The forward's values are finite (the generator's bounds hold). Folding constants in fp32
    // changes them by fp32 rounding; the passes after it only reorder fp64 rounding.
    const auto values = tilenorm::interpret(forward, problem.inputs);
    const auto folded = tilenorm::passes::cse(tilenorm::passes::simplify(forward));
    const auto folded_values = tilenorm::interpret(folded, problem.inputs);
    const auto lowered_values =
        tilenorm::interpret(tilenorm::lower(forward).program, problem.inputs);
    for (std::size_t s = 0; s < forward.slots.size(); ++s) {
      if (forward.slots[s].role != Role::written) continue;
      for (std::size_t k = 0; k < values.slots[s].size(); ++k) {
        REQUIRE(std::isfinite(values.slots[s][k]));
        REQUIRE(std::fabs(values.slots[s][k]) < 1e6);
        CHECK(gradient_check::close(folded_values.slots[s][k], values.slots[s][k], 1e-5));
        CHECK(gradient_check::close(lowered_values.slots[s][k], folded_values.slots[s][k], 1e-9));
      }
    }
    // Programs that broadcast an operand along the row inside a sum or mean (a bug found and
    // fixed here: their gradients came out N times too small) are counted, and checked like
    // every other.
    if (loses_broadcast_sum(forward)) ++affected;
    std::vector<StatisticsMode> modes = {StatisticsMode::recompute};
    const bool saves = gradient_check::saves_statistics(forward);
    const bool reads_back = gradient_check::reads_row_output_back(forward);
    if (saves || reads_back) modes.push_back(StatisticsMode::saved);
    with_saved += saves;
    with_read_back += reads_back;
    compared += gradient_check::check(problem, modes, random_elements(problem, data_rng));
  }
  MESSAGE(gradient_check::zero_gradient_programs()
          << " programs had only identically-zero gradients (reported by backward())");
  std::string coverage;
  for (const auto& [name, count] : tally) coverage += name + "=" + std::to_string(count) + " ";
  MESSAGE(kPrograms << " programs, " << affected << " broadcasting inside a sum, " << with_saved
                    << " with a saved statistic, " << with_read_back
                    << " reading a row output back, " << compared << " gradients compared; "
                    << coverage);
  CHECK(affected > 0);  // the generator still reaches the case
  // The generator reaches the whole language.
  for (const char* f : {"neg",
                        "tanh",
                        "sigmoid",
                        "exp",
                        "log",
                        "sqrt",
                        "abs",
                        "rsqrt",
                        "pow constant exponent",
                        "pow scalar exponent",
                        "pow tile exponent",
                        "add",
                        "sub",
                        "mul",
                        "div",
                        "min",
                        "max",
                        "comparison",
                        "select",
                        "sum",
                        "mean",
                        "max_reduce",
                        "min_reduce",
                        "saved statistic",
                        "two outputs",
                        "residual stream",
                        "column gradient",
                        "scalar gradient"}) {
    CAPTURE(f);
    CHECK(tally[f] >= 20);
  }
  CHECK(with_saved >= 100);
  CHECK(with_read_back > 0);  // saved mode's row outputs read back
  CHECK(compared >= kPrograms * 5);
}

TEST_CASE("autodiff: random programs generate CUDA, and some compile with NVRTC") {
  std::vector<tilenorm::LoweredProgram> to_compile;
  for (int i = 0; i < kPrograms; ++i) {
    CAPTURE(i);
    ProgramGenerator generator(static_cast<std::uint64_t>(i) * 7919 + 1);
    const auto forward = generator.generate("random_" + std::to_string(i)).program;
    INFO("forward:\n", forward.to_string());
    for (auto mode : {StatisticsMode::recompute, StatisticsMode::saved}) {
      std::optional<ir::Program> derived;
      try {
        derived = tilenorm::backward(forward, {mode});
      } catch (const tilenorm::ProgramError&) {
        continue;  // every gradient identically zero: nothing to compile (checked above)
      }
      const ir::Program& backward = *derived;
      const auto lowered = tilenorm::lower(backward);
      const tilenorm::KernelConfig config =
          tilenorm::heuristic_config(lowered, tilenorm::DType::bf16, tilenorm::DType::bf16, 1000,
                                     tilenorm::DeviceLimits::hopper());
      CHECK_NOTHROW(tilenorm::generate_cuda(
          lowered, {tilenorm::DType::bf16, tilenorm::DType::bf16, 1000, config}));
      if (i % 100 == 0 && mode == StatisticsMode::recompute) to_compile.push_back(lowered);
    }
    if (i % 100 == 50) to_compile.push_back(tilenorm::lower(forward));
  }
  for (const auto& program : to_compile) {
    CAPTURE(program.to_string());
    const auto config = tilenorm::heuristic_config(
        program, tilenorm::DType::f16, tilenorm::DType::f32, 333, tilenorm::DeviceLimits::hopper());
    const auto built = tilenorm::build_kernel(
        program, {tilenorm::DType::f16, tilenorm::DType::f32, 333, config}, "sm_90", false);
    CHECK(built.registers > 0);
    CHECK(built.cubin.size() > 0);
    if (built.spill_bytes > 0)
      MESSAGE("spills " << built.spill_bytes << " bytes: " << program.program.name);
  }
}
