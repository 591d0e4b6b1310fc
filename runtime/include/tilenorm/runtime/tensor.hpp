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
