#pragma once
// The pre-norm transformer block's "add & norm" in one pass: h = x + residual is written out as
// the next block's residual stream, and y = RMSNorm(h) * weight. Unfused, h makes an extra
// round trip through memory. Its backward comes from tilenorm::backward(residual_rms_norm()):
// from dy and dh it writes dx and dweight, reading h back instead of x and residual (saved
// mode). The residual's gradient is dx itself, as PyTorch hands one tensor to both; with
// Grad::yes the backward also writes it as dresidual, one more row.
#include <tilenorm/tilenorm.hpp>

inline tilenorm::ir::Program residual_rms_norm(
    tilenorm::dsl::Grad residual_grad = tilenorm::dsl::Grad::no) {
  return tilenorm::dsl::make_program("residual_rms_norm", [&](auto& p) {
    auto x = p.input("x");
    auto residual = p.input("residual", residual_grad);
    auto weight = p.column("weight");
    auto eps = p.scalar("eps");
    auto h = x + residual;  // kept in fp32 for the norm; stored in the row dtype
    p.output("h", h);
    p.output("y", h * rsqrt(mean(h * h) + eps) * weight);
  });
}
