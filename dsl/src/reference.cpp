#include "tilenorm/dsl/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>

namespace tilenorm {

namespace {

// SplitMix64 of (seed, index): every element is independent, so large tensors fill in
// parallel and the values do not depend on the number of threads.
double uniform_unit(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

template <class Body>
void parallel_for(std::size_t count, const Body& body) {
  const std::size_t workers = std::clamp<std::size_t>(
      count / (1 << 20), 1, std::max(1u, std::thread::hardware_concurrency()));
  const std::size_t per_worker = (count + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (std::size_t first = 0; first < count; first += per_worker) {
    threads.emplace_back([&body, first, last = std::min(count, first + per_worker)] {
      for (std::size_t i = first; i < last; ++i) body(i);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

std::vector<double> random_values(std::size_t count, std::uint64_t seed, double low, double high,
                                  DType dtype) {
  std::vector<double> values(count);
  parallel_for(count, [&](std::size_t i) {
    values[i] = round_to_dtype(low + (high - low) * uniform_unit(seed, i), dtype);
  });
  return values;
}

std::vector<std::byte> encode(std::span<const double> values, DType dtype) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  parallel_for(values.size(), [&](std::size_t i) {
    const float v = static_cast<float>(values[i]);
    std::byte* dst = bytes.data() + i * dtype_size(dtype);
    if (dtype == DType::f32) {
      std::memcpy(dst, &v, sizeof v);
    } else {
      const std::uint16_t bits =
          dtype == DType::bf16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v);
      std::memcpy(dst, &bits, sizeof bits);
    }
  });
  return bytes;
}

std::vector<double> decode(std::span<const std::byte> bytes, DType dtype) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  parallel_for(values.size(), [&](std::size_t i) {
    const std::byte* src = bytes.data() + i * dtype_size(dtype);
    if (dtype == DType::f32) {
      float v;
      std::memcpy(&v, src, sizeof v);
      values[i] = v;
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, src, sizeof bits);
      values[i] = dtype == DType::bf16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
    }
  });
  return values;
}

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {2e-3, 2e-3};
    case DType::bf16:
      return {1.6e-2, 1.6e-2};
  }
  return {0, 0};
}

Comparison compare(std::span<const double> actual, std::span<const double> expected,
                   Tolerance tolerance) {
  Comparison c;
  c.checked = std::min(actual.size(), expected.size());
  if (actual.size() != expected.size())
    c.mismatches = std::max(actual.size(), expected.size()) - c.checked;
  for (std::size_t i = 0; i < c.checked; ++i) {
    const double a = actual[i];
    const double e = expected[i];
    bool bad;
    if (!std::isfinite(a)) {
      ++c.non_finite;
      // Only an exact match of a non-finite reference passes; NaN never does.
      bad = std::isnan(a) || a != e;
    } else {
      const double error = std::fabs(a - e);
      c.max_abs_error = std::max(c.max_abs_error, error);
      bad = !(error <= tolerance.atol + tolerance.rtol * std::fabs(e));
    }
    if (bad && c.mismatches++ == 0) {
      c.first_bad_index = i;
      c.first_bad_actual = a;
      c.first_bad_expected = e;
    }
  }
  return c;
}

std::string Comparison::describe() const {
  std::ostringstream out;
  out << checked << " checked, " << mismatches << " mismatched, " << non_finite
      << " non-finite, max abs error " << max_abs_error;
  if (mismatches > 0) {
    out << "; first bad at " << first_bad_index << ": got " << first_bad_actual << ", expected "
        << first_bad_expected;
  }
  return out.str();
}

}  // namespace tilenorm
