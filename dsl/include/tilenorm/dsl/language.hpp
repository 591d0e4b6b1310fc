#pragma once
// The user-facing tile language. A program is written as C++ expressions over four shape
// classes, each its own type, so that misuse fails to compile with a readable message:
//
//   Tile<P>       one row of an [M, N] tensor            x, x - mean(x)
//   RowScalar<P>  one value per row (a reduction)        mean(x), rstd
//   Column<P>     an [N] parameter shared by every row   weight, bias
//   Scalar<P>     one value for the whole launch         eps, 1.0
//
// P is a per-program tag type; values of two different programs cannot be combined.
//
//   auto program = tilenorm::dsl::make_program("rms_norm", [](auto& p) {
//     auto x = p.input("x");
//     auto w = p.column("w");
//     auto eps = p.scalar("eps");
//     auto rstd = rsqrt(mean(x * x) + eps);
//     p.save("rstd", rstd);
//     p.output("y", x * rstd * w);
//   });
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/ir.hpp"

namespace tilenorm::dsl {

using ir::Shape;

template <class Program, Shape S>
class Value {
 public:
  static constexpr Shape shape = S;

  Value(ir::Graph* graph, ir::NodeId id) : graph_(graph), id_(id) {}
  ir::Graph* graph() const { return graph_; }
  ir::NodeId id() const { return id_; }

