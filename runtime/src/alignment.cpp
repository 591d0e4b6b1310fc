#include "tilenorm/runtime/alignment.hpp"

#include <algorithm>

namespace tilenorm {

int peel_vec(std::span<const RowPlacement> tensors, std::int64_t rows, int widest) {
  int vec = std::max(widest, 1);
  if (tensors.empty()) return vec;
  // Differences in unsigned arithmetic: wrapping modulo 2^64 keeps them right modulo any
  // power of two.
  auto offset = [](const RowPlacement& t) {
    return static_cast<std::uint64_t>(t.address / t.element_bytes);
  };
  auto stride = [](const RowPlacement& t) { return static_cast<std::uint64_t>(t.row_stride); };
  const RowPlacement& first = tensors.front();
  for (const RowPlacement& t : tensors) {
    const std::uint64_t offsets = offset(t) - offset(first);
    const std::uint64_t strides = rows > 1 ? stride(t) - stride(first) : 0;
    while (vec > 1 && (offsets % static_cast<std::uint64_t>(vec) != 0 ||
                       strides % static_cast<std::uint64_t>(vec) != 0))
      vec /= 2;
  }
  return vec;
}

std::int64_t shift_period(std::int64_t row_stride, int vec) {
  // gcd(vec, row_stride) for a power-of-two vec: the largest power of two up to vec that
  // divides the stride (in unsigned arithmetic, right modulo any power of two).
  const auto stride = static_cast<std::uint64_t>(row_stride);
  std::int64_t common = 1;
  while (common < vec && stride % static_cast<std::uint64_t>(2 * common) == 0) common *= 2;
  return std::max(vec, 1) / common;
}

std::int64_t peeled_grid(std::int64_t blocks, std::int64_t row_blocks, std::int64_t row_stride,
                         int vec) {
  if (blocks >= row_blocks) return row_blocks;
  const std::int64_t period = shift_period(row_stride, vec);
  return blocks >= period ? blocks / period * period : std::min(period, row_blocks);
}

bool shift_per_row_pays(std::int64_t resident, std::int64_t period) {
  const std::int64_t kept = resident >= period ? resident / period * period : 0;
  return 4 * kept < 3 * resident;
}

}  // namespace tilenorm
