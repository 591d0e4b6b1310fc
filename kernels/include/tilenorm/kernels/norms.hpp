#pragma once
// Typed entry points for the built-in norms. Each validates its arguments, loads the kernel
// (compiled once, then cached in memory and on disk) and launches it on `stream`.
#include <optional>

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

}  // namespace tilenorm
