#pragma once
// The pre-norm transformer block's "add & norm" in one pass: h = x + residual is written out as
// the next block's residual stream, and y = RMSNorm(h) * weight. Unfused, h makes an extra
// round trip through memory. Its backward (dx and dresidual from dy and dh, and dweight) comes
// from tilenorm::backward(residual_rms_norm()).
#include <tilenorm/tilenorm.hpp>

inline tilenorm::ir::Program residual_rms_norm() {
  return tilenorm::dsl::make_program("residual_rms_norm", [](auto& p) {
    auto x = p.input("x");
    auto residual = p.input("residual");
    auto weight = p.column("weight");
    auto eps = p.scalar("eps");
    auto h = x + residual;  // kept in fp32 for the norm; stored in the row dtype
    p.output("h", h);
    p.output("y", h * rsqrt(mean(h * h) + eps) * weight);
  });
}
