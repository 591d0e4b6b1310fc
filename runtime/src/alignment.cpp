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

namespace {

// The class of the q-th row in class-major order (as the device prelude's row_class).
std::int64_t class_of(std::int64_t q, std::int64_t rows, std::int64_t period) {
  const std::int64_t base = rows / period, extra = rows % period;
  const std::int64_t long_rows = extra * (base + 1);
  return q < long_rows ? q / (base + 1) : extra + (q - long_rows) / base;
}

}  // namespace

std::int64_t class_major_slots(std::int64_t rows, std::int64_t blocks, std::int64_t period) {
  if (rows <= 0 || blocks <= 0 || period <= 1) return 1;
  const std::int64_t per_block = (rows + blocks - 1) / blocks;
  std::int64_t most = 1;
  for (std::int64_t first = 0; first < rows; first += per_block) {
    const std::int64_t last = std::min(rows, first + per_block) - 1;
    most = std::max(most, class_of(last, rows, period) - class_of(first, rows, period) + 1);
  }
  return most;
}

}  // namespace tilenorm
