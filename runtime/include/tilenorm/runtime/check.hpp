#pragma once
// Runs a program on the GPU with fresh random inputs and poisoned outputs, and compares every
// output with the fp64 interpreter. Used by the GPU tests, the demo and the autotuner, so
// that all three check kernels the same way.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace tilenorm {

struct CheckOptions {
  DType io_dtype = DType::bf16;
  DType param_dtype = DType::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t extra_row_stride = 0;       // row_stride = cols + extra_row_stride (a strided view)
  std::int64_t element_offset = 0;         // start each tensor this many elements into its buffer
  std::int64_t column_element_offset = 0;  // the same for each column parameter read
  std::uint64_t seed = 1;
  std::vector<float> scalars{};          // empty: 1e-5 for every scalar (an eps)
  std::optional<KernelConfig> config{};  // empty: what the runtime chooses
  std::int64_t reference_rows = 0;       // > 0: compare only this many rows (spread over M)
  // Added to the range of every row input, [-2, 2.5): a large offset against that spread makes
  // a variance computed as E[x^2] - E[x]^2 cancel, which a numerically sound kernel survives.
  double row_input_offset = 0.0;
  // Added to the values of the read slots named here (row inputs, on top of row_input_offset;
  // column parameters; saved statistics): a saved backward's rows and their saved mean far
  // from zero together. A name that is not a read slot, or names a scalar (see `scalars`), is
  // an error (check_slot_offsets).
  std::map<std::string, double> slot_offsets{};
};

// Throws tilenorm::Error naming the slot when options.slot_offsets names no read slot of
// `program` other than a scalar. check_against_interpreter calls it before touching the GPU.
void check_slot_offsets(const ir::Program& program, const CheckOptions& options);

struct CheckReport {
  struct Output {
    std::string name;
    Comparison comparison;
  };
  std::vector<Output> outputs;  // row outputs, then statistics
  std::size_t unwritten = 0;    // output elements still holding the poison
  std::size_t clobbered = 0;    // bytes outside the views that changed
  ResolvedConfig used{};
  std::size_t workspace_bytes = 0;  // the launch's partial sums (programs that sum across rows)
  bool ok() const;
  std::string describe() const;
};

CheckReport check_against_interpreter(const Norm& norm, const CheckOptions& options);

}  // namespace tilenorm
