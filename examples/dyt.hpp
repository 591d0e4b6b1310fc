#pragma once
// Dynamic Tanh (DyT), a normalization-free replacement for LayerNorm:
//   y = weight * tanh(alpha * x) + bias, with a learned scalar alpha.
// Its backward (dx, dweight, dbias and dalpha) comes from tilenorm::backward(dyt()).
#include <tilenorm/tilenorm.hpp>

inline tilenorm::ir::Program dyt() {
  return tilenorm::dsl::make_program("dyt", [](auto& p) {
    auto x = p.input("x");
    auto alpha = p.scalar("alpha", tilenorm::dsl::Grad::yes);
    auto weight = p.column("weight");
    auto bias = p.column("bias");
    p.output("y", weight * tanh(alpha * x) + bias);
  });
}
