// The op table: one consistent row per operation, the fp64 semantics (the interpreter's) and
// the fp32 semantics (constant folding's) agreeing up to fp32 rounding, and the CUDA spelling.
#include "tilenorm/dsl/ops.hpp"

#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"

namespace {

namespace ir = tilenorm::ir;
using ir::Op;
using ir::OpKind;

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (std::size_t i = 0; i < ir::kOpCount; ++i) ops.push_back(static_cast<Op>(i));
  return ops;
}

// Sample operands: exact in fp32, of both signs, small and large, with ties between them.
const std::vector<double> kSamples = {-7.5, -2.25, -1.0, -0.375, 0.0, 0.375,
                                      0.5,  1.0,   2.0,  3.75,   60.0};

bool same_or_both_nan(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

// fp64 against fp32 on the same fp32 operands: the fp32 result may be off by fp32 rounding of
// the result (a few ulps for exp, pow and friends), or overflow where fp64 does not.
bool agrees(double fp64, float fp32) {
  if (std::isnan(fp64) || std::isnan(fp32)) return std::isnan(fp64) && std::isnan(fp32);
  if (std::fabs(fp64) > FLT_MAX) return std::isinf(fp32) && (fp32 > 0) == (fp64 > 0);
  if (std::isinf(fp32)) return std::fabs(fp64) >= FLT_MAX * (1.0 - 4 * FLT_EPSILON);
  return std::fabs(static_cast<double>(fp32) - fp64) <=
         4.0 * FLT_EPSILON * std::fabs(fp64) + static_cast<double>(FLT_MIN);
}

ir::Node node_of(Op op, tilenorm::DType dtype = tilenorm::DType::f32) {
  ir::Node node;
  node.op = op;
  node.arity = static_cast<std::uint8_t>(ir::op_arity(op));
  node.dtype = dtype;
  return node;
}

}  // namespace

TEST_CASE("ops: every operation has one row, in Op order, with a unique name") {
  std::set<std::string> names;
  for (Op op : all_ops()) {
    const ir::OpInfo& info = ir::op_info(op);
    CAPTURE(info.name);
    CHECK(info.op == op);
    CHECK(names.insert(std::string(info.name)).second);
    CHECK(ir::op_name(op) == info.name);
    CHECK(ir::op_arity(op) == info.arity);
    CHECK(ir::is_reduction(op) == (info.kind == OpKind::reduction));
    CHECK(ir::is_commutative(op) == info.commutative);
    switch (info.kind) {
      case OpKind::leaf:
        CHECK(info.arity == 0);
        CHECK(static_cast<bool>(info.evaluate) == false);
        CHECK(static_cast<bool>(info.fold) == false);
        CHECK(static_cast<bool>(info.gradient) == false);
        break;
      case OpKind::elementwise:
        CHECK(info.arity >= 1);
        CHECK(info.arity <= 3);
        CHECK(static_cast<bool>(info.evaluate));
        CHECK(static_cast<bool>(info.fold));
        // Every elementwise op spells out each of its operands once or more.
        for (int i = 0; i < info.arity; ++i) {
          CHECK(std::string(info.cuda).find("$" + std::to_string(i)) != std::string::npos);
        }
        CHECK(std::string(info.cuda).find("$" + std::to_string(info.arity)) == std::string::npos);
        break;
      case OpKind::reduction:
        CHECK(info.arity == (op == Op::comoment ? 2 : 1));
        CHECK(static_cast<bool>(info.evaluate) == false);
        CHECK(static_cast<bool>(info.fold) == false);
        CHECK(std::string(info.cuda).starts_with("tn::k"));
        break;
    }
    // Today every operation with operands has a derivative rule.
    CHECK(static_cast<bool>(info.gradient) == (info.arity > 0));
  }
  CHECK(names.size() == ir::kOpCount);
  CHECK(ir::op_info(Op::round_to).cuda.find("$T") != std::string::npos);
  CHECK(ir::op_info(Op::row_length).cuda == "static_cast<float>(N)");
}

