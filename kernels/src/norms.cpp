#include "tilenorm/kernels/norms.hpp"

#include <array>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace tilenorm {

const Norm& kernels::builtin(Runtime& runtime, std::string_view name) {
  return runtime.load_named(name, [name] { return builtin_program(name); });
}

void layer_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
                const std::optional<ColumnView>& bias, const TensorView& y, float eps,
                Stream stream, RowStatView mean, RowStatView rstd) {
  if (bias && !weight)
    throw Error("layer_norm: a bias needs a weight (pass both, the weight alone, or neither)");
  const char* name =
      !weight ? "layer_norm_no_affine" : (bias ? "layer_norm" : "layer_norm_no_bias");
  std::array<ColumnView, 2> columns{};
  std::size_t column_count = 0;
  if (weight) columns[column_count++] = *weight;
  if (bias) columns[column_count++] = *bias;
  const RowStatView stats[] = {mean, rstd};
  const float scalars[] = {eps};
  kernels::builtin(runtime, name).launch({{&x, 1}, {&y, 1}, {columns.data(), column_count}, stats, scalars},
                               stream);
}

void rms_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
              const TensorView& y, float eps, Stream stream, RowStatView rstd) {
  const ColumnView columns[] = {weight.value_or(ColumnView{})};
  const RowStatView stats[] = {rstd};
  const float scalars[] = {eps};
  kernels::builtin(runtime, weight ? "rms_norm" : "rms_norm_no_weight")
      .launch({{&x, 1}, {&y, 1}, {columns, weight ? 1u : 0u}, stats, scalars}, stream);
}

}  // namespace tilenorm
