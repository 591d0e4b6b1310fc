#include "tilenorm/kernels/norms.hpp"

#include <string>
#include <string_view>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace tilenorm {

const Norm& kernels::builtin(Runtime& runtime, std::string_view name) {
  return runtime.load_named(name, [name] { return builtin_program(name); });
}

namespace {

const char* layer_norm_name(bool weight, bool bias) {
  if (bias && !weight)
    throw Error("layer_norm: a bias needs a weight (pass both, the weight alone, or neither)");
  return !weight ? "layer_norm_no_affine" : (bias ? "layer_norm" : "layer_norm_no_bias");
}

// A missing optional view binds as an empty one; the program of that variant has no such slot.
Arg column_or_empty(const std::optional<ColumnView>& column) {
  return column.value_or(ColumnView{});
}

// The built-in backward of `forward`: reading the saved statistics when all are given,
// recomputing them when none is. Picked from the built-in names, so a launch builds no string.
std::string_view backward_name(std::string_view forward, std::initializer_list<RowStatView> stats) {
  std::size_t given = 0;
  for (const RowStatView& s : stats) given += s.data != nullptr;
  if (given != 0 && given != stats.size()) {
    throw Error(std::string(forward) +
                "_backward: pass every saved statistic (read back) or none (recomputed)");
  }
  const std::string_view suffix = given ? "_backward" : "_backward_recompute";
  for (const auto& kernel : kernels::builtin_kernels()) {
    const std::string_view name = kernel.name;
    if (name.size() == forward.size() + suffix.size() && name.starts_with(forward) &&
        name.ends_with(suffix))
      return name;
  }
  throw Error("no built-in backward for '" + std::string(forward) + "'");
}

void require_gradient(const char* op, const char* what, bool needed, bool given) {
  if (needed && !given)
    throw Error(std::string(op) + ": the forward had a " + what + ", so d" + what + " is needed");
  if (!needed && given)
    throw Error(std::string(op) + ": d" + what + " given, but the forward had no " + what);
}

BoundArgs layer_norm_backward_args(const Norm& norm, const LayerNormBackward& a) {
  require_gradient("layer_norm_backward", "weight", a.weight.has_value(), a.dweight.has_value());
  require_gradient("layer_norm_backward", "bias", a.bias.has_value(), a.dbias.has_value());
  return bind_args(norm.program(), {{"x", a.x},
                                    {"dy", a.dy},
                                    {"dx", a.dx},
                                    {"weight", column_or_empty(a.weight)},
                                    {"dweight", column_or_empty(a.dweight)},
                                    {"dbias", column_or_empty(a.dbias)},
                                    {"eps", a.eps},
                                    {"mean", a.mean},
                                    {"rstd", a.rstd}});
}

const Norm& layer_norm_backward_norm(Runtime& runtime, const LayerNormBackward& a) {
  const char* forward = layer_norm_name(a.weight.has_value(), a.bias.has_value());
  return kernels::builtin(runtime, backward_name(forward, {a.mean, a.rstd}));
}

BoundArgs rms_norm_backward_args(const Norm& norm, const RmsNormBackward& a) {
  require_gradient("rms_norm_backward", "weight", a.weight.has_value(), a.dweight.has_value());
  return bind_args(norm.program(), {{"x", a.x},
                                    {"dy", a.dy},
                                    {"dx", a.dx},
                                    {"weight", column_or_empty(a.weight)},
                                    {"dweight", column_or_empty(a.dweight)},
                                    {"eps", a.eps},
                                    {"rstd", a.rstd}});
}

const Norm& rms_norm_backward_norm(Runtime& runtime, const RmsNormBackward& a) {
  return kernels::builtin(runtime,
                          backward_name(a.weight ? "rms_norm" : "rms_norm_no_weight", {a.rstd}));
}

}  // namespace

void layer_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
                const std::optional<ColumnView>& bias, const TensorView& y, float eps,
                Stream stream, RowStatView mean, RowStatView rstd) {
  const Norm& norm =
      kernels::builtin(runtime, layer_norm_name(weight.has_value(), bias.has_value()));
  norm.launch(bind_args(norm.program(), {{"x", x},
                                         {"weight", column_or_empty(weight)},
                                         {"bias", column_or_empty(bias)},
                                         {"y", y},
                                         {"eps", eps},
                                         {"mean", mean},
                                         {"rstd", rstd}}),
              stream);
}

void rms_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
              const TensorView& y, float eps, Stream stream, RowStatView rstd) {
  const Norm& norm = kernels::builtin(runtime, weight ? "rms_norm" : "rms_norm_no_weight");
  norm.launch(
      bind_args(
          norm.program(),
          {{"x", x}, {"weight", column_or_empty(weight)}, {"y", y}, {"eps", eps}, {"rstd", rstd}}),
      stream);
}

void layer_norm_backward(Runtime& runtime, const LayerNormBackward& args, Workspace workspace,
                         Stream stream) {
  const Norm& norm = layer_norm_backward_norm(runtime, args);
  norm.launch(layer_norm_backward_args(norm, args), stream, workspace);
}

std::size_t layer_norm_backward_workspace(Runtime& runtime, const LayerNormBackward& args) {
  const Norm& norm = layer_norm_backward_norm(runtime, args);
  return norm.workspace_bytes(layer_norm_backward_args(norm, args));
}

void rms_norm_backward(Runtime& runtime, const RmsNormBackward& args, Workspace workspace,
                       Stream stream) {
  const Norm& norm = rms_norm_backward_norm(runtime, args);
  norm.launch(rms_norm_backward_args(norm, args), stream, workspace);
}

std::size_t rms_norm_backward_workspace(Runtime& runtime, const RmsNormBackward& args) {
  const Norm& norm = rms_norm_backward_norm(runtime, args);
  return norm.workspace_bytes(rms_norm_backward_args(norm, args));
}

}  // namespace tilenorm
