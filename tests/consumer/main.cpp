// Built against the installed package: lowers a custom program and generates its CUDA source.
#include <iostream>
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
  return kernel.source.find("__global__") != std::string::npos ? 0 : 1;
}
