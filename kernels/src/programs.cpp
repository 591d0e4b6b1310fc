#include "tilenorm/kernels/programs.hpp"

#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"

namespace tilenorm::kernels {

// Slots are declared in statements of their own, in the order the typed entry points pass
// them: the order of evaluation inside one expression is unspecified, and slot order is part
// of the program's identity.
ir::Program layer_norm_program(LayerNormAffine affine) {
  const char* name = affine == LayerNormAffine::weight_and_bias ? "layer_norm"
                     : affine == LayerNormAffine::weight_only   ? "layer_norm_no_bias"
                                                                : "layer_norm_no_affine";
  return dsl::make_program(name, [affine](auto& p) {
    auto x = p.input("x");
    auto eps = p.scalar("eps");
    auto mu = mean(x);
    auto centered = x - mu;
    auto rstd = rsqrt(mean(centered * centered) + eps);
    p.save("mean", mu);
    p.save("rstd", rstd);
    auto normalized = centered * rstd;
    if (affine == LayerNormAffine::none) {
      p.output("y", normalized);
      return;
    }
    auto weight = p.column("weight");
    auto scaled = normalized * weight;
    if (affine == LayerNormAffine::weight_only) {
      p.output("y", scaled);
    } else {
      auto bias = p.column("bias");
      p.output("y", scaled + bias);
    }
  });
}

ir::Program rms_norm_program(bool with_weight) {
  return dsl::make_program(with_weight ? "rms_norm" : "rms_norm_no_weight", [with_weight](auto& p) {
    auto x = p.input("x");
    auto eps = p.scalar("eps");
    auto rstd = rsqrt(mean(x * x) + eps);
    p.save("rstd", rstd);
    if (with_weight) {
      auto weight = p.column("weight");
      p.output("y", x * rstd * weight);
    } else {
      p.output("y", x * rstd);
    }
  });
}

const std::vector<BuiltinKernel>& builtin_kernels() {
  static const std::vector<BuiltinKernel> kernels = [] {
    std::vector<ir::Program> forward;
    for (auto affine :
         {LayerNormAffine::weight_and_bias, LayerNormAffine::weight_only, LayerNormAffine::none})
      forward.push_back(layer_norm_program(affine));
    for (bool with_weight : {true, false}) forward.push_back(rms_norm_program(with_weight));
    std::vector<BuiltinKernel> list;
    for (const auto& program : forward) list.push_back({program.name, program});
    // The backward of each, derived, with saved and with recomputed statistics.
    for (auto mode : {StatisticsMode::saved, StatisticsMode::recompute}) {
      for (const auto& program : forward) {
        ir::Program derived = backward(program, {mode});
        list.push_back({derived.name, std::move(derived)});
      }
    }
    return list;
  }();
  return kernels;
}

const ir::Program& builtin_program(std::string_view name) {
  std::string known;
  for (const auto& kernel : builtin_kernels()) {
    if (kernel.name == name) return kernel.program;
    known += (known.empty() ? "" : ", ") + kernel.name;
  }
  throw Error("unknown kernel '" + std::string(name) + "' (built-in kernels: " + known + ")");
}

}  // namespace tilenorm::kernels
