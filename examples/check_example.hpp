#pragma once
// The examples' main: runs a program and its derived backward on the GPU with fresh random
// inputs and checks every output against the fp64 interpreter. Without a GPU it generates the
// kernels, says what it generated, and exits 77, which CTest reports as skipped.
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <tilenorm/tilenorm.hpp>
#include <utility>

#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"

inline int check_example(const std::string& name, const tilenorm::ir::Program& program) {
  constexpr std::int64_t kRows = 4096, kCols = 4096;
  constexpr tilenorm::DType kDType = tilenorm::DType::bf16;
  try {
    const std::pair<const char*, tilenorm::ir::Program> passes[] = {
        {"forward", program}, {"backward", tilenorm::backward(program)}};
    if (!tilenorm::driver::gpu_available()) {
      for (const auto& [pass, version] : passes) {
        const tilenorm::LoweredProgram lowered = tilenorm::lower(version);
        const tilenorm::KernelConfig config = tilenorm::heuristic_config(
            lowered, kDType, kDType, kCols, tilenorm::DeviceLimits::hopper());
        const tilenorm::GeneratedKernel kernel =
            tilenorm::generate_cuda(lowered, {kDType, kDType, kCols, config});
        std::cout << name << " " << pass << ": " << kernel.name
                  << (kernel.finish ? " and " + kernel.finish->name : std::string()) << ", "
                  << kernel.source.size() << " bytes of CUDA for bf16 N = " << kCols << " ("
                  << config.describe() << ")\n";
      }
      std::cout << "no GPU (" << tilenorm::driver::gpu_unavailable_reason()
                << "): generated the kernels only\n";
      return 77;
    }
    tilenorm::Runtime runtime;
    bool all_ok = true;
    for (const auto& [pass, version] : passes) {
      const tilenorm::CheckReport report = tilenorm::check_against_interpreter(
          runtime.load(version),
          {.io_dtype = kDType, .param_dtype = kDType, .rows = kRows, .cols = kCols, .seed = 2026});
      std::cout << name << " " << pass << " bf16 [" << kRows << " x " << kCols << "] on "
                << runtime.device_name() << ": " << report.describe() << "\n";
      all_ok = all_ok && report.ok();
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 1;
  }
}
