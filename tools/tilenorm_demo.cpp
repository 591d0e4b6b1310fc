// tilenorm-demo, the main job (scripts/demo): LayerNorm and RMSNorm forward on the GPU,
// checked against the fp64 interpreter and timed against the copy ceiling measured in the
// same run. Without a GPU: lowers and compiles every built-in kernel for sm_90 and reports
// source size, registers and spills.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "tilenorm/autotune/cli11.hpp"
#include "tilenorm/autotune/search_space.hpp"
#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/timing.hpp"

namespace {

using tilenorm::DType;
namespace driver = tilenorm::driver;

constexpr std::int64_t kRows = 16384;
constexpr std::int64_t kCols = 4096;
constexpr DType kDType = DType::bf16;

int compile_only(const std::string& why) {
  std::cout << "No GPU: " << why
            << "\nCompiling every built-in kernel for sm_90 instead (bf16, N = " << kCols
            << ").\n\n";
  std::printf("%-40s %12s %10s %8s %s\n", "kernel", "source (B)", "registers", "spills", "config");
  bool clean = true;
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    const tilenorm::LoweredProgram lowered = tilenorm::lower(kernel.program);
    const tilenorm::KernelSpec spec{kDType, kDType, kCols,
                                    tilenorm::heuristic_config(lowered, kDType, kDType, kCols,
                                                               tilenorm::DeviceLimits::hopper())};
    const tilenorm::BuiltKernel built = tilenorm::build_kernel(lowered, spec, "sm_90");
    std::printf("%-40s %12zu %10d %8d %s\n", kernel.name.c_str(), built.generated.source.size(),
                built.registers, built.spill_bytes, tilenorm::short_config(spec.config).c_str());
    clean = clean && built.spill_bytes == 0 && built.registers > 0;
  }
  return clean ? 0 : 1;
}

// Device buffers for one norm over [kRows, kCols], several copies of x and y so that timed
// repeats rotate through more memory than the L2 holds.
struct Workload {
  static constexpr int kSets = 3;
  std::vector<driver::DeviceBuffer> x, y;
  driver::DeviceBuffer weight, bias, mean, rstd;
  Workload() : weight(kCols * 2), bias(kCols * 2), mean(kRows * 4), rstd(kRows * 4) {
    const std::size_t bytes = kRows * kCols * tilenorm::dtype_size(kDType);
    for (int s = 0; s < kSets; ++s) {
      const auto values =
          tilenorm::encode(tilenorm::random_values(kRows * kCols, 100 + s, -3, 3, kDType), kDType);
      x.emplace_back(bytes).upload(values.data(), bytes);
      y.emplace_back(bytes);
    }
    const auto w = tilenorm::encode(tilenorm::random_values(kCols, 7, 0.5, 1.5, kDType), kDType);
    weight.upload(w.data(), w.size());
    bias.upload(w.data(), w.size());
  }
  tilenorm::TensorView view(const driver::DeviceBuffer& b) const {
    return tilenorm::TensorView::contiguous(reinterpret_cast<void*>(b.get()), kDType, kRows, kCols);
  }
  tilenorm::ColumnView column(const driver::DeviceBuffer& b) const {
    return {reinterpret_cast<void*>(b.get()), kDType, kCols};
  }
};

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// A cold start compiles with NVRTC; a warm start reads the CUBIN from the disk cache.
void report_compile_times(const std::string& arch) {
  const tilenorm::LoweredProgram lowered =
      tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
  const tilenorm::KernelSpec spec{
      kDType, kDType, kCols,
      tilenorm::heuristic_config(lowered, kDType, kDType, kCols, tilenorm::DeviceLimits::hopper())};
  auto started = std::chrono::steady_clock::now();
  tilenorm::build_kernel(lowered, spec, arch, /*use_disk_cache=*/false);
  const double cold_ms = milliseconds_since(started);
  tilenorm::build_kernel(lowered, spec, arch);  // make sure the disk cache holds it
  started = std::chrono::steady_clock::now();
  const tilenorm::BuiltKernel warm = tilenorm::build_kernel(lowered, spec, arch);
  const double warm_ms = milliseconds_since(started);
  std::printf(
      "layer_norm kernel: cold compile (NVRTC) %.1f ms, warm load from the disk cache %.2f "
      "ms%s\n\n",
      cold_ms, warm_ms, warm.from_disk_cache ? "" : " (NOT from the cache)");
}

