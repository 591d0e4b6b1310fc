#pragma once
// GPU timing with CUDA events: warm-up, then the median over repeats. Shared by the demo, the
// benchmark and the autotuner so that every number is measured the same way.
#include <cstddef>
#include <functional>

struct CUstream_st;

namespace tilenorm {

struct TimingOptions {
  int warmup = 5;
  int repeats = 25;
};

// Median time in microseconds of one call of `launch(iteration)` enqueued on `stream`. The
// iteration number lets callers rotate among input buffers so repeats do not hit in L2.
double median_time_us(const std::function<void(int iteration)>& launch, CUstream_st* stream,
                      const TimingOptions& options = {});

// The device-to-device copy bandwidth in TB/s (bytes read + bytes written), the ceiling that
// every memory-bound kernel is compared against. Uses a copy of `bytes` bytes.
double measure_copy_ceiling_tbps(std::size_t bytes = std::size_t{1} << 31);

}  // namespace tilenorm
