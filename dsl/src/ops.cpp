#include "tilenorm/dsl/ops.hpp"

#include <cmath>

#include "tilenorm/dsl/dtype.hpp"

namespace tilenorm::ir {
namespace {

// ---- Derivative rules. `self` is the node's own value, `adj` its adjoint.
using B = GradientBuilder;

NodeId mul(Graph& g, NodeId a, NodeId b) {
  return g.binary(Op::mul, a, b);
}
NodeId c(Graph& g, double v) {
  return g.constant(v);
}

void grad_neg(B& b, const Node&, NodeId, NodeId adj) {
  b.add(0, b.graph().unary(Op::neg, adj));
}
void grad_abs(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  const NodeId zero = c(g, 0.0);
  const NodeId sign = g.binary(Op::sub, g.binary(Op::greater, n.args[0], zero),
                               g.binary(Op::less, n.args[0], zero));
  b.add(0, mul(g, adj, sign));
}
void grad_sqrt(B& b, const Node&, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, g.binary(Op::div, mul(g, adj, c(g, 0.5)), self));
}
void grad_rsqrt(B& b, const Node&, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, mul(g, adj, mul(g, c(g, -0.5), mul(g, self, mul(g, self, self)))));
}
void grad_exp(B& b, const Node&, NodeId self, NodeId adj) {
  b.add(0, mul(b.graph(), adj, self));
}
void grad_log(B& b, const Node& n, NodeId, NodeId adj) {
  b.add(0, b.graph().binary(Op::div, adj, n.args[0]));
}
void grad_tanh(B& b, const Node&, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, mul(g, adj, g.binary(Op::sub, c(g, 1.0), mul(g, self, self))));
}
void grad_sigmoid(B& b, const Node&, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, mul(g, adj, mul(g, self, g.binary(Op::sub, c(g, 1.0), self))));
}
void grad_identity(B& b, const Node&, NodeId, NodeId adj) {  // cast: straight through
  b.add(0, adj);
}
void grad_add(B& b, const Node&, NodeId, NodeId adj) {
  b.add(0, adj);
  b.add(1, adj);
}
void grad_sub(B& b, const Node&, NodeId, NodeId adj) {
  b.add(0, adj);
  b.add(1, b.graph().unary(Op::neg, adj));
}
void grad_mul(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  if (n.args[0] == n.args[1]) {
    // A square: one contribution, (2 adj) a, instead of adj a twice. The doubling is exact and
    // stays with the adjoint (a row scalar in a variance), so the tile pays one multiply.
    b.add(0, mul(g, mul(g, adj, c(g, 2.0)), n.args[0]));
    return;
  }
  b.add(0, mul(g, adj, n.args[1]));
  b.add(1, mul(g, adj, n.args[0]));
}
void grad_div(B& b, const Node& n, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, g.binary(Op::div, adj, n.args[1]));
  b.add(1, g.unary(Op::neg, g.binary(Op::div, mul(g, adj, self), n.args[1])));
}
// min and max route the adjoint to the chosen argument; on a tie, to the first.
void grad_min(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, mul(g, adj, g.binary(Op::less_equal, n.args[0], n.args[1])));
  b.add(1, mul(g, adj, g.binary(Op::greater, n.args[0], n.args[1])));
}
void grad_max(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, mul(g, adj, g.binary(Op::greater_equal, n.args[0], n.args[1])));
  b.add(1, mul(g, adj, g.binary(Op::less, n.args[0], n.args[1])));
}
void grad_pow(B& b, const Node& n, NodeId self, NodeId adj) {
  Graph& g = b.graph();
  const NodeId base = n.args[0], exponent = n.args[1];
  const NodeId lowered = g.binary(Op::pow, base, g.binary(Op::sub, exponent, c(g, 1.0)));
  b.add(0, mul(g, adj, mul(g, exponent, lowered)));
  b.add(1, mul(g, adj, mul(g, self, g.unary(Op::log, base))));
}
void grad_none(B&, const Node&, NodeId, NodeId) {}  // comparisons: zero gradient
void grad_select(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  const NodeId zero = c(g, 0.0);
  b.add(1, g.select(n.args[0], adj, zero));
  b.add(2, g.select(n.args[0], zero, adj));
}
// Reduction rules get the adjoint already reduced to the reduction's own shape; using it
// against the Tile argument broadcasts it back.
void grad_reduce_sum(B& b, const Node&, NodeId, NodeId adj) {
  b.add(0, adj);
}
void grad_reduce_mean(B& b, const Node&, NodeId, NodeId adj) {
  Graph& g = b.graph();
  b.add(0, g.binary(Op::div, adj, g.row_length()));
}
// max and min reductions split the adjoint evenly among the elements equal to the result
// (as torch.amax does).
void grad_reduce_extreme(B& b, const Node& n, NodeId self, NodeId adj, Op compare) {
  Graph& g = b.graph();
  const NodeId chosen = g.binary(compare, n.args[0], self);
  const NodeId count = g.reduce(Op::reduce_sum, chosen, n.axis);
  b.add(0, mul(g, chosen, g.binary(Op::div, adj, count)));
}
void grad_reduce_max(B& b, const Node& n, NodeId self, NodeId adj) {
  grad_reduce_extreme(b, n, self, adj, Op::greater_equal);
}
void grad_reduce_min(B& b, const Node& n, NodeId self, NodeId adj) {
  grad_reduce_extreme(b, n, self, adj, Op::less_equal);
}
// d/da_j of sum((a - mean(a)) * (b - mean(b))) is b_j - mean(b): the terms through mean(a)
// cancel, because the centered b sums to zero. Likewise for b.
void grad_comoment(B& b, const Node& n, NodeId, NodeId adj) {
  Graph& g = b.graph();
  auto centered = [&g, &n](int i) {  // zero for an operand constant along the axis
    if (!varies(g.node(n.args[i]).shape, n.axis)) return g.constant(0.0);
    return g.binary(Op::sub, n.args[i], g.reduce(Op::reduce_mean, n.args[i], n.axis));
  };
  b.add(0, mul(g, adj, centered(1)));
  b.add(1, mul(g, adj, centered(0)));
}

