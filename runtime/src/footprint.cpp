#include "tilenorm/runtime/footprint.hpp"

#include <algorithm>

namespace tilenorm {
namespace {

std::int64_t floor_div(std::int64_t x, std::int64_t d) {  // d > 0
  return x / d - (x % d < 0 ? 1 : 0);
}

std::int64_t span_bytes(const Footprint& f) {
  return (f.rows - 1) * f.pitch_bytes + f.run_bytes;
}

}  // namespace

bool footprints_overlap(const Footprint& a, const Footprint& b) {
  if (a.rows < 1 || b.rows < 1 || a.run_bytes < 1 || b.run_bytes < 1) return false;
  // b's first byte relative to a's, in the signed distance of the two addresses (device
  // addresses are far below 2^63, so the difference fits).
  const std::int64_t d = static_cast<std::int64_t>(b.address - a.address);
  const bool spans_meet = d < span_bytes(a) && -d < span_bytes(b);
  if (!spans_meet) return false;
  std::int64_t pitch = 0;
  if (a.rows == 1 && b.rows == 1) return true;  // two runs whose spans meet
  if (a.rows == 1)
    pitch = b.pitch_bytes;
  else if (b.rows == 1 || a.pitch_bytes == b.pitch_bytes)
    pitch = a.pitch_bytes;
  else
    return true;  // different pitches: the spans decide
  if (pitch < 1) return true;
  // Row r of a and row s of b share a byte when, with k = r - s,
  //   k * pitch - b.run_bytes < d < k * pitch + a.run_bytes,
  // and k ranges over [-(b.rows - 1), a.rows - 1].
  const std::int64_t k_low = floor_div(d - a.run_bytes, pitch) + 1;
  const std::int64_t k_high = -floor_div(-(d + b.run_bytes), pitch) - 1;  // ceil - 1
  return std::max(k_low, -(b.rows - 1)) <= std::min(k_high, a.rows - 1);
}

}  // namespace tilenorm