TEST_CASE("ops: the properties of the individual rows") {
  const std::set<Op> commutative = {Op::add, Op::mul, Op::min, Op::max, Op::comoment};
  for (Op op : all_ops()) {
    CAPTURE(ir::op_name(op));
    CHECK(ir::is_commutative(op) == (commutative.count(op) == 1));
  }
  CHECK(ir::op_info(Op::reduce_sum).identity == 0.0);
  CHECK(ir::op_info(Op::reduce_mean).identity == 0.0);
  CHECK(ir::op_info(Op::reduce_max).identity == -std::numeric_limits<double>::infinity());
  CHECK(ir::op_info(Op::reduce_min).identity == std::numeric_limits<double>::infinity());
  CHECK(ir::op_info(Op::reduce_sum).cuda == "tn::kSum");
  CHECK(ir::op_info(Op::reduce_mean).cuda == "tn::kSum");
  CHECK(ir::op_info(Op::reduce_max).cuda == "tn::kMax");
  CHECK(ir::op_info(Op::reduce_min).cuda == "tn::kMin");
  CHECK(ir::op_name(Op::reduce_max) == "max_reduce");
  CHECK(ir::op_name(Op::pow) == "pow");
  CHECK(ir::op_arity(Op::select) == 3);
  CHECK(ir::op_arity(Op::pow) == 2);
  CHECK(ir::op_arity(Op::load) == 0);
}

TEST_CASE("ops: fp64 evaluate and fp32 fold agree up to fp32 rounding") {
  int compared = 0;
  for (Op op : all_ops()) {
    const ir::OpInfo& info = ir::op_info(op);
    if (info.kind != OpKind::elementwise) continue;
    CAPTURE(info.name);
    const std::vector<tilenorm::DType> dtypes =
        op == Op::round_to ? std::vector<tilenorm::DType>(std::begin(tilenorm::kAllDTypes),
                                                          std::end(tilenorm::kAllDTypes))
                           : std::vector<tilenorm::DType>{tilenorm::DType::f32};
    for (tilenorm::DType dtype : dtypes) {
      const ir::Node node = node_of(op, dtype);
      for (double a : kSamples) {
        for (double b : info.arity >= 2 ? kSamples : std::vector<double>{0.0}) {
          for (double c :
               info.arity >= 3 ? std::vector<double>{-1.0, 0.0, 2.5} : std::vector<double>{0.0}) {
            CAPTURE(a);
            CAPTURE(b);
            CAPTURE(c);
            const double fp64 = info.evaluate(node, a, b, c);
            const float fp32 = info.fold(node, static_cast<float>(a), static_cast<float>(b),
                                         static_cast<float>(c));
            CHECK(agrees(fp64, fp32));
            ++compared;
          }
        }
      }
    }
  }
  CHECK(compared > 1000);
}

