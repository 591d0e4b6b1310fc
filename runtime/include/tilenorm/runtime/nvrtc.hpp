#pragma once
// Run-time compilation of CUDA C++ to a CUBIN for one real architecture with NVRTC. Works
// without a GPU or driver.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

struct CompileRequest {
  std::string source;
  std::string kernel_name;           // The extern "C" name; picks the kernel in the ptxas report.
  std::string arch;                  // A real architecture such as "sm_90" or "sm_90a".
  std::vector<std::string> options;  // Extra NVRTC options, after the fixed ones.
};

struct CompiledKernel {
  std::vector<char> cubin;
  std::string log;  // The NVRTC program log, including the ptxas -v report.
  // From the ptxas -v report (registers stays -1 if the report names no kernel).
  int registers = -1;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;
  int shared_memory_bytes = 0;  // Static shared memory only.
  bool from_disk_cache = false;

  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

// NVRTC rejected the source; what() carries the kernel name, arch, options, log and the
// numbered source.
class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log)
      : Error(message), log_(std::move(log)) {}
  const std::string& log() const noexcept { return log_; }

 private:
  std::string log_;
};

// Throws Error unless `arch` is "sm_" followed by digits, optionally with an "a" suffix.
void validate_arch(std::string_view arch);

// Compiles with --gpu-architecture=<arch> -std=c++17 --ptxas-options=-v --no-cache and then
// request.options, and fills the resource fields from the ptxas report.
CompiledKernel compile_cuda(const CompileRequest& request);

// The NVRTC library version, e.g. "13.0".
std::string nvrtc_version();

}  // namespace tilenorm
