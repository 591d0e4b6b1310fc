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

std::int64_t peeled_grid(std::int64_t blocks, std::int64_t row_blocks, std::int64_t row_stride,
                         int vec) {
  if (blocks >= row_blocks) return row_blocks;
  // gcd(vec, row_stride) for a power-of-two vec: the largest power of two up to vec that
  // divides the stride (in unsigned arithmetic, right modulo any power of two).
  const auto stride = static_cast<std::uint64_t>(row_stride);
  std::int64_t common = 1;
  while (common < vec && stride % static_cast<std::uint64_t>(2 * common) == 0) common *= 2;
  const std::int64_t period = std::max(vec, 1) / common;
  return blocks >= period ? blocks / period * period : std::min(period, row_blocks);
}

}  // namespace tilenorm
