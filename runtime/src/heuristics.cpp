#include "tilenorm/runtime/heuristics.hpp"

#include <algorithm>

namespace tilenorm {
namespace {

int next_power_of_two(std::int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

// Small rows get several rows per CTA so that a block still has a useful number of threads.
KernelConfig with_rows(int threads_per_row, int vec, RowStorage storage) {
  const int rows = std::max(1, 256 / threads_per_row);
  return {threads_per_row, rows, vec, static_cast<int>(storage)};
}

}  // namespace

int widest_vec(DType io_dtype, DType param_dtype) {
  return static_cast<int>(16 / std::max(dtype_size(io_dtype), dtype_size(param_dtype)));
}

KernelConfig heuristic_config(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                              std::int64_t n, const DeviceLimits& limits, int max_vec) {
  const int widest = widest_vec(io_dtype, param_dtype);
  const int vec = max_vec > 0 ? std::min(widest, max_vec) : widest;
  const std::int64_t chunks = (n + vec - 1) / vec;
  auto fits = [&](const KernelConfig& config) {
    const KernelSpec spec{io_dtype, param_dtype, n, config};
    return !config_problem(program, spec) &&
           dynamic_shared_memory_bytes(program, spec) <= limits.shared_memory_per_block;
  };
  // Registers: about four vectors per thread, as few threads per row as that allows. A
  // backward keeps column partial sums beside its rows, so it takes one vector per thread:
  // fewer registers, more CTAs resident to hide the latency of its loads.
  const std::int64_t vectors_per_thread = plan_kernels(program).needs_finish() ? 1 : 4;
  const int narrowest = std::min(32, next_power_of_two(chunks));
  const int per_row = std::clamp(
      next_power_of_two((chunks + vectors_per_thread - 1) / vectors_per_thread), narrowest, 1024);
  for (int threads = per_row; threads <= 1024; threads *= 2) {
    const KernelConfig config = with_rows(threads, vec, RowStorage::registers);
    if (fits(config)) return config;
  }
  // Too large for registers: stash the row in shared memory, else re-read it from L2/HBM.
  const KernelConfig shared = with_rows(1024, vec, RowStorage::shared);
  if (fits(shared)) return shared;
  return with_rows(1024, vec, RowStorage::global);
}

}  // namespace tilenorm
