#pragma once
// The fp64 CPU interpreter of the IR: the oracle every kernel is tested against.
#include <cstdint>
#include <vector>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

struct InterpreterInputs {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::vector<double>> row_inputs;  // one per program row input, rows * cols, dense
  std::vector<std::vector<double>> columns;     // one per column parameter, cols each
  std::vector<double> scalars;                  // one per scalar
};

struct InterpreterOutputs {
  std::vector<std::vector<double>> row_outputs;  // rows * cols each, dense
  std::vector<std::vector<double>> row_stats;    // rows each
};

// Evaluates the program exactly as written (no passes), in fp64. Rows are independent and are
// spread over the host's threads. Throws ProgramError when the inputs do not match the
// program's declarations.
InterpreterOutputs interpret(const ir::Program& program, const InterpreterInputs& inputs);

}  // namespace tilenorm