 private:
  ir::Graph* graph_;
  ir::NodeId id_;
};

template <class P>
using Tile = Value<P, Shape::tile>;
template <class P>
using RowScalar = Value<P, Shape::row_scalar>;
template <class P>
using Column = Value<P, Shape::column>;
template <class P>
using Scalar = Value<P, Shape::scalar>;

template <class T>
struct is_value : std::false_type {};
template <class P, Shape S>
struct is_value<Value<P, S>> : std::true_type {};
template <class T>
inline constexpr bool is_value_v = is_value<std::remove_cvref_t<T>>::value;

template <class T>
concept Operand = is_value_v<T> || std::is_arithmetic_v<std::remove_cvref_t<T>>;

namespace detail {

template <class T>
struct tag_of {
  using type = void;
};
template <class P, Shape S>
struct tag_of<Value<P, S>> {
  using type = P;
};

// The program tag of the DSL operands among Ts (all must agree).
template <class... Ts>
struct common_program;
template <>
struct common_program<> {
  using type = void;
};
template <class T, class... Rest>
struct common_program<T, Rest...> {
  using rest = typename common_program<Rest...>::type;
  using self = typename tag_of<std::remove_cvref_t<T>>::type;
  static constexpr bool conflict =
      !std::is_void_v<self> && !std::is_void_v<rest> && !std::is_same_v<self, rest>;
  using type = std::conditional_t<std::is_void_v<self>, rest, self>;
};

template <class T>
constexpr Shape shape_of() {
  if constexpr (is_value_v<T>)
    return std::remove_cvref_t<T>::shape;
  else
    return Shape::scalar;
}

template <class... Ts>
constexpr bool programs_conflict() {
  return common_program<Ts...>::conflict;
}

template <class T>
ir::Graph* graph_of(const T& v) {
  if constexpr (is_value_v<T>)
    return v.graph();
  else
    return nullptr;
}

template <class T>
ir::NodeId node_of(ir::Graph* graph, const T& v) {
  if constexpr (is_value_v<T>)
    return v.id();
  else
    return graph->constant(static_cast<double>(v));
}

template <class... Ts>
ir::Graph* first_graph(const Ts&... vs) {
  ir::Graph* graph = nullptr;
  ((graph = graph ? graph : graph_of(vs)), ...);
  return graph;
}

template <class... Ts>
auto apply(ir::Op op, const Ts&... operands) {
  static_assert((is_value_v<Ts> || ...),
                "tilenorm: at least one operand must be a DSL value (Tile, RowScalar, Column or "
                "Scalar)");
  static_assert(!programs_conflict<Ts...>(),
                "tilenorm: cannot combine values from two different programs; build each "
                "expression from the inputs of the program it belongs to");
  using P = typename common_program<Ts...>::type;
  constexpr Shape shape = (Shape::scalar | ... | shape_of<Ts>());  // broadcasting
  ir::Graph* graph = first_graph(operands...);
  ir::Node node;
  node.op = op;
  int i = 0;
  ((node.args[i++] = node_of(graph, operands)), ...);
  return Value<P, shape>(graph, graph->intern(node));
}

}  // namespace detail

// ---- Elementwise arithmetic: broadcasts like Triton (RowScalar/Scalar across a row, Column
// across rows). Plain numbers become Scalars.
#define TILENORM_DSL_BINARY(symbol, opcode)                                      \
  template <Operand A, Operand B>                                                \
  requires(is_value_v<A> || is_value_v<B>) auto symbol(const A& a, const B& b) { \
    return detail::apply(ir::Op::opcode, a, b);                                  \
  }
TILENORM_DSL_BINARY(operator+, add)
TILENORM_DSL_BINARY(operator-, sub)
TILENORM_DSL_BINARY(operator*, mul)
TILENORM_DSL_BINARY(operator/, div)
TILENORM_DSL_BINARY(operator<, less)
TILENORM_DSL_BINARY(operator<=, less_equal)
TILENORM_DSL_BINARY(operator>, greater)
TILENORM_DSL_BINARY(operator>=, greater_equal)
TILENORM_DSL_BINARY(min, min)
TILENORM_DSL_BINARY(max, max)
TILENORM_DSL_BINARY(pow, pow)
#undef TILENORM_DSL_BINARY

#define TILENORM_DSL_UNARY(name, opcode)     \
  template <class P, Shape S>                \
  auto name(const Value<P, S>& a) {          \
    return detail::apply(ir::Op::opcode, a); \
  }
TILENORM_DSL_UNARY(operator-, neg)
TILENORM_DSL_UNARY(abs, abs)
TILENORM_DSL_UNARY(sqrt, sqrt)
TILENORM_DSL_UNARY(rsqrt, rsqrt)
TILENORM_DSL_UNARY(exp, exp)
TILENORM_DSL_UNARY(log, log)
TILENORM_DSL_UNARY(tanh, tanh)
TILENORM_DSL_UNARY(sigmoid, sigmoid)
#undef TILENORM_DSL_UNARY

// where(c, a, b): a where c != 0, else b.
template <Operand C, Operand A, Operand B>
requires(is_value_v<C> || is_value_v<A> ||
         is_value_v<B>) auto where(const C& condition, const A& if_true, const B& if_false) {
  return detail::apply(ir::Op::select, condition, if_true, if_false);
}

// cast<DType::bf16>(v): round to a storage type's precision (compute stays fp32).
template <DType Target, class P, Shape S>
auto cast(const Value<P, S>& a) {
  return Value<P, S>(a.graph(), a.graph()->unary(ir::Op::round_to, a.id(), Target));
}

// ---- Reductions along the row: Tile -> RowScalar.
namespace detail {
template <Shape S>
constexpr void check_reducible() {
  static_assert(S != Shape::row_scalar,
                "tilenorm: cannot reduce a RowScalar: it already holds one value per row; "
                "reductions (sum, mean, max, min) take a Tile");
  static_assert(S != Shape::column,
                "tilenorm: cannot reduce a Column: reductions run along a row, so they take a "
                "Tile (combine the Column with a Tile first)");
  static_assert(S != Shape::scalar,
                "tilenorm: cannot reduce a Scalar: reductions (sum, mean, max, min) take a Tile");
}
template <class P, Shape S>
auto reduce(ir::Op op, const Value<P, S>& a) {
  check_reducible<S>();
  return RowScalar<P>(a.graph(), a.graph()->reduce(op, a.id()));
}
}  // namespace detail

template <class P, Shape S>
auto sum(const Value<P, S>& a) {
  return detail::reduce(ir::Op::reduce_sum, a);
}
template <class P, Shape S>
auto mean(const Value<P, S>& a) {
  return detail::reduce(ir::Op::reduce_mean, a);
}
template <class P, Shape S>
auto max(const Value<P, S>& a) {
  return detail::reduce(ir::Op::reduce_max, a);
}
template <class P, Shape S>
auto min(const Value<P, S>& a) {
  return detail::reduce(ir::Op::reduce_min, a);
}
// The co-moment along the row: sum((a - mean(a)) * (b - mean(b))); comoment(x, x) / N is the
// variance. Writing the centered sum out (mean((x - mean(x)) * (x - mean(x)))) compiles to the
// same one-phase kernel.
template <class P, Shape A, Shape B>
auto comoment(const Value<P, A>& a, const Value<P, B>& b) {
  detail::check_reducible<ir::broadcast(A, B)>();
  return RowScalar<P>(a.graph(), a.graph()->comoment(a.id(), b.id()));
}

// ---- Declaring a program.

// Whether autodiff derives a gradient for a read slot (see autodiff.hpp).
enum class Grad { no, yes };

template <class P>
class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::string name) : graph_(std::make_shared<ir::Graph>()) {
    program_.name = std::move(name);
    program_.graph = graph_;
  }

  // An [M, N] tensor read by the kernel. `dtype` unset: the launch's row dtype.
  Tile<P> input(std::string name, Grad grad = Grad::yes, std::optional<DType> dtype = {}) {
    return {graph_.get(), read(std::move(name), Shape::tile, grad, dtype)};
  }
  // An [N] parameter (weight, bias). `dtype` unset: the launch's parameter dtype.
  Column<P> column(std::string name, Grad grad = Grad::yes, std::optional<DType> dtype = {}) {
    return {graph_.get(), read(std::move(name), Shape::column, grad, dtype)};
  }
  // An [M] fp32 vector, one value per row (such as a saved statistic).
  RowScalar<P> row_values(std::string name) {
    return {graph_.get(), read(std::move(name), Shape::row_scalar, Grad::no, DType::f32)};
  }
  // A launch scalar, passed as fp32: a constant such as eps (Grad::no), or a learned scalar
  // whose gradient autodiff derives (Grad::yes).
  Scalar<P> scalar(std::string name, Grad grad = Grad::no) {
    return {graph_.get(), read(std::move(name), Shape::scalar, grad, DType::f32)};
  }
  // N, the row length, as a Scalar.
  Scalar<P> row_length() { return {graph_.get(), graph_->row_length()}; }

  // An [M, N] tensor written by the kernel. `dtype` unset: the launch's row dtype.
  template <class Q, Shape S>
  void output(std::string name, const Value<Q, S>& value, std::optional<DType> dtype = {}) {
    static_assert(std::is_same_v<P, Q>,
                  "tilenorm: this value belongs to another program; outputs must be computed "
                  "from this program's inputs");
    static_assert(S != Shape::row_scalar,
                  "tilenorm: a RowScalar cannot be stored as a row output; save per-row values "
                  "with save(name, value), or broadcast it against a Tile first");
    static_assert(S == Shape::tile,
                  "tilenorm: a row output must be a Tile (it must depend on a row input)");
    write(std::move(name), Shape::tile, value.id(), dtype);
  }
  // A per-row fp32 side output, such as a saved mean or rstd.
  template <class Q, Shape S>
  void save(std::string name, const Value<Q, S>& value) {
    static_assert(std::is_same_v<P, Q>,
                  "tilenorm: this value belongs to another program; saved statistics must be "
                  "computed from this program's inputs");
    static_assert(S == Shape::row_scalar,
                  "tilenorm: save() stores one value per row, so it takes a RowScalar (such as "
                  "mean(x)); write Tiles with output()");
    write(std::move(name), Shape::row_scalar, value.id(), DType::f32);
  }

  ir::Program build() && { return std::move(program_); }

 private:
  ir::NodeId read(std::string name, Shape shape, Grad grad, std::optional<DType> dtype) {
    const auto slot = static_cast<std::int32_t>(program_.slots.size());
    program_.slots.push_back({std::move(name), ir::Role::read, shape, dtype, 0, grad == Grad::yes});
    return graph_->load(shape, slot);
  }
  void write(std::string name, Shape shape, ir::NodeId value, std::optional<DType> dtype) {
    program_.slots.push_back({std::move(name), ir::Role::written, shape, dtype, value, false});
  }
  std::shared_ptr<ir::Graph> graph_;
  ir::Program program_;
};

// Builds a program by calling `define(builder)`. Each lambda has its own type, which becomes
// the program's tag, so values cannot leak from one program into another.
template <class Define>
ir::Program make_program(std::string name, Define&& define) {
  ProgramBuilder<std::remove_cvref_t<Define>> builder(std::move(name));
  define(builder);
  return std::move(builder).build();
}

}  // namespace tilenorm::dsl
