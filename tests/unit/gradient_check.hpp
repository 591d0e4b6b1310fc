#pragma once
// Checks derived backward programs against central finite differences of the forward
// program, both evaluated by the fp64 interpreter. Shared by the autodiff tests.
//
// The loss is L = sum over the forward's row outputs of sum(dy * y), with dy the incoming
// gradient. Its derivative with respect to an element of a read slot is what the backward
// program writes into that slot's gradient d<name>.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/dsl/ir.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace gradient_check {

namespace ir = tilenorm::ir;

// A forward program with values for its read slots and an incoming gradient for each of its
// row outputs (indexed by forward slot; empty for other slots).
struct Problem {
  ir::Program forward;
  tilenorm::InterpreterInputs inputs;
  std::vector<std::vector<double>> incoming;
};

// Fills the incoming gradients with values uniform in [-1, 1).
inline void random_incoming(Problem& problem, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  problem.incoming.assign(problem.forward.slots.size(), {});
  for (std::size_t i = 0; i < problem.forward.slots.size(); ++i) {
    const ir::Slot& slot = problem.forward.slots[i];
    if (slot.role != ir::Role::written || slot.shape != ir::Shape::tile) continue;
    problem.incoming[i].resize(
        tilenorm::slot_elements(slot.shape, problem.inputs.rows, problem.inputs.cols));
    for (double& v : problem.incoming[i]) v = uniform(rng);
  }
}

struct Loss {
  double value = 0.0;
  double magnitude = 0.0;  // sum of |dy * y|: the scale of the rounding error in `value`
};

inline Loss loss(const Problem& problem, const tilenorm::InterpreterInputs& inputs) {
  const auto out = tilenorm::interpret(problem.forward, inputs);
  Loss result;
  for (std::size_t i = 0; i < problem.forward.slots.size(); ++i) {
    for (std::size_t k = 0; k < problem.incoming[i].size(); ++k) {
      result.value += problem.incoming[i][k] * out.slots[i][k];
      result.magnitude += std::fabs(problem.incoming[i][k] * out.slots[i][k]);
    }
  }
  return result;
}

// The backward program's inputs, found by name: the forward's reads, the incoming gradients
// d<output>, and (saved mode) the forward's saved statistics and the row outputs it reads back.
inline tilenorm::InterpreterInputs backward_inputs(const Problem& problem,
                                                   const ir::Program& backward) {
  const auto forward_out = tilenorm::interpret(problem.forward, problem.inputs);
  tilenorm::InterpreterInputs inputs;
  inputs.rows = problem.inputs.rows;
  inputs.cols = problem.inputs.cols;
  for (const ir::Slot& slot : backward.slots) {
    inputs.slots.emplace_back();
    if (slot.role != ir::Role::read) continue;
    CAPTURE(slot.name);
    if (auto f = problem.forward.find_slot(slot.name)) {
      const ir::Slot& source = problem.forward.slots[*f];
      if (source.role == ir::Role::read) {
        inputs.slots.back() = problem.inputs.slots[*f];
      } else {
        inputs.slots.back() = forward_out.slots[*f];  // a saved statistic or row output
      }
      continue;
    }
    REQUIRE(slot.name.starts_with("d"));
    const auto output = problem.forward.find_slot(slot.name.substr(1));
    REQUIRE(output.has_value());
    REQUIRE(problem.forward.slots[*output].role == ir::Role::written);
    inputs.slots.back() = problem.incoming[*output];
  }
  return inputs;
}

// One element of one read slot of the forward program.
struct Element {
  std::size_t slot;
  std::size_t index;
};

// Every element of every read slot marked Grad::yes.
inline std::vector<Element> all_elements(const Problem& problem) {
  std::vector<Element> elements;
  for (std::size_t i = 0; i < problem.forward.slots.size(); ++i) {
    const ir::Slot& slot = problem.forward.slots[i];
    if (slot.role != ir::Role::read || !slot.needs_grad) continue;
    for (std::size_t k = 0; k < problem.inputs.slots[i].size(); ++k) elements.push_back({i, k});
  }
  return elements;
}

// The central difference of the loss at `element`, with a step of 1e-6 relative to the value.
struct FiniteDifference {
  double derivative;
  double tolerance;
};
inline FiniteDifference finite_difference(const Problem& problem, const Element& element,
                                          const ir::Program* reference = nullptr) {
  Problem perturbed_problem = problem;
  if (reference) perturbed_problem.forward = *reference;
  tilenorm::InterpreterInputs inputs = problem.inputs;
  double& value = inputs.slots[element.slot][element.index];
  const double original = value;
  const double h = 1e-6 * std::max(1.0, std::fabs(original));
  value = original + h;
  const Loss plus = loss(perturbed_problem, inputs);
  value = original - h;
  const Loss minus = loss(perturbed_problem, inputs);
  const double derivative = (plus.value - minus.value) / (2.0 * h);
  // 1e-6 relative to the derivative, plus the loss's own rounding error amplified by 1 / h.
  const double tolerance =
      1e-6 * (1.0 + std::fabs(derivative)) + 1e-15 * (plus.magnitude + minus.magnitude) / h;
  return {derivative, tolerance};
}

inline bool close(double a, double b, double relative) {
  return std::fabs(a - b) <= relative * (1.0 + std::fabs(b));
}