using D = double;  // the interpreter's arithmetic
using F = float;   // the device's, for constant folding

constexpr double kInf = HUGE_VAL;

using K = OpKind;
// clang-format off
constexpr OpInfo kOps[] = {
    // {op, name, arity, kind, commutative,
    //  fp64 meaning (the interpreter),
    //  fp32 meaning (constant folding; written apart from the fp64 one so that the oracle
    //  shares no code with what it checks),
    //  CUDA spelling, reduction identity, derivative rule}
    {Op::load, "load", 0, K::leaf, false,
     nullptr,
     nullptr,
     "", 0, nullptr},
    {Op::constant, "constant", 0, K::leaf, false,
     nullptr,
     nullptr,
     "", 0, nullptr},
    {Op::row_length, "row_length", 0, K::leaf, false,
     nullptr,
     nullptr,
     "static_cast<float>(N)", 0, nullptr},
    {Op::neg, "neg", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return -a; },
     [](const Node&, F a, F, F) { return -a; },
     "(-$0)", 0, grad_neg},
    {Op::abs, "abs", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return std::fabs(a); },
     [](const Node&, F a, F, F) { return std::fabs(a); },
     "fabsf($0)", 0, grad_abs},
    {Op::sqrt, "sqrt", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return std::sqrt(a); },
     [](const Node&, F a, F, F) { return std::sqrt(a); },
     "sqrtf($0)", 0, grad_sqrt},
    {Op::rsqrt, "rsqrt", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return 1.0 / std::sqrt(a); },
     [](const Node&, F a, F, F) { return 1.0f / std::sqrt(a); },
     "rsqrtf($0)", 0, grad_rsqrt},
    {Op::exp, "exp", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return std::exp(a); },
     [](const Node&, F a, F, F) { return std::exp(a); },
     "expf($0)", 0, grad_exp},
    {Op::log, "log", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return std::log(a); },
     [](const Node&, F a, F, F) { return std::log(a); },
     "logf($0)", 0, grad_log},
    {Op::tanh, "tanh", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return std::tanh(a); },
     [](const Node&, F a, F, F) { return std::tanh(a); },
     "tanhf($0)", 0, grad_tanh},
    {Op::sigmoid, "sigmoid", 1, K::elementwise, false,
     [](const Node&, D a, D, D) { return 1.0 / (1.0 + std::exp(-a)); },
     [](const Node&, F a, F, F) { return 1.0f / (1.0f + std::exp(-a)); },
     "tn::sigmoid($0)", 0, grad_sigmoid},
    {Op::round_to, "round_to", 1, K::elementwise, false,
     [](const Node& n, D a, D, D) { return round_to_dtype(a, n.dtype); },
     [](const Node& n, F a, F, F) { return static_cast<float>(round_to_dtype(a, n.dtype)); },
     "tn::round_to<$T>($0)", 0, grad_identity},
    {Op::add, "add", 2, K::elementwise, true,
     [](const Node&, D a, D b, D) { return a + b; },
     [](const Node&, F a, F b, F) { return a + b; },
     "($0 + $1)", 0, grad_add},
    {Op::sub, "sub", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a - b; },
     [](const Node&, F a, F b, F) { return a - b; },
     "($0 - $1)", 0, grad_sub},
    {Op::mul, "mul", 2, K::elementwise, true,
     [](const Node&, D a, D b, D) { return a * b; },
     [](const Node&, F a, F b, F) { return a * b; },
     "($0 * $1)", 0, grad_mul},
    {Op::div, "div", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a / b; },
     [](const Node&, F a, F b, F) { return a / b; },
     "($0 / $1)", 0, grad_div},
    {Op::min, "min", 2, K::elementwise, true,
     [](const Node&, D a, D b, D) { return std::fmin(a, b); },
     [](const Node&, F a, F b, F) { return std::fmin(a, b); },
     "fminf($0, $1)", 0, grad_min},
    {Op::max, "max", 2, K::elementwise, true,
     [](const Node&, D a, D b, D) { return std::fmax(a, b); },
     [](const Node&, F a, F b, F) { return std::fmax(a, b); },
     "fmaxf($0, $1)", 0, grad_max},
    {Op::pow, "pow", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return std::pow(a, b); },
     [](const Node&, F a, F b, F) { return std::pow(a, b); },
     "powf($0, $1)", 0, grad_pow},
    {Op::less, "less", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a < b ? 1.0 : 0.0; },
     [](const Node&, F a, F b, F) { return a < b ? 1.0f : 0.0f; },
     "($0 < $1 ? 1.0f : 0.0f)", 0, grad_none},
    {Op::less_equal, "less_equal", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a <= b ? 1.0 : 0.0; },
     [](const Node&, F a, F b, F) { return a <= b ? 1.0f : 0.0f; },
     "($0 <= $1 ? 1.0f : 0.0f)", 0, grad_none},
    {Op::greater, "greater", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a > b ? 1.0 : 0.0; },
     [](const Node&, F a, F b, F) { return a > b ? 1.0f : 0.0f; },
     "($0 > $1 ? 1.0f : 0.0f)", 0, grad_none},
    {Op::greater_equal, "greater_equal", 2, K::elementwise, false,
     [](const Node&, D a, D b, D) { return a >= b ? 1.0 : 0.0; },
     [](const Node&, F a, F b, F) { return a >= b ? 1.0f : 0.0f; },
     "($0 >= $1 ? 1.0f : 0.0f)", 0, grad_none},
    {Op::select, "select", 3, K::elementwise, false,
     [](const Node&, D a, D b, D c) { return a != 0.0 ? b : c; },
     [](const Node&, F a, F b, F c) { return a != 0.0f ? b : c; },
     "($0 != 0.0f ? $1 : $2)", 0, grad_select},
    {Op::reduce_sum, "sum", 1, K::reduction, false,
     nullptr,
     nullptr,
     "tn::kSum", 0, grad_reduce_sum},
    {Op::reduce_mean, "mean", 1, K::reduction, false,
     nullptr,
     nullptr,
     "tn::kSum", 0, grad_reduce_mean},
    {Op::reduce_max, "max_reduce", 1, K::reduction, false,
     nullptr,
     nullptr,
     "tn::kMax", -kInf, grad_reduce_max},
    {Op::reduce_min, "min_reduce", 1, K::reduction, false,
     nullptr,
     nullptr,
     "tn::kMin", kInf, grad_reduce_min},
    {Op::comoment, "comoment", 2, K::reduction, true,
     nullptr,
     nullptr,
     "tn::kComoment", 0, grad_comoment},
};
// clang-format on

constexpr bool table_in_op_order() {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    if (static_cast<std::size_t>(kOps[i].op) != i) return false;
  }
  return true;
}
static_assert(std::size(kOps) == kOpCount, "the op table needs exactly one row per ir::Op");
static_assert(table_in_op_order(), "the op table's rows must be in ir::Op order");

}  // namespace

const OpInfo& op_info(Op op) {
  return kOps[static_cast<std::size_t>(op)];
}

}  // namespace tilenorm::ir
