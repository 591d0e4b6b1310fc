// The host side of alignment peeling: which vector width the row tensors of a launch allow
// when every row may start misaligned, as long as all of them are misaligned alike.
#include "tilenorm/runtime/alignment.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace {

using tilenorm::peel_vec;
using tilenorm::peeled_grid;
using tilenorm::RowPlacement;

constexpr std::uintptr_t kBase = 0x7f0000000000;  // 256-byte aligned, like cudaMalloc
constexpr std::size_t kBf16 = 2;
constexpr std::size_t kF32 = 4;

}  // namespace

TEST_CASE("peel_vec: aligned rows keep the widest vector") {
  const std::vector<RowPlacement> tensors = {{kBase, kBf16, 4096}, {kBase + 0x100000, kBf16, 4096}};
  CHECK(peel_vec(tensors, 1000, 8) == 8);
  CHECK(peel_vec(tensors, 1000, 4) == 4);  // never wider than asked
  CHECK(peel_vec({}, 1000, 8) == 8);
}

TEST_CASE("peel_vec: the same odd stride or offset in every tensor keeps the widest vector") {
  // Contiguous bf16 rows of N = 4097: every row starts one element later modulo 8.
  CHECK(peel_vec(std::vector<RowPlacement>{{kBase, kBf16, 4097}, {kBase + 0x100000, kBf16, 4097}},
                 1000, 8) == 8);
  // Odd strides (N + 3) and base pointers one element into their buffers, alike.
  CHECK(peel_vec(std::vector<RowPlacement>{{kBase + 2, kBf16, 4099}, {kBase + 0x2002, kBf16, 4099}},
                 1000, 8) == 8);
  // Different element sizes count in elements: an fp32 tensor 3 elements in (12 bytes) beside
  // a bf16 tensor 3 elements in (6 bytes).
  CHECK(peel_vec(
            std::vector<RowPlacement>{{kBase + 6, kBf16, 1027}, {kBase + 0x4000 + 12, kF32, 1027}},
            1000, 4) == 4);
}

TEST_CASE("peel_vec: tensors misaligned differently get a narrower vector") {
  // x starts 1 element in, y 3 elements in: they agree modulo 2 only.
  CHECK(peel_vec(
            std::vector<RowPlacement>{{kBase + 2, kBf16, 4096}, {kBase + 0x8000 + 6, kBf16, 4096}},
            1000, 8) == 2);
  // x one element in, y aligned: no vector at all.
  CHECK(peel_vec(std::vector<RowPlacement>{{kBase + 2, kBf16, 4096}, {kBase + 0x8000, kBf16, 4096}},
                 1000, 8) == 1);
  // Strides that differ by 4 elements: vectors of 4.
  CHECK(peel_vec(std::vector<RowPlacement>{{kBase, kBf16, 4097}, {kBase + 0x100000, kBf16, 4101}},
                 1000, 8) == 4);
  // ... which does not matter for a single row.
  CHECK(peel_vec(std::vector<RowPlacement>{{kBase, kBf16, 4097}, {kBase + 0x100000, kBf16, 4101}},
                 1, 8) == 8);
}

TEST_CASE("peeled_grid: every sweep advances by whole periods of the rows' shift") {
  // bf16 rows of an odd stride at vec 8 repeat their shift every 8 rows: 132 -> 128 row blocks.
  CHECK(peeled_grid(132, 100000, 12345, 8) == 128);
  // A stride of 2 mod 8 repeats every 4 rows, 4 mod 8 every 2, 0 mod 8 every row.
  CHECK(peeled_grid(130, 100000, 12346, 8) == 128);
  CHECK(peeled_grid(131, 100000, 12348, 8) == 130);
  CHECK(peeled_grid(131, 100000, 12352, 8) == 131);
  // Fewer row blocks than a period: up to one period (a second wave, still correct)...
  CHECK(peeled_grid(7, 100000, 12345, 8) == 8);
  // ... but never more than the rows need, and a grid that covers the rows in one sweep is
  // left alone (each thread handles one row).
  CHECK(peeled_grid(7, 5, 12345, 8) == 5);
  CHECK(peeled_grid(132, 100, 12345, 8) == 100);
  // fp32 at vec 4: an odd stride repeats every 4 rows.
  CHECK(peeled_grid(263, 100000, 4097, 4) == 260);
  // Whatever the grid, row r and row r + grid start at the same element offset modulo vec.
  for (std::int64_t stride : {1, 2, 3, 5, 6, 7, 12345, 4098}) {
    for (std::int64_t blocks : {1, 3, 7, 9, 132, 264}) {
      const std::int64_t grid = peeled_grid(blocks, 1 << 20, stride, 8);
      CAPTURE(stride);
      CAPTURE(blocks);
      CHECK((grid * stride) % 8 == 0);
      CHECK(grid >= 1);
      CHECK(grid <= std::max<std::int64_t>(blocks, 8));
    }
  }
}

