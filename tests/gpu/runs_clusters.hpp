#pragma once
// Whether a runtime's GPU runs thread-block clusters (sm_90 and later); where it does not, the
// test case says so and skips its cluster checks.
#include <doctest/doctest.h>

#include "tilenorm/tilenorm.hpp"

inline bool runs_clusters(const tilenorm::Runtime& runtime) {
  if (runtime.compute_capability_major() >= 9) return true;
  MESSAGE("skipped: thread-block clusters need sm_90 or later, this GPU is " << runtime.arch());
  return false;
}
