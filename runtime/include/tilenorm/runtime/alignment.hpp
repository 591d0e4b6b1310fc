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

// The grid (row blocks advanced per sweep) of a kernel that loops over row blocks and peels its
// rows, from the `blocks` it would otherwise take, for rows of `row_stride` elements peeled at
// `vec`. Such a kernel computes each thread's shift once, from its first row, and keeps its
// column partial sums at that shift's columns; so every row a thread handles must start at
// the same misalignment, which holds when a sweep advances by a whole number of periods of the
// rows' shift (vec / gcd(vec, row_stride), a power of two). Rounded down to such a multiple
// where that leaves one, else up to one period; a grid that covers all `row_blocks` in one
// sweep needs no rounding.
std::int64_t peeled_grid(std::int64_t blocks, std::int64_t row_blocks, std::int64_t row_stride,
                         int vec);

// The period of the shifts of rows `row_stride` elements apart, peeled at `vec` (a power of
// two): vec / gcd(vec, row_stride). Every row starts at the same shift when it is 1.
std::int64_t shift_period(std::int64_t row_stride, int vec);

// Whether a kernel that loops over row blocks and peels its rows should find each row's shift
// (KernelSpec::shift_per_row) rather than keep each thread's first: where whole periods of the
// shifts would leave more than a quarter of the `resident` row blocks idle. Finding each row's
// shift costs every row two shared-memory reads per chunk of each column parameter, which
// lost 1-5 points of the copy ceiling where whole periods keep 80-90% of the grid (bf16,
// H200, thirty-third session: LayerNorm N = 65537 on 56 of 62 clusters, 131071 on 24 of 30)
// and won 7-15 where they keep about half (N = 262143 on 8 of 15 and 8 of 14).
bool shift_per_row_pays(std::int64_t resident, std::int64_t period);

// The partial rows of column sums per row block of a kernel that sums across rows with each
// row at its own shift (KernelSpec::shift_per_row): each of the `blocks` row blocks walks
// ceil(rows / blocks) consecutive rows of the class-major order (rows grouped by r % period,
// the classes of one shift; see the device prelude's row_class) and writes a partial row
// for each class its walk touches. The most any row block needs, at least 1.
std::int64_t class_major_slots(std::int64_t rows, std::int64_t blocks, std::int64_t period);

}  // namespace tilenorm
