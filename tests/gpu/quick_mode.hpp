#pragma once
// TILENORM_GPU_TESTS=quick: the GPU tests run a smaller matrix (for compute-sanitizer).
#include <cstdlib>
#include <string_view>

inline bool quick() {
  const char* mode = std::getenv("TILENORM_GPU_TESTS");
  return mode && std::string_view(mode) == "quick";
}
