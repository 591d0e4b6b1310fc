#pragma once
#include <vector>

namespace tilenorm {

// The median of the samples: the middle one, or the mean of the middle two for an even count.
// Throws tilenorm::Error for an empty list.
double median(std::vector<double> samples);

}  // namespace tilenorm
