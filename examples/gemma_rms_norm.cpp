// Runs the Gemma RMSNorm variant on the GPU and checks it against the fp64 interpreter.
// Without a GPU it prints the generated CUDA source instead and exits 77 ("skipped").
#include "gemma_rms_norm.hpp"

#include <iostream>

#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"

int main() {
  try {
    const tilenorm::ir::Program program = gemma_rms_norm();
    if (!tilenorm::driver::gpu_available()) {
      const tilenorm::LoweredProgram lowered = tilenorm::lower(program);
      const tilenorm::KernelSpec spec{
          tilenorm::DType::bf16, tilenorm::DType::bf16, 4096,
          tilenorm::heuristic_config(lowered, tilenorm::DType::bf16, tilenorm::DType::bf16, 4096,
                                     tilenorm::DeviceLimits::hopper())};
      std::cout << tilenorm::generate_cuda(lowered, spec).source;
      std::cout << "no GPU (" << tilenorm::driver::gpu_unavailable_reason()
                << "): printed the source only\n";
      return 77;
    }
    tilenorm::Runtime runtime;
    const tilenorm::Norm norm = runtime.load(program);
    const tilenorm::CheckReport report =
        tilenorm::check_against_interpreter(norm, {.io_dtype = tilenorm::DType::bf16,
                                                   .param_dtype = tilenorm::DType::bf16,
                                                   .rows = 4096,
                                                   .cols = 4096,
                                                   .seed = 2026});
    std::cout << "gemma_rms_norm bf16 [4096 x 4096] on " << runtime.device_name() << ": "
              << report.describe() << "\n";
    return report.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gemma_rms_norm: error: " << e.what() << "\n";
    return 1;
  }
}
