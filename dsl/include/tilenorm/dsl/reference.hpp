#pragma once
// Host-side data for checking kernels against the interpreter: random values exactly
// representable in a storage type, conversions to and from storage bytes, and comparison with
// tolerances set by dtype (NaN never passes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"

namespace tilenorm {

// Values uniform in [low, high), rounded to `dtype` (so the device reads them exactly);
// rounding can move a value onto `high`.
std::vector<double> random_values(std::size_t count, std::uint64_t seed, double low, double high,
                                  DType dtype);

// Storage bytes of `values` rounded to `dtype`, and back.
std::vector<std::byte> encode(std::span<const double> values, DType dtype);
std::vector<double> decode(std::span<const std::byte> bytes, DType dtype);

// |actual - expected| <= atol + rtol * |expected|, per element.
struct Tolerance {
  double atol;
  double rtol;
};
// About two units in the last place of the storage type, plus fp32 arithmetic error.
Tolerance tolerance_for(DType dtype);

struct Comparison {
  std::size_t checked = 0;
  std::size_t mismatches = 0;  // including non-finite values where the reference is finite
  std::size_t non_finite = 0;
  double max_abs_error = 0.0;
  std::size_t first_bad_index = 0;
  double first_bad_actual = 0.0;
  double first_bad_expected = 0.0;
  bool ok() const { return checked > 0 && mismatches == 0; }
  std::string describe() const;
};

Comparison compare(std::span<const double> actual, std::span<const double> expected,
                   Tolerance tolerance);

}  // namespace tilenorm
