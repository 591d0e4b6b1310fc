#pragma once
// A norm with four independent reductions of x in one phase: the mean, the mean of squares,
// the maximum and the minimum, each its own accumulator. tilenorm-bench times it
// (`--ops four_reductions`) for programs with several reductions per phase.
#include <tilenorm/tilenorm.hpp>

inline tilenorm::ir::Program four_reductions() {
  return tilenorm::dsl::make_program("four_reductions", [](auto& p) {
    auto x = p.input("x");
    auto weight = p.column("weight");
    auto eps = p.scalar("eps");
    auto range = max(x) - min(x) + 1.0;
    p.output("y", weight * (x - mean(x)) * rsqrt(mean(x * x) + eps) / range);
  });
}
