#pragma once
// How wide a launch's vectors may be when its rows start misaligned (alignment peeling).
#include <cstddef>
#include <cstdint>
#include <span>

namespace tilenorm {

// Where one row tensor's rows start: the address of element (0, 0), the element size and the
// row stride in elements. The address is a multiple of the element size.
struct RowPlacement {
  std::uintptr_t address = 0;
  std::size_t element_bytes = 1;
  std::int64_t row_stride = 0;
};

// The widest vector width (a power of two, at most `widest`) for which alignment peeling
// works: every row of every tensor starts at the same element offset modulo that width, so
// one shift per row aligns the vectors of all of them. That holds when the base pointers'
// element offsets (address / element size) agree modulo the width and so do the row strides
// (which do not matter for a single row). Unlike full alignment, neither needs to be a
// multiple of the width: bf16 rows of N = 4097 elements, an odd row stride or a base pointer
// a few elements into a buffer all keep the widest vector.
int peel_vec(std::span<const RowPlacement> tensors, std::int64_t rows, int widest);

}  // namespace tilenorm
