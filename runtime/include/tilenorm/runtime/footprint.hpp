#pragma once
// Which bytes a launch's tensors cover, so that an output that shares memory with another
// tensor is refused before anything is launched. (The kernels take every pointer as
// __restrict__, and an output written over an input it still has to read would be wrong.)
#include <cstdint>

namespace tilenorm {

// `rows` runs of `run_bytes` bytes each, the first at `address` and each `pitch_bytes` after
// the one before. A tensor of one row (or a column or a vector of row scalars) is one run.
struct Footprint {
  std::uintptr_t address = 0;
  std::int64_t rows = 1;
  std::int64_t pitch_bytes = 0;
  std::int64_t run_bytes = 0;
};

// Whether two footprints share a byte. Exact when both have the same pitch or either is a
// single run (so rows interleaved with another tensor's rows in one buffer do not count as
// overlapping); otherwise whether the spans from first to last byte meet, which may refuse two
// strided tensors that interleave without sharing a byte.
bool footprints_overlap(const Footprint& a, const Footprint& b);

}  // namespace tilenorm
