#pragma once
// The parts of code generation that only sm_90 and later GPUs run: a row split across the CTAs
// of a thread-block cluster. codegen.cpp calls these when KernelConfig::ctas_per_row > 1.
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace tilenorm::codegen_sm90 {

// One row reduction the cluster combines: its accumulator variable and its ReduceOp constant.
struct ClusterReduction {
  std::string accumulator;
  std::string op;
};

// Declarations every cluster kernel starts with: the cluster size check, this CTA's rank and
// the first column of its slice, the cluster's index and count, and the exchange buffers.
void emit_prologue(std::ostream& out, int ctas, int rows_per_cta, std::size_t reductions_per_phase);

// Turns CTA totals (every thread of a row holds its CTA's value) into row totals.
void emit_row_reduction(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        std::size_t reductions_per_phase);

// The last statement: no CTA may exit while another may still read its shared memory.
void emit_epilogue(std::ostream& out);

}  // namespace tilenorm::codegen_sm90