int run_on_gpu() {
  tilenorm::Runtime runtime;
  std::cout << "tilenorm demo on " << runtime.device_name() << " (" << runtime.arch() << "), bf16 ["
            << kRows << " x " << kCols << "]\n";
  const double ceiling = tilenorm::measure_copy_ceiling_tbps();
  std::printf("copy ceiling (2 GiB device-to-device, read + write): %.2f TB/s\n", ceiling);
  report_compile_times(runtime.arch());
  driver::ScopedContext scope(driver::primary_context(0));
  Workload work;
  driver::Stream stream;
  const auto s = reinterpret_cast<tilenorm::Stream>(stream.get());
  std::printf("%-11s %-9s %-44s %13s %9s %7s %8s\n", "op", "check", "config (source)",
              "first call ms", "us", "TB/s", "ceiling");
  bool all_ok = true;
  for (const std::string op : {"layer_norm", "rms_norm"}) {
    const tilenorm::Norm& norm = tilenorm::kernels::builtin(runtime, op);
    auto launch = [&](int i) {
      const int set = i % Workload::kSets;
      if (op == "layer_norm") {
        tilenorm::layer_norm(runtime, work.view(work.x[set]), work.column(work.weight),
                             work.column(work.bias), work.view(work.y[set]), 1e-5f, s,
                             {reinterpret_cast<float*>(work.mean.get()), kRows},
                             {reinterpret_cast<float*>(work.rstd.get()), kRows});
      } else {
        tilenorm::rms_norm(runtime, work.view(work.x[set]), work.column(work.weight),
                           work.view(work.y[set]), 1e-5f, s,
                           {reinterpret_cast<float*>(work.rstd.get()), kRows});
      }
    };
    // The first call compiles (or loads the cached CUBIN) and launches.
    const auto started = std::chrono::steady_clock::now();
    launch(0);
    stream.synchronize();
    const double first_ms = milliseconds_since(started);
    const tilenorm::CheckReport report =
        tilenorm::check_against_interpreter(norm, {.io_dtype = kDType,
                                                   .param_dtype = kDType,
                                                   .rows = kRows,
                                                   .cols = kCols,
                                                   .seed = 4242,
                                                   .reference_rows = 512});
    const double us = tilenorm::median_time_us(launch, stream.get(), {10, 50});
    const double tbps = 2.0 * kRows * kCols * tilenorm::dtype_size(kDType) / (us * 1e-6) / 1e12;
    const std::string config = tilenorm::short_config(report.used.config) + " (" +
                               std::string(tilenorm::config_source_name(report.used.source)) + ")";
    std::printf("%-11s %-9s %-44s %13.1f %9.1f %7.2f %7.1f%%\n", op.c_str(),
                report.ok() ? "ok" : "FAILED", config.c_str(), first_ms, us, tbps,
                100.0 * tbps / ceiling);
    if (!report.ok()) std::cout << "  " << report.describe() << "\n";
    all_ok = all_ok && report.ok();
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return tilenorm::cli::run_tool("tilenorm-demo", [&] {
    CLI::App app{"Runs LayerNorm and RMSNorm (bf16, " + std::to_string(kRows) + " x " +
                     std::to_string(kCols) +
                     ") on the GPU, checks them against the fp64 reference, and prints time, TB/s "
                     "and the fraction of the copy ceiling. Without a GPU, compiles every "
                     "built-in kernel for sm_90.",
                 "tilenorm-demo"};
    tilenorm::cli::add_common_flags(app, "tilenorm-demo");
    tilenorm::cli::parse(app, std::vector<std::string>(argv + 1, argv + argc));
    if (!driver::gpu_available()) return compile_only(driver::gpu_unavailable_reason());
    return run_on_gpu();
  });
}
