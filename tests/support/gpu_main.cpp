// Entry point of the GPU tests: without a usable GPU they are skipped (exit code 77, which
// CTest reports as "Skipped") and the reason is printed, so they never pass silently.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>
#include <string_view>

#include "tilenorm/runtime/driver.hpp"

namespace {

// Whether doctest is only asked to list test cases (scripts/sanitize-gpu-tests --split does,
// also on a machine without a GPU): nothing runs, so no GPU is needed.
bool lists_only(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "--list-test-cases" || argument == "-ltc" || argument == "--dt-list-test-cases")
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (lists_only(argc, argv)) return doctest::Context(argc, argv).run();
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
