#pragma once
// The built-in norms, written in the DSL like any user program.
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/ir.hpp"

namespace tilenorm::kernels {

enum class LayerNormAffine { weight_and_bias, weight_only, none };

// y = (x - mean) * rstd [* w [+ b]], saving mean and rstd per row.
ir::Program layer_norm_program(LayerNormAffine affine);
// y = x * rstd [* w], saving rstd per row.
ir::Program rms_norm_program(bool with_weight);

struct BuiltinKernel {
  std::string name;
  ir::Program program;
};

// Every built-in program under its CLI name: layer_norm, layer_norm_no_bias,
// layer_norm_no_affine, rms_norm, rms_norm_no_weight, then the derived backward of each
// (<name>_backward, reading the saved statistics) and <name>_backward_recompute.
const std::vector<BuiltinKernel>& builtin_kernels();
// Throws tilenorm::Error listing the valid names when `name` is unknown.
const ir::Program& builtin_program(std::string_view name);

}  // namespace tilenorm::kernels
