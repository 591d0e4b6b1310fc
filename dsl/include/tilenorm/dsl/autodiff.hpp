#pragma once
// Reverse-mode automatic differentiation of a forward program into its backward program.
//
// The backward program reads what the forward read, plus d<out> for every row output the
// forward writes (the incoming gradient), and writes d<slot> for every read slot marked
// Grad::yes: dX for row inputs (Tiles), dW/dB for columns (sums over rows), and the gradient
// of a learned scalar (a sum over everything). Saved statistics are not differentiated: they
// are side outputs.
//
// Two modes:
//   saved      the forward's saved statistics (save(...)) are read back instead of recomputed
//              (not a saved maximum or minimum, which the gradient's routing compares the row
//              with), and so is a row output wherever that reads fewer rows (h = x + residual
//              read back in place of x and residual);
//   recompute  they are recomputed from the inputs inside the backward kernel (activation
//              checkpointing: nothing saved, no extra bytes read).
// Read slots the backward does not need (eps, once rstd is read back) are dropped.
#include <string>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

enum class StatisticsMode { saved, recompute };
std::string_view statistics_mode_name(StatisticsMode mode);

struct BackwardOptions {
  StatisticsMode mode = StatisticsMode::saved;
};

// The name of the gradient slot of `name`: "d" + name.
std::string gradient_name(const std::string& name);

// Throws ProgramError naming the operation when one on the path to a gradient has no
// derivative rule, and when the forward marks no slot Grad::yes.
ir::Program backward(const ir::Program& forward, const BackwardOptions& options = {});

}  // namespace tilenorm