// Whether the program reads an [M, N] row input (verify requires one).
inline bool reads_rows(const ir::Program& program) {
  return std::any_of(program.slots.begin(), program.slots.end(), [](const ir::Slot& s) {
    return s.role == ir::Role::read && s.shape == ir::Shape::tile;
  });
}

// How many forward programs had only identically-zero gradients (backward() reports those).
inline int& zero_gradient_programs() {
  static int count = 0;
  return count;
}

struct Derived {
  ir::Program backward;
  tilenorm::InterpreterOutputs gradients;
  bool all_zero = false;  // backward() said every gradient is identically zero
};

// Derives the backward program in `mode`, checks its shape (name, gradient slots), checks that
// lowering it changes nothing but rounding, and returns it with its gradients.
inline Derived derive(const Problem& problem, tilenorm::StatisticsMode mode) {
  Derived derived;
  try {
    derived.backward = tilenorm::backward(problem.forward, {mode});
  } catch (const tilenorm::ProgramError& e) {
    // A program none of whose gradients depends on anything is reported, not derived; the
    // finite differences must then all be zero.
    REQUIRE(std::string(e.what()).find("every gradient is identically zero") != std::string::npos);
    ++zero_gradient_programs();
    derived.all_zero = true;
    return derived;
  }
  const ir::Program& backward = derived.backward;
  INFO("backward:\n", backward.to_string());
  CHECK(backward.name ==
        problem.forward.name +
            (mode == tilenorm::StatisticsMode::saved ? "_backward" : "_backward_recompute"));
  for (const ir::Slot& slot : problem.forward.slots) {
    if (slot.role != ir::Role::read) continue;
    const auto gradient = backward.find_slot(tilenorm::gradient_name(slot.name));
    CHECK_MESSAGE(gradient.has_value() == slot.needs_grad, "gradient of ", slot.name);
    if (!gradient) continue;
    const ir::Slot& g = backward.slots[*gradient];
    CHECK(g.role == ir::Role::written);
    CHECK(g.shape == slot.shape);
  }
  const auto inputs = backward_inputs(problem, backward);
  derived.gradients = tilenorm::interpret(backward, inputs);
  // The lowered program computes the same, up to rounding.
  const tilenorm::LoweredProgram lowered = tilenorm::lower(backward);
  INFO("lowered:\n", lowered.to_string());
  const auto lowered_gradients = tilenorm::interpret(lowered.program, inputs);
  for (std::size_t i = 0; i < backward.slots.size(); ++i) {
    if (backward.slots[i].role != ir::Role::written) continue;
    const auto& expected = derived.gradients.slots[i];
    const auto& actual = lowered_gradients.slots[i];
    REQUIRE(actual.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
      CAPTURE(backward.slots[i].name);
      CAPTURE(k);
      REQUIRE(std::isfinite(expected[k]));
      CHECK(close(actual[k], expected[k], 1e-9));
    }
  }
  return derived;
}

// The gradient the backward program wrote for `element`.
inline double gradient_at(const Problem& problem, const Derived& derived, const Element& element) {
  if (derived.all_zero) return 0.0;
  const auto slot =
      derived.backward.find_slot(tilenorm::gradient_name(problem.forward.slots[element.slot].name));
  REQUIRE(slot.has_value());
  return derived.gradients.slots[*slot].at(element.index);
}

// Compares the gradients of every mode in `modes` with central differences at `elements`.
// `reference` (if given) is differentiated numerically instead of the forward itself (for
// straight-through casts). Returns the number of comparisons made.
inline int check(const Problem& problem, const std::vector<tilenorm::StatisticsMode>& modes,
                 const std::vector<Element>& elements, const ir::Program* reference = nullptr) {
  INFO("forward:\n", problem.forward.to_string());
  std::vector<Derived> derived;
  for (auto mode : modes) derived.push_back(derive(problem, mode));
  int compared = 0;
  for (const Element& element : elements) {
    const FiniteDifference fd = finite_difference(problem, element, reference);
    for (std::size_t m = 0; m < modes.size(); ++m) {
      const double gradient = gradient_at(problem, derived[m], element);
      CAPTURE(tilenorm::statistics_mode_name(modes[m]));
      CAPTURE(problem.forward.slots[element.slot].name);
      CAPTURE(element.index);
      CAPTURE(fd.derivative);
      CAPTURE(fd.tolerance);
      CHECK(std::fabs(gradient - fd.derivative) <= fd.tolerance);
      ++compared;
    }
  }
  return compared;
}

// Whether the forward program saves a statistic (so that saved mode differs from recompute).
inline bool saves_statistics(const ir::Program& forward) {
  return std::any_of(forward.slots.begin(), forward.slots.end(), [](const ir::Slot& s) {
    return s.role == ir::Role::written && s.shape == ir::Shape::row_scalar;
  });
}

// Whether the saved-mode backward reads one of the forward's row outputs back (so that saved
// mode differs from recompute). False where every gradient is identically zero.
inline bool reads_row_output_back(const ir::Program& forward) {
  std::optional<ir::Program> backward;
  try {
    backward = tilenorm::backward(forward, {tilenorm::StatisticsMode::saved});
  } catch (const tilenorm::ProgramError&) {
    return false;
  }
  return std::any_of(backward->slots.begin(), backward->slots.end(), [&](const ir::Slot& s) {
    const auto source = forward.find_slot(s.name);
    return s.role == ir::Role::read && s.shape == ir::Shape::tile && source &&
           forward.slots[*source].role == ir::Role::written;
  });
}

}  // namespace gradient_check
