#pragma once
// A custom norm written the way a user would: RMSNorm with Gemma's (1 + w) scale.
#include <tilenorm/tilenorm.hpp>

inline tilenorm::ir::Program gemma_rms_norm() {
  return tilenorm::dsl::make_program("gemma_rms_norm", [](auto& p) {
    auto x = p.input("x");
    auto weight = p.column("weight");
    auto eps = p.scalar("eps");
    auto rstd = rsqrt(mean(x * x) + eps);
    p.save("rstd", rstd);
    p.output("y", x * rstd * (1.0 + weight));
  });
}
