#pragma once
// CUDA C++ generation for a lowered program. The output is plain source text; compiling
// and launching it is the runtime's business, so this header has no CUDA dependency.
#include <boost/hana.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm {

// Bumped whenever generated code changes in a way that makes old tuning results stale.
inline constexpr int kCodegenVersion = 1;

// Where a thread keeps its share of the row between passes over it.
enum class RowStorage : int {
  registers = 0,  // loaded once into registers (fastest, needs the row to fit)
  shared = 1,     // stashed in shared memory on the first pass
  global = 2,     // re-read from global memory (L2) on every pass; any N
};
std::string_view row_storage_name(RowStorage storage);

// The tunable knobs, baked into the generated source as constexpr values.
struct KernelConfig {
  BOOST_HANA_DEFINE_STRUCT(KernelConfig, (int, threads_per_row),  // power of two, 1..1024
                           (int, rows_per_cta),  // power of two; block = product, 32..1024
                           (int, vec),           // elements per vector access, <= 16 bytes
                           (int, row_storage));  // a RowStorage value
  bool operator==(const KernelConfig& other) const;
  std::string describe() const;
};

struct KernelSpec {
  DType io_dtype = DType::bf16;     // row inputs and outputs
  DType param_dtype = DType::bf16;  // column parameters
  std::int64_t n = 0;               // the row length, a compile-time constant
  KernelConfig config{};
};

// The dynamic shared memory a launch of `spec` needs (non-zero only for RowStorage::shared).
std::size_t dynamic_shared_memory_bytes(const LoweredProgram& program, const KernelSpec& spec);

// Why `spec` cannot be generated for `program`, or nothing when it can.
std::optional<std::string> config_problem(const LoweredProgram& program, const KernelSpec& spec);

// The kernel's parameters in order; the runtime builds its argument array from this.
enum class ParamKind {
  row_input,
  row_input_stride,
  row_output,
  row_output_stride,
  column,
  row_stat,
  scalar,
  rows
};
struct KernelParam {
  ParamKind kind;
  int slot;  // index into the program's list of that kind
};

struct GeneratedKernel {
  std::string name;    // extern "C" symbol
  std::string source;  // the kernel, without the prelude
  std::vector<KernelParam> params;
  int threads_per_block = 0;
  int rows_per_cta = 0;
  std::size_t dynamic_shared_bytes = 0;  // for RowStorage::shared
  // The prelude followed by the kernel: a self-contained .cu translation unit.
  std::string full_source() const;
};

// Throws ProgramError (naming the problem) when config_problem() reports one.
GeneratedKernel generate_cuda(const LoweredProgram& program, const KernelSpec& spec);

// The embedded device prelude (dsl/prelude/tilenorm_prelude.cuh).
std::string_view device_prelude();

}  // namespace tilenorm
