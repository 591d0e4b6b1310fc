#pragma once
// fp64 semantics of one elementwise operation: the single definition shared by the
// interpreter (the test oracle) and constant folding.
#include <cmath>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm::detail {

inline double evaluate_elementwise(const ir::Node& node, double a, double b, double c) {
  using ir::Op;
  switch (node.op) {
    case Op::neg:
      return -a;
    case Op::abs:
      return std::fabs(a);
    case Op::sqrt:
      return std::sqrt(a);
    case Op::rsqrt:
      return 1.0 / std::sqrt(a);
    case Op::exp:
      return std::exp(a);
    case Op::log:
      return std::log(a);
    case Op::tanh:
      return std::tanh(a);
    case Op::sigmoid:
      return 1.0 / (1.0 + std::exp(-a));
    case Op::round_to:
      return round_to_dtype(a, node.dtype);
    case Op::add:
      return a + b;
    case Op::sub:
      return a - b;
    case Op::mul:
      return a * b;
    case Op::div:
      return a / b;
    case Op::min:
      return std::fmin(a, b);
    case Op::max:
      return std::fmax(a, b);
    case Op::less:
      return a < b ? 1.0 : 0.0;
    case Op::less_equal:
      return a <= b ? 1.0 : 0.0;
    case Op::greater:
      return a > b ? 1.0 : 0.0;
    case Op::greater_equal:
      return a >= b ? 1.0 : 0.0;
    case Op::select:
      return a != 0.0 ? b : c;
    default:
      return std::nan("");
  }
}

}  // namespace tilenorm::detail
