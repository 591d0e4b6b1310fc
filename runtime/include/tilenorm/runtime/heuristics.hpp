#pragma once
// The built-in configuration used for shapes nobody tuned: correct for any N, and close to
// the tuned speed for common ones.
#include <cstddef>
#include <cstdint>

#include "tilenorm/dsl/codegen.hpp"

namespace tilenorm {

struct DeviceLimits {
  std::size_t shared_memory_per_block = 48 * 1024;  // with the opt-in, for dynamic smem
  int multiprocessors = 1;
  // The H100/H200 (sm_90) limits, for generating code without a GPU.
  static DeviceLimits hopper() { return {227 * 1024, 132}; }
};

// The widest vector (elements) whose accesses stay within 16 bytes for these dtypes.
int widest_vec(DType io_dtype, DType param_dtype);

// `max_vec` (0: the widest) caps the vector width, e.g. for pointers that are not 16-byte aligned.
KernelConfig heuristic_config(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                              std::int64_t n, const DeviceLimits& limits, int max_vec = 0);

}  // namespace tilenorm
