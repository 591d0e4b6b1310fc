#pragma once
// Typed entry points for the built-in norms. Each validates its arguments, loads the kernel
// (compiled once, then cached in memory and on disk) and launches it on `stream`.
#include <optional>
#include <string_view>

#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace tilenorm {

namespace kernels {
// The built-in kernel of that name, loaded once per runtime.
const Norm& builtin(Runtime& runtime, std::string_view name);
}  // namespace kernels

// y = (x - mean) * rstd * weight + bias over each row. weight and bias are optional (bias
// needs weight). mean and rstd receive the per-row statistics unless their data is null.
void layer_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
                const std::optional<ColumnView>& bias, const TensorView& y, float eps,
                Stream stream, RowStatView mean = {}, RowStatView rstd = {});

// y = x * rsqrt(mean(x^2) + eps) * weight over each row; weight is optional. rstd receives the
// per-row statistic unless its data is null.
void rms_norm(Runtime& runtime, const TensorView& x, const std::optional<ColumnView>& weight,
              const TensorView& y, float eps, Stream stream, RowStatView rstd = {});

// The gradients of layer_norm: dx, and dweight / dbias when the forward had a weight / bias
// (they are required then). With the forward's saved mean and rstd (both non-null) the
// statistics are read back; with neither, they are recomputed from x (activation
// checkpointing). `workspace` holds the cross-row partial sums of dweight and dbias: see
// layer_norm_backward_workspace. Deterministic: the same inputs give the same bits.
struct LayerNormBackward {
  TensorView x, dy, dx;
  std::optional<ColumnView> weight, bias;  // the forward's parameters (bias: only its presence)
  std::optional<ColumnView> dweight, dbias;
  float eps = 1e-5f;
  RowStatView mean{}, rstd{};
};
void layer_norm_backward(Runtime& runtime, const LayerNormBackward& args, Workspace workspace,
                         Stream stream);
std::size_t layer_norm_backward_workspace(Runtime& runtime, const LayerNormBackward& args);

// The gradients of rms_norm: dx, and dweight when the forward had a weight. Saved rstd
// (non-null) or recomputed, as for layer_norm_backward.
struct RmsNormBackward {
  TensorView x, dy, dx;
  std::optional<ColumnView> weight, dweight;
  float eps = 1e-5f;
  RowStatView rstd{};
};
void rms_norm_backward(Runtime& runtime, const RmsNormBackward& args, Workspace workspace,
                       Stream stream);
std::size_t rms_norm_backward_workspace(Runtime& runtime, const RmsNormBackward& args);

}  // namespace tilenorm