TEST_CASE("shift_period: vec / gcd(vec, row stride)") {
  CHECK(tilenorm::shift_period(12345, 8) == 8);
  CHECK(tilenorm::shift_period(12346, 8) == 4);
  CHECK(tilenorm::shift_period(12348, 8) == 2);
  CHECK(tilenorm::shift_period(12352, 8) == 1);
  CHECK(tilenorm::shift_period(4097, 4) == 4);
  CHECK(tilenorm::shift_period(4098, 1) == 1);
}

TEST_CASE(
    "shift_per_row_pays where whole periods of shifts would idle over a quarter of the grid") {
  using tilenorm::shift_per_row_pays;
  // The H200's long rows: 15 or 14 resident clusters keep 8 busy; 30, 28 or 62 keep 24 or 56.
  CHECK(shift_per_row_pays(15, 8));
  CHECK(shift_per_row_pays(14, 8));
  CHECK_FALSE(shift_per_row_pays(30, 8));
  CHECK_FALSE(shift_per_row_pays(28, 8));
  CHECK_FALSE(shift_per_row_pays(62, 8));
  // The boundary: 16 of 21 is over three quarters, 16 of 22 under.
  CHECK_FALSE(shift_per_row_pays(21, 8));
  CHECK(shift_per_row_pays(22, 8));
  // Fewer resident than one period (the grid would then wait for a second wave), and none idle.
  CHECK(shift_per_row_pays(5, 8));
  CHECK_FALSE(shift_per_row_pays(8, 8));
  CHECK_FALSE(shift_per_row_pays(7, 1));
  // A shorter period (stride 2 mod 8) idles less.
  CHECK_FALSE(shift_per_row_pays(15, 4));
  CHECK(shift_per_row_pays(7, 4));
}

TEST_CASE("class_major_slots: the partial rows a row block's walk of the class-major order needs") {
  // The class-major order, listed: the rows of each class r % period in row order, class 0
  // first. A row block's walk of ceil(rows / blocks) positions needs a partial row for each
  // class it meets.
  auto listed_slots = [](std::int64_t rows, std::int64_t blocks, std::int64_t period) {
    std::vector<std::int64_t> classes;
    for (std::int64_t c = 0; c < period; ++c)
      for (std::int64_t r = c; r < rows; r += period) classes.push_back(c);
    const std::int64_t per_block = (rows + blocks - 1) / blocks;
    std::int64_t most = 1;
    for (std::int64_t first = 0; first < rows; first += per_block) {
      std::set<std::int64_t> met;
      for (std::int64_t q = first; q < std::min(rows, first + per_block); ++q)
        met.insert(classes[static_cast<std::size_t>(q)]);
      most = std::max<std::int64_t>(most, static_cast<std::int64_t>(met.size()));
    }
    return most;
  };
  for (std::int64_t period : {1, 2, 4, 8}) {
    for (std::int64_t rows : {1, 2, 3, 7, 8, 9, 100, 255, 256, 1023, 1024}) {
      for (std::int64_t blocks : {1, 2, 3, 7, 8, 14, 21, 132, 1000}) {
        CAPTURE(period);
        CAPTURE(rows);
        CAPTURE(blocks);
        CHECK(tilenorm::class_major_slots(rows, blocks, period) ==
              listed_slots(rows, blocks, period));
      }
    }
  }
  // bf16 N = 262143, M = 256 on the 7 resident clusters of 16 x 512 threads: walks of 37 rows
  // from multiples of 37, over classes of 32 rows, meet two classes each.
  CHECK(tilenorm::class_major_slots(256, 7, 8) == 2);
  // No rows, or one shift: one partial row.
  CHECK(tilenorm::class_major_slots(0, 7, 8) == 1);
  CHECK(tilenorm::class_major_slots(1000, 7, 1) == 1);
}