TEST_CASE("ops: evaluate and fold against the definitions") {
  const ir::Node n = node_of(Op::add);
  auto eval = [](Op op, double a, double b = 0.0, double c = 0.0) {
    return ir::op_info(op).evaluate(node_of(op), a, b, c);
  };
  auto fold = [](Op op, float a, float b = 0.0f, float c = 0.0f) {
    return ir::op_info(op).fold(node_of(op), a, b, c);
  };
  (void)n;
  CHECK(eval(Op::neg, 2.0) == -2.0);
  CHECK(eval(Op::abs, -3.0) == 3.0);
  CHECK(eval(Op::sqrt, 9.0) == 3.0);
  CHECK(eval(Op::rsqrt, 4.0) == 0.5);
  CHECK(eval(Op::exp, 0.0) == 1.0);
  CHECK(eval(Op::log, 1.0) == 0.0);
  CHECK(eval(Op::tanh, 0.0) == 0.0);
  CHECK(eval(Op::sigmoid, 0.0) == 0.5);
  CHECK(eval(Op::sub, 5.0, 3.0) == 2.0);
  CHECK(eval(Op::div, 3.0, 4.0) == 0.75);
  CHECK(eval(Op::min, 3.0, -4.0) == -4.0);
  CHECK(eval(Op::max, 3.0, -4.0) == 3.0);
  CHECK(eval(Op::pow, 2.0, 10.0) == 1024.0);
  CHECK(eval(Op::pow, 4.0, -0.5) == 0.5);
  CHECK(std::isnan(eval(Op::pow, -2.0, 0.5)));
  CHECK(eval(Op::less, 1.0, 1.0) == 0.0);
  CHECK(eval(Op::less_equal, 1.0, 1.0) == 1.0);
  CHECK(eval(Op::greater, 2.0, 1.0) == 1.0);
  CHECK(eval(Op::greater_equal, 0.5, 1.0) == 0.0);
  CHECK(eval(Op::select, 0.0, 1.0, 2.0) == 2.0);
  CHECK(eval(Op::select, -0.5, 1.0, 2.0) == 1.0);
  // min and max ignore a NaN operand, in both (fminf / fmaxf, as the device does).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(eval(Op::min, nan, 1.0) == 1.0);
  CHECK(eval(Op::max, 1.0, nan) == 1.0);
  CHECK(fold(Op::min, std::numeric_limits<float>::quiet_NaN(), 1.0f) == 1.0f);
  // fold computes in fp32: 0.1f + 0.2f, 1 / 3, and the overflow of exp.
  CHECK(fold(Op::add, 0.1f, 0.2f) == 0.1f + 0.2f);
  CHECK(static_cast<double>(fold(Op::div, 1.0f, 3.0f)) != eval(Op::div, 1.0, 3.0));
  CHECK(std::isinf(fold(Op::exp, 100.0f)));
  CHECK(std::isfinite(eval(Op::exp, 100.0)));
  // The cast rounds to the node's dtype.
  const double between = 1.0 + 0x1p-8 + 0x1p-20;
  CHECK(ir::op_info(Op::round_to)
            .evaluate(node_of(Op::round_to, tilenorm::DType::bf16), between, 0, 0) == 1.0 + 0x1p-7);
  CHECK(ir::op_info(Op::round_to)
            .evaluate(node_of(Op::round_to, tilenorm::DType::f16), between, 0, 0) == 1.0 + 0x1p-8);
  CHECK(ir::op_info(Op::round_to)
            .evaluate(node_of(Op::round_to, tilenorm::DType::f32), between, 0, 0) == between);
  CHECK(ir::op_info(Op::round_to)
            .fold(node_of(Op::round_to, tilenorm::DType::bf16), static_cast<float>(between), 0,
                  0) == 1.0f + 0x1p-7f);
}

TEST_CASE("ops: commutative operations give the same result with swapped operands") {
  for (Op op : all_ops()) {
    const ir::OpInfo& info = ir::op_info(op);
    if (info.kind != OpKind::elementwise || info.arity != 2) continue;
    CAPTURE(info.name);
    bool symmetric = true;
    for (double a : kSamples) {
      for (double b : kSamples) {
        const ir::Node node = node_of(op);
        symmetric = symmetric &&
                    same_or_both_nan(info.evaluate(node, a, b, 0), info.evaluate(node, b, a, 0));
      }
    }
    // Commutative ops are symmetric; none of the others happen to be on these samples.
    CHECK(symmetric == info.commutative);
  }
}

TEST_CASE("ops: node equality and hashing distinguish axes, and only for reductions") {
  ir::Graph g;
  const auto x = g.load(ir::Shape::tile, 0);
  const auto along = g.reduce(Op::reduce_sum, x, ir::Axis::along_row);
  const auto across = g.reduce(Op::reduce_sum, x, ir::Axis::across_rows);
  CHECK(along != across);
  const ir::NodeHash hash;
  CHECK(hash(g.node(along)) != hash(g.node(across)));
  CHECK_FALSE(g.node(along) == g.node(across));
  // Equal nodes hash alike.
  ir::Node copy = g.node(across);
  CHECK(hash(copy) == hash(g.node(across)));
  CHECK(copy == g.node(across));
}
