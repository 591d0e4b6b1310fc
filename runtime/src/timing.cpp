#include "tilenorm/runtime/timing.hpp"

#include <utility>
#include <vector>

#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/stats.hpp"

namespace tilenorm {

double median_time_us(const std::function<void(int iteration)>& launch, CUstream_st* stream,
                      const TimingOptions& options) {
  for (int i = 0; i < options.warmup; ++i) launch(i);
  std::vector<driver::Event> starts(options.repeats), ends(options.repeats);
  for (int i = 0; i < options.repeats; ++i) {
    starts[i].record(stream);
    launch(options.warmup + i);
    ends[i].record(stream);
  }
  std::vector<double> times;
  for (int i = 0; i < options.repeats; ++i) {
    ends[i].synchronize();
    times.push_back(1000.0 * driver::Event::elapsed_ms(starts[i], ends[i]));
  }
  return median(std::move(times));
}

double measure_copy_ceiling_tbps(std::size_t bytes) {
  driver::ScopedContext scope(driver::primary_context(0));
  driver::DeviceBuffer source(bytes), destination(bytes);
  source.fill_bytes(0x5A);
  driver::Stream stream;
  const double us = median_time_us(
      [&](int) {
        driver::check(
            driver::api().cuMemcpyDtoDAsync(destination.get(), source.get(), bytes, stream.get()),
            "cuMemcpyDtoDAsync (copy ceiling)");
      },
      stream.get(), {3, 10});
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e12;
}

}  // namespace tilenorm
