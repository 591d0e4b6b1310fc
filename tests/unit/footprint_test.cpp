// Which bytes two launch arguments share: the check that refuses an output overlapping
// another argument, against a byte-by-byte count.
#include "tilenorm/runtime/footprint.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <set>

namespace {

using tilenorm::Footprint;
using tilenorm::footprints_overlap;

constexpr std::uintptr_t kBase = 0x7f0000000000;

std::set<std::uintptr_t> bytes_of(const Footprint& f) {
  std::set<std::uintptr_t> bytes;
  for (std::int64_t r = 0; r < f.rows; ++r)
    for (std::int64_t b = 0; b < f.run_bytes; ++b)
      bytes.insert(f.address + static_cast<std::uintptr_t>(r * f.pitch_bytes + b));
  return bytes;
}

bool share_a_byte(const Footprint& a, const Footprint& b) {
  const std::set<std::uintptr_t> in_a = bytes_of(a);
  for (std::uintptr_t byte : bytes_of(b))
    if (in_a.count(byte)) return true;
  return false;
}

}  // namespace

TEST_CASE("footprints: the same buffer, neighbours and interleaved rows") {
  const Footprint x{kBase, 4, 512, 512};  // 4 contiguous rows of 256 bf16
  CHECK(footprints_overlap(x, x));
  CHECK_FALSE(footprints_overlap(x, {kBase + 2048, 4, 512, 512}));  // right after x
  CHECK(footprints_overlap(x, {kBase + 2046, 1, 0, 4}));            // straddles x's end
  CHECK(footprints_overlap({kBase + 2046, 1, 0, 4}, x));
  // x and y interleaved in one buffer of rows of 2 * 256: no byte in common.
  const Footprint x_half{kBase, 4, 1024, 512};
  const Footprint y_half{kBase + 512, 4, 1024, 512};
  CHECK_FALSE(footprints_overlap(x_half, y_half));
  CHECK_FALSE(footprints_overlap(y_half, x_half));
  // Shifted by one element, they do.
  CHECK(footprints_overlap(x_half, {kBase + 510, 4, 1024, 512}));
  // A column that sits in the gap between two rows, and one that does not.
  CHECK_FALSE(footprints_overlap(x_half, {kBase + 1536, 1, 0, 512}));
  CHECK(footprints_overlap(x_half, {kBase + 1536, 1, 0, 513}));
  // Different pitches decide by the spans: conservative.
  CHECK(footprints_overlap({kBase, 2, 4096, 16}, {kBase + 100, 2, 2048, 16}));
  CHECK_FALSE(footprints_overlap({kBase, 2, 4096, 16}, {kBase + 8192, 2, 2048, 16}));
  // Nothing covers nothing.
  CHECK_FALSE(footprints_overlap(x, {kBase, 0, 512, 512}));
  CHECK_FALSE(footprints_overlap(x, {kBase, 1, 0, 0}));
}

TEST_CASE("footprints: exact for equal pitches and single runs, conservative otherwise") {
  std::mt19937_64 random(20261130);
  auto draw = [&](std::int64_t pitch) {
    std::uniform_int_distribution<std::int64_t> rows(1, 5), run(1, 12), offset(0, 80);
    Footprint f;
    f.rows = rows(random);
    f.pitch_bytes = pitch;
    f.run_bytes = std::min<std::int64_t>(run(random), pitch);
    f.address = kBase + static_cast<std::uintptr_t>(offset(random));
    return f;
  };
  std::uniform_int_distribution<std::int64_t> pitches(1, 16);
  int exact = 0, conservative = 0, overlapping = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::int64_t pitch_a = pitches(random);
    const bool same = trial % 2 == 0;
    Footprint a = draw(pitch_a);
    Footprint b = draw(same ? pitch_a : pitches(random));
    if (trial % 5 == 0) b.rows = 1;
    const bool truth = share_a_byte(a, b);
    overlapping += truth;
    CAPTURE(trial);
    CAPTURE(a.address - kBase);
    CAPTURE(a.rows);
    CAPTURE(a.pitch_bytes);
    CAPTURE(a.run_bytes);
    CAPTURE(b.address - kBase);
    CAPTURE(b.rows);
    CAPTURE(b.pitch_bytes);
    CAPTURE(b.run_bytes);
    if (a.pitch_bytes == b.pitch_bytes || a.rows == 1 || b.rows == 1) {
      ++exact;
      REQUIRE(footprints_overlap(a, b) == truth);
      REQUIRE(footprints_overlap(b, a) == truth);
    } else {
      ++conservative;
      if (truth) REQUIRE(footprints_overlap(a, b));
    }
  }
  // Both kinds of pairs, and both answers, were drawn often.
  CHECK(exact > 5000);
  CHECK(conservative > 3000);
  CHECK(overlapping > 2000);
  CHECK(overlapping < 18000);
}
