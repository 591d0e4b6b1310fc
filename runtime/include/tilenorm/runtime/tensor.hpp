#pragma once
// Views of caller-owned device memory. tilenorm never allocates or frees these.
#include <cstdint>
#include <string>

#include "tilenorm/dsl/dtype.hpp"

namespace tilenorm {

// An [rows, cols] tensor whose rows start row_stride elements apart (row_stride >= cols).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;

  static TensorView contiguous(void* data, DType dtype, std::int64_t rows, std::int64_t cols) {
    return {data, dtype, rows, cols, cols};
  }
};

// An [size] parameter such as a weight or bias.
struct ColumnView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  std::int64_t size = 0;
};

// An [rows] fp32 per-row statistic. A null `data` means "not wanted": it is not written.
struct RowStatView {
  float* data = nullptr;
  std::int64_t rows = 0;
};

}  // namespace tilenorm

namespace tilenorm {

// One written fp32 scalar in device memory (a learned scalar's gradient).
struct ScalarView {
  float* data = nullptr;
};

// Caller-owned device scratch memory for the cross-row partial sums of a backward launch
// (Norm::workspace_bytes says how much).
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// One launch argument, for one program slot: a view of device memory, or (for a read Scalar
// slot) a value. Built implicitly from each view type, so that a launch reads
//   norm.launch({x, eps, mean, rstd, weight, bias, y}, stream);
// with the arguments in the order the program declared its slots.
class Arg {
 public:
  enum class Kind { rows, column, row_stat, scalar_value, scalar_out };
  Arg() = default;  // an empty row view (rejected by a launch as a null pointer)
  Arg(const TensorView& t) : kind_(Kind::rows), tensor_(t) {}
  Arg(const ColumnView& c) : kind_(Kind::column), tensor_{c.data, c.dtype, 1, c.size, c.size} {}
  Arg(const RowStatView& s) : kind_(Kind::row_stat), tensor_{s.data, DType::f32, s.rows, 1, 1} {}
  Arg(const ScalarView& s) : kind_(Kind::scalar_out), tensor_{s.data, DType::f32, 1, 1, 1} {}
  Arg(float value) : kind_(Kind::scalar_value), value_(value) {}

  Kind kind() const { return kind_; }
  // Rows: the view; Column: [1, size]; RowStat: [rows, 1]; ScalarView: [1, 1].
  const TensorView& view() const { return tensor_; }
  float value() const { return value_; }

 private:
  Kind kind_ = Kind::rows;
  TensorView tensor_{};
  float value_ = 0.0f;
};

}  // namespace tilenorm
