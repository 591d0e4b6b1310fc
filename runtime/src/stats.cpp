#include "tilenorm/runtime/stats.hpp"

#include <algorithm>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

double median(std::vector<double> samples) {
  if (samples.empty()) throw Error("median of no samples");
  const std::size_t middle = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + middle, samples.end());
  const double upper = samples[middle];
  if (samples.size() % 2) return upper;
  const double lower = *std::max_element(samples.begin(), samples.begin() + middle);
  return (lower + upper) / 2;
}

}  // namespace tilenorm
