#pragma once
// Run-time compilation of CUDA C++ to a CUBIN for one real architecture with NVRTC. Works
// without a GPU or driver.
#include <span>
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

// The real architectures this NVRTC compiles for, as compute capabilities (75, 80, ..., 121).
std::vector<int> nvrtc_architectures();

// The oldest GPU generation tilenorm's kernels run on: sm_80 (cp.async, bf16 arithmetic).
inline constexpr int kOldestComputeCapability = 80;

// The architecture to compile kernels for on a GPU of `compute_capability` (90 for sm_90),
// named `device` in messages, given the architectures `nvrtc` knows: its own; where NVRTC does
// not know it, the newest one of the same major below it, whose cubins the GPU runs (sm_100 on
// an sm_121 GPU where NVRTC stops at sm_120). Throws Error naming the GPU, NVRTC's version and
// range where there is none, and for GPUs older than kOldestComputeCapability.
std::string target_arch(int compute_capability, std::string_view device, std::span<const int> nvrtc,
                        std::string_view nvrtc_version);
// The same, with this process's NVRTC.
std::string target_arch(int compute_capability, std::string_view device);

// Whether NVRTC `nvrtc_version` ("12.0") assembles the code of thread-block clusters' row
// exchange (st.async, PTX ISA 8.1: NVRTC 12.1 or later). NVRTC 11.8 and 12.0 compile every
// other kernel for sm_90 (checked with their PyPI builds, 2026-12-05).
bool nvrtc_assembles_clusters(std::string_view nvrtc_version);

// Why the driver may refuse NVRTC's cubins: where the CUDA version it supports (as
// cuDriverGetVersion() reports it, 12040 for 12.4) is older than `nvrtc_version` ("13.0"), a
// sentence that says so and what to do; else empty.
std::string older_driver_note(int driver_version, std::string_view nvrtc_version);

}  // namespace tilenorm
