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

}  // namespace tilenorm
