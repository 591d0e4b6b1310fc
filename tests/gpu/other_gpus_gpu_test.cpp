// The kernels the heuristic gives other GPU generations, run on this GPU against the fp64
// interpreter (RuntimeOptions::heuristic_device): no clusters and 163 KiB per CTA (A100), 99 KiB
// and 1536 threads per SM (L40S), clusters of 8 (RTX 5090), sm_100's register calibration
// (B200). The code is compiled for this GPU; what is checked is each configuration the other
// GPU would run, long rows of backwards without clusters among them.
// TILENORM_GPU_TESTS=quick selects a smaller matrix (for compute-sanitizer).
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "layer_norm_determinism.hpp"
#include "quick_mode.hpp"
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"

namespace {

using tilenorm::DType;
namespace driver = tilenorm::driver;

struct Shape {
  DType dtype;
  std::int64_t n;
  std::int64_t m;
};

}  // namespace

TEST_CASE("other GPUs: the heuristic's kernels for A100, L40S, RTX5090 and B200 match here") {
  const std::vector<std::string> devices =
      quick() ? std::vector<std::string>{"A100", "RTX5090"}
              : std::vector<std::string>{"A100", "L40S", "RTX5090", "B200"};
  // Mid rows over more rows than the grid holds at once; long rows, whose backwards keep their
  // column partial sums where a cluster does not spread them.
  const std::vector<Shape> shapes =
      quick() ? std::vector<Shape>{{DType::bf16, 12288, 600}, {DType::bf16, 65536, 3}}
              : std::vector<Shape>{{DType::bf16, 12288, 600},
                                   {DType::bf16, 65536, 3},
                                   {DType::f32, 65536, 3},
                                   {DType::bf16, 262144, 3}};
  std::vector<tilenorm::ir::Program> programs;
  for (const char* name : {"layer_norm", "rms_norm"}) {
    const tilenorm::ir::Program forward = tilenorm::kernels::builtin_program(name);
    programs.push_back(forward);
    programs.push_back(tilenorm::backward(forward, {tilenorm::StatisticsMode::saved}));
    programs.push_back(tilenorm::backward(forward, {tilenorm::StatisticsMode::recompute}));
  }
  const tilenorm::DeviceLimits here = tilenorm::device_limits(driver::device_info(0));
  const unsigned seed = std::random_device{}();
  MESSAGE("seed " << seed);
  int checked = 0;
  int unlike_here = 0;
  for (const std::string& device : devices) {
    tilenorm::Runtime runtime(tilenorm::RuntimeOptions{
        .device = 0, .use_tuning_database = false, .heuristic_device = device});
    const tilenorm::DeviceLimits emulated =
        tilenorm::emulated_limits(tilenorm::known_device(device), here);
    for (const tilenorm::ir::Program& program : programs) {
      const tilenorm::Norm norm = runtime.load(program);
      for (const Shape& shape : shapes) {
        CAPTURE(device);
        CAPTURE(program.name);
        CAPTURE(tilenorm::dtype_name(shape.dtype));
        CAPTURE(shape.n);
        CAPTURE(shape.m);
        // eps = 1e-2, as in the backward tests: absolute tolerances then measure the kernel.
        const auto report = tilenorm::check_against_interpreter(
            norm, {.io_dtype = shape.dtype,
                   .param_dtype = shape.dtype,
                   .rows = shape.m,
                   .cols = shape.n,
                   .seed = seed + static_cast<unsigned>(checked),
                   .scalars = std::vector<float>{1e-2f}});
        INFO(report.describe());
        CHECK(report.ok());
        CHECK(report.unwritten == 0);
        CHECK(report.clobbered == 0);
        ++checked;
        // The runtime chose as the emulated GPU would, within this one's limits (aligned rows:
        // 16-byte vectors, unpeeled).
        const auto config_on = [&](const tilenorm::DeviceLimits& limits) {
          return tilenorm::heuristic_config(
              norm.lowered(), shape.dtype, shape.dtype, shape.n, limits,
              static_cast<int>(16 / tilenorm::dtype_size(shape.dtype)), false, shape.m);
        };
        CHECK(report.used.config == config_on(emulated));
        unlike_here += !(report.used.config == config_on(here));
      }
    }
  }
  // Not vacuous: many of these configurations are not the ones this GPU gets.
  CHECK(unlike_here > 0);
  MESSAGE(checked << " kernels checked, " << unlike_here
                  << " of them configured unlike this GPU's own");
}

TEST_CASE("other GPUs: software clusters are bitwise deterministic and replay from a graph") {
  // The A100's LayerNorm backward at N = 65536: 16 CTAs of a cooperative launch per row,
  // exchanging their totals in global memory; a graph replays the counts' reset with it.
  tilenorm::Runtime runtime(tilenorm::RuntimeOptions{
      .device = 0, .use_tuning_database = false, .heuristic_device = "A100"});
  const tilenorm::DeviceLimits a100 = tilenorm::emulated_limits(
      tilenorm::known_device("A100"), tilenorm::device_limits(driver::device_info(0)));
  const std::int64_t m = 200, n = 65536;
  const tilenorm::LoweredProgram program =
      tilenorm::lower(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")));
  const tilenorm::KernelSpec spec = tilenorm::fit_shared_memory(
      program,
      {DType::bf16, DType::bf16, n,
       tilenorm::heuristic_config(program, DType::bf16, DType::bf16, n, a100, 8, false, m)},
      a100);
  REQUIRE(spec.global_exchange);
  check_layer_norm_backward_determinism(runtime, m, n);
}
