#pragma once
// What a GPU test checks of a run it forced a configuration on: the interpreter's values, every
// output element written, and the configuration it asked for is the one that ran (a fallback
// would otherwise pass for it).
#include <doctest/doctest.h>

#include "tilenorm/runtime/check.hpp"

inline void check_forced_config(const tilenorm::CheckReport& report,
                                const tilenorm::KernelConfig& config) {
  INFO(report.describe());
  CHECK(report.ok());
  CHECK(report.unwritten == 0);
  CHECK(report.used.config == config);
}
