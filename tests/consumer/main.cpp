// Built against the installed package: lowers a custom program, generates its CUDA source and
// compiles it with NVRTC (no GPU needed), which checks that the installed library finds NVRTC and
// its builtins without LD_LIBRARY_PATH or ld.so.conf, and says where it finds the tuning
// databases that ship with it.
#include <iostream>
#include <tilenorm/runtime/nvrtc.hpp>
#include <tilenorm/runtime/paths.hpp>
#include <tilenorm/runtime/tuning_db.hpp>
#include <tilenorm/tilenorm.hpp>

int main() {
  auto program = tilenorm::dsl::make_program("scaled_rms", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * rsqrt(mean(x * x) + p.scalar("eps")) * 2.0);
  });
  const tilenorm::LoweredProgram lowered = tilenorm::lower(program);
  const tilenorm::KernelSpec spec{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 1024,
      tilenorm::heuristic_config(lowered, tilenorm::DType::bf16, tilenorm::DType::bf16, 1024,
                                 tilenorm::DeviceLimits::hopper())};
  const auto kernel = tilenorm::generate_cuda(lowered, spec);
  std::cout << "consumer: generated " << kernel.name << " (" << kernel.source.size() << " bytes)\n";
  if (kernel.source.find("__global__") == std::string::npos) return 1;
  const tilenorm::CompiledKernel compiled =
      tilenorm::compile_cuda({kernel.source, kernel.name, "sm_90", {}});
  std::cout << "consumer: compiled with NVRTC " << tilenorm::nvrtc_version() << ", "
            << compiled.registers << " registers\n";
  const auto shipped = tilenorm::shipped_databases_directory();
  std::cout << "consumer: " << tilenorm::shipped_tuning_db_paths().size()
            << " shipped tuning databases in " << (shipped ? shipped->string() : "(none)") << "\n";
  return compiled.registers > 0 && !compiled.cubin.empty() ? 0 : 1;
}
