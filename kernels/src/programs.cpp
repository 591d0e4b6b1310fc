#include "tilenorm/kernels/programs.hpp"

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"

namespace tilenorm::kernels {

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
    // Slots are declared in statements of their own: the order of evaluation inside one
    // expression is unspecified, and slot order is part of the program's identity.
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
      auto weight = p.column("weight");  // declared on its own: see layer_norm_program
      p.output("y", x * rstd * weight);
    } else {
      p.output("y", x * rstd);
    }
  });
}

const std::vector<BuiltinKernel>& builtin_kernels() {
  static const std::vector<BuiltinKernel> kernels = [] {
    std::vector<BuiltinKernel> list;
    for (auto affine :
         {LayerNormAffine::weight_and_bias, LayerNormAffine::weight_only, LayerNormAffine::none}) {
      ir::Program program = layer_norm_program(affine);
      list.push_back({program.name, std::move(program)});
    }
    for (bool with_weight : {true, false}) {
      ir::Program program = rms_norm_program(with_weight);
      list.push_back({program.name, std::move(program)});
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
