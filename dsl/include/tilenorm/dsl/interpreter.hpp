#pragma once
// The fp64 CPU interpreter of the IR: the oracle every kernel is tested against.
#include <cstdint>
#include <vector>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

// The number of values a slot of `shape` holds for an [rows, cols] launch, densely stored:
// Tile rows * cols, Column cols, RowScalar rows, Scalar 1.
std::size_t slot_elements(ir::Shape shape, std::int64_t rows, std::int64_t cols);

struct InterpreterInputs {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  // One entry per program slot, in slot order: read slots hold their values (slot_elements
  // of them); written slots are ignored (leave them empty).
  std::vector<std::vector<double>> slots;
};

struct InterpreterOutputs {
  // One entry per program slot: written slots hold their values, read slots are empty.
  std::vector<std::vector<double>> slots;
};

// Evaluates the program exactly as written (no passes), in fp64. Rows are independent and are
// spread over the host's threads; sums across rows add the rows in order. Throws ProgramError
// when the inputs do not match the program's slots.
InterpreterOutputs interpret(const ir::Program& program, const InterpreterInputs& inputs);

}  // namespace tilenorm
