// Entry point of the GPU tests: without a usable GPU they are skipped (exit code 77, which
// CTest reports as "Skipped") and the reason is printed, so they never pass silently.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "tilenorm/runtime/driver.hpp"

int main(int argc, char** argv) {
  if (!tilenorm::driver::gpu_available()) {
    std::cout << "SKIPPED: the GPU tests need a CUDA GPU: "
              << tilenorm::driver::gpu_unavailable_reason() << "\n";
    return 77;
  }
  const auto info = tilenorm::driver::device_info(0);
  std::cout << "GPU tests on " << info.name << " (" << info.arch() << ")\n";
  doctest::Context context(argc, argv);
  return context.run();
}
