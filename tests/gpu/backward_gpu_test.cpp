// The derived backward of every built-in kernel and of the examples against the fp64
// interpreter (dX, dW, dB and scalar gradients), over dtypes, row lengths, row counts,
// layouts and both statistics modes; plus bitwise determinism and graph capture.
// TILENORM_GPU_TESTS=quick selects a smaller matrix (for compute-sanitizer).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "check_forced_config.hpp"
#include "dyt.hpp"
#include "gemma_rms_norm.hpp"
#include "layer_norm_determinism.hpp"
#include "quick_mode.hpp"
#include "residual_rms_norm.hpp"
#include "runs_clusters.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"

namespace {

using tilenorm::DType;
namespace driver = tilenorm::driver;

tilenorm::Runtime& backward_runtime() {
  static tilenorm::Runtime runtime(
      tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false});
  return runtime;
}

// The options that check `program` on m rows of n `dtype` elements (eps 1e-2 where it has one).
tilenorm::CheckOptions rows_of(const tilenorm::ir::Program& program, DType dtype, std::int64_t m,
                               std::int64_t n, std::uint64_t seed) {
  return {.io_dtype = dtype,
          .param_dtype = dtype,
          .rows = m,
          .cols = n,
          .seed = seed,
          .scalars = program.find_slot("eps") ? std::vector<float>{1e-2f} : std::vector<float>{}};
}

struct Layout {
  const char* name;
  std::int64_t extra_row_stride;
  std::int64_t element_offset;
};
const Layout kLayouts[] = {{"contiguous", 0, 0}, {"strided", 24, 0}, {"offset", 3, 1}};

void check_backward(const tilenorm::ir::Program& program) {
  const tilenorm::Norm norm = backward_runtime().load(program);
  const std::vector<std::int64_t> row_lengths =
      quick() ? std::vector<std::int64_t>{1, 7, 1000, 4096, 5120, 20000}
              : std::vector<std::int64_t>{1, 7, 128, 1000, 4096, 5120, 12345, 65536, 262144};
  const std::vector<std::int64_t> row_counts = quick()
                                                   ? std::vector<std::int64_t>{1, 3, 300}
                                                   : std::vector<std::int64_t>{1, 3, 1000, 100000};
  std::uint64_t seed = std::random_device{}();
  int checked = 0;
  // eps = 1e-2 rather than 1e-5: a row of one element has zero variance, so rstd is
  // 1/sqrt(eps), and the fp32 rounding of terms that cancel (an exact 0 in fp64) scales with
  // it; the tolerances are absolute, so they would measure the condition, not the kernel.
  const std::vector<float> scalars =
      program.find_slot("eps") ? std::vector<float>{1e-2f} : std::vector<float>{};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t n : row_lengths) {
      for (std::int64_t m : row_counts) {
        // Sums across rows need the interpreter on every row: keep each check bounded.
        if (n * m > (std::int64_t{1} << 24)) continue;
        for (const Layout& layout : kLayouts) {
          CAPTURE(program.name);
          CAPTURE(tilenorm::dtype_name(dtype));
          CAPTURE(n);
          CAPTURE(m);
          const std::string layout_name = layout.name;
          CAPTURE(layout_name);
          CAPTURE(seed);
          const tilenorm::CheckReport report = tilenorm::check_against_interpreter(
              norm, {.io_dtype = dtype,
                     .param_dtype = dtype,
                     .rows = m,
                     .cols = n,
                     .extra_row_stride = layout.extra_row_stride,
                     .element_offset = layout.element_offset,
                     .seed = ++seed,
                     .scalars = scalars});
          INFO(report.describe());
          CHECK(report.unwritten == 0);
          CHECK(report.clobbered == 0);
          CHECK(report.ok());
          ++checked;
        }
      }
    }
  }
  MESSAGE(program.name << ": " << checked << " shapes checked against the interpreter");
}

void check_both_modes(const tilenorm::ir::Program& forward) {
  check_backward(tilenorm::backward(forward, {tilenorm::StatisticsMode::saved}));
  check_backward(tilenorm::backward(forward, {tilenorm::StatisticsMode::recompute}));
}

}  // namespace

TEST_CASE("backward: layer_norm matches the interpreter") {
  check_both_modes(tilenorm::kernels::builtin_program("layer_norm"));
}
TEST_CASE("backward: layer_norm_no_bias matches the interpreter") {
  check_both_modes(tilenorm::kernels::builtin_program("layer_norm_no_bias"));
}
TEST_CASE("backward: layer_norm_no_affine matches the interpreter") {
  check_both_modes(tilenorm::kernels::builtin_program("layer_norm_no_affine"));
}
TEST_CASE("backward: rms_norm matches the interpreter") {
  check_both_modes(tilenorm::kernels::builtin_program("rms_norm"));
}
TEST_CASE("backward: rms_norm_no_weight matches the interpreter") {
  check_both_modes(tilenorm::kernels::builtin_program("rms_norm_no_weight"));
}
TEST_CASE("backward: the Gemma RMSNorm example matches the interpreter") {
  check_both_modes(gemma_rms_norm());
}
// Two output gradients (dy and dh) flow into the same dx and dresidual; saved mode reads the
// forward's h back in place of x and residual. (The example as built writes dx alone: the
// example program checks that one.)
TEST_CASE("backward: the residual RMSNorm example matches the interpreter") {
  check_both_modes(residual_rms_norm(tilenorm::dsl::Grad::yes));
}
TEST_CASE("backward: the DyT example (learned scalar) matches the interpreter") {
  const tilenorm::Norm forward = backward_runtime().load(dyt());
  const auto report = tilenorm::check_against_interpreter(
      forward, {.io_dtype = DType::bf16, .param_dtype = DType::bf16, .rows = 1000, .cols = 4096});
  INFO(report.describe());
  CHECK(report.ok());
  check_backward(tilenorm::backward(dyt()));
}

namespace {

// Column gradients (LayerNorm's dW, dB), recomputed statistics, a learned scalar (DyT's alpha,
// summed over every element), slices re-read from global memory, prefetching, pipelined
// exchanges, one and two rows per CTA (M = 5 leaves the last CTA's second row empty), and
// persistent grids of clusters that loop over more row blocks than fit at once (M = 1000).
// (Staged slices have a test case of their own, below.) One test case per program, so that
// compute-sanitizer can take them one at a time: racecheck on all three outlasts a device call.
void check_backward_on_clusters(const tilenorm::ir::Program& program,
                                std::initializer_list<int> cluster_sizes = {2, 4, 16}) {
  if (!runs_clusters(backward_runtime())) return;
  const tilenorm::Norm norm = backward_runtime().load(program);
  for (int ctas : cluster_sizes) {
    for (int storage : {0, 2, 3, 5}) {  // registers, global, prefetched, pipelined
      for (auto [n, m, rows_per_cta] : {std::tuple<std::int64_t, std::int64_t, int>{20000, 5, 1},
                                        {20000, 1000, 1},
                                        {65536, 5, 1},
                                        {20000, 5, 2},
                                        {20000, 1000, 2},
                                        {8192, 37, 4}}) {
        // (Stacked rows in global storage, which spill their column sums, are not run.)
        if (rows_per_cta > 1 && storage == 2) continue;
        const tilenorm::KernelConfig config{
            256 / rows_per_cta, rows_per_cta, 8, storage, ctas, 0, 0};
        const tilenorm::KernelSpec spec{DType::bf16, DType::bf16, n, config};
        // Invalid here, or more shared memory than a CTA may have: the launch refuses those by
        // name.
        if (tilenorm::config_problem(norm.lowered(), spec) ||
            tilenorm::dynamic_shared_memory_bytes(norm.lowered(), spec) >
                backward_runtime().shared_memory_per_block())
          continue;
        CAPTURE(ctas);
        CAPTURE(storage);
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(rows_per_cta);
        const auto report = tilenorm::check_against_interpreter(
            norm,
            {.io_dtype = DType::bf16,
             .param_dtype = DType::bf16,
             .rows = m,
             .cols = n,
             .seed = 11u + static_cast<unsigned>(ctas * 7 + storage + 100 * rows_per_cta),
             .scalars = program.find_slot("eps") ? std::vector<float>{1e-2f} : std::vector<float>{},
             .config = config});
        INFO(report.describe());
        CHECK(report.ok());
        CHECK(report.unwritten == 0);
        CHECK(report.used.config.ctas_per_row == ctas);
      }
    }
  }
}

}  // namespace

TEST_CASE("backward: clusters split LayerNorm rows and match the interpreter") {
  check_backward_on_clusters(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")));
}
TEST_CASE("backward: clusters split RMSNorm rows and recompute, match the interpreter") {
  check_backward_on_clusters(tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"),
                                                {tilenorm::StatisticsMode::recompute}));
}
TEST_CASE("backward: clusters split DyT rows and sum its scalar, match the interpreter") {
  check_backward_on_clusters(tilenorm::backward(dyt()));
}

// KernelConfig::load_pin moves where ptxas issues the next row block's loads, nothing else: each
// backward on prefetched clusters of 16, with each placement its rule does not choose (on, off
// or early: LayerNorm's saved backward pinned, RMSNorm's not, either pinned early), still
// matches the interpreter in every dtype, on rows of four vectors per thread and ragged ones,
// with one row block and with many per cluster.
TEST_CASE("backward: clusters with other load pins than the rule match the interpreter") {
  if (!runs_clusters(backward_runtime())) return;
  using tilenorm::LoadPin;
  const tilenorm::ir::Program& layer_norm = tilenorm::kernels::builtin_program("layer_norm");
  const tilenorm::ir::Program& rms_norm = tilenorm::kernels::builtin_program("rms_norm");
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(layer_norm),
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm_no_bias")),
      tilenorm::backward(layer_norm, {tilenorm::StatisticsMode::recompute}),
      tilenorm::backward(rms_norm),
      tilenorm::backward(rms_norm, {tilenorm::StatisticsMode::recompute}),
  };
  int checked = 0;
  for (const tilenorm::ir::Program& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      const int vec = dtype == DType::f32 ? 4 : 8;
      for (auto [n, m] :
           {std::pair<std::int64_t, std::int64_t>{16 * 128 * 4 * vec, 5}, {20000, 1000}}) {
        tilenorm::KernelConfig config{128,
                                      1,
                                      vec,
                                      static_cast<int>(tilenorm::RowStorage::prefetched),
                                      16,
                                      tilenorm::kPinByRule,
                                      tilenorm::kMomentsByRule};
        const tilenorm::KernelSpec by_rule{dtype, dtype, n, config};
        if (tilenorm::config_problem(norm.lowered(), by_rule)) continue;
        const LoadPin rule = tilenorm::next_row_loads_pin(norm.lowered(), by_rule);
        for (LoadPin pin : {LoadPin::on, LoadPin::off, LoadPin::early}) {
          if (pin == rule) continue;
          config.load_pin = static_cast<int>(pin);
          CAPTURE(program.name);
          CAPTURE(tilenorm::dtype_name(dtype));
          CAPTURE(n);
          CAPTURE(m);
          CAPTURE(config.describe());
          const auto report = tilenorm::check_against_interpreter(
              norm, {.io_dtype = dtype,
                     .param_dtype = dtype,
                     .rows = m,
                     .cols = n,
                     .seed = 57u + static_cast<unsigned>(checked),
                     .config = config});
          check_forced_config(report, config);
          ++checked;
        }
      }
    }
  }
  CHECK(checked == 60);
}

// KernelConfig::moments on: LayerNorm's recomputing backward in one phase of co-moments instead
// of two of plain sums, on the kernels the tuner searches it on (stacked prefetched slices,
// ragged slices of 16 CTAs, pipelined slices, which only the one phase makes valid, prefetched
// rows of one CTA, and slices of two rows on rows of 2048 vectors, where only the one phase
// stacks them), with and without bias, in every dtype (bf16 and fp32 in the quick matrix).
TEST_CASE("backward: clusters and one CTA recompute LayerNorm in one phase of co-moments") {
  if (!runs_clusters(backward_runtime())) return;
  const tilenorm::ir::Program& layer_norm = tilenorm::kernels::builtin_program("layer_norm");
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(layer_norm, {tilenorm::StatisticsMode::recompute}),
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm_no_bias"),
                         {tilenorm::StatisticsMode::recompute}),
  };
  const std::vector<DType> dtypes = quick()
                                        ? std::vector<DType>{DType::bf16, DType::f32}
                                        : std::vector<DType>{DType::bf16, DType::f16, DType::f32};
  constexpr int prefetched = static_cast<int>(tilenorm::RowStorage::prefetched);
  constexpr int pipelined = static_cast<int>(tilenorm::RowStorage::pipelined);
  constexpr int on = static_cast<int>(tilenorm::MomentFusion::on);
  int checked = 0;
  for (const tilenorm::ir::Program& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (DType dtype : dtypes) {
      const int vec = dtype == DType::f32 ? 4 : 8;
      struct Case {
        std::int64_t n, m;
        tilenorm::KernelConfig config;
      };
      const Case cases[] = {
          {4 * 64 * 4 * vec, 1000, {64, 2, vec, prefetched, 4, tilenorm::kPinByRule, on}},
          {20000, 300, {128, 1, vec, prefetched, 16, tilenorm::kPinByRule, on}},
          {16 * 128 * 4 * vec, 5, {128, 1, vec, pipelined, 16, tilenorm::kPinByRule, on}},
          {64 * 8 * vec, 1000, {64, 4, vec, prefetched, 1, tilenorm::kPinByRule, on}},
          {8 * 128 * 2 * vec, 300, {128, 2, vec, prefetched, 8, tilenorm::kPinByRule, on}},
      };
      for (const Case& c : cases) {
        CAPTURE(program.name);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(c.n);
        CAPTURE(c.m);
        CAPTURE(c.config.describe());
        // The knob makes another kernel than the rule: pipelined slices need its one phase.
        tilenorm::KernelConfig by_rule = c.config;
        by_rule.moments = tilenorm::kMomentsByRule;
        const tilenorm::KernelSpec rule_spec{dtype, dtype, c.n, by_rule};
        CHECK(tilenorm::config_problem(norm.lowered(), rule_spec).has_value() ==
              (c.config.row_storage == pipelined));
        auto options = rows_of(program, dtype, c.m, c.n, 91u + static_cast<unsigned>(checked));
        options.config = c.config;
        check_forced_config(tilenorm::check_against_interpreter(norm, options), c.config);
        ++checked;
      }
    }
  }
  CHECK(checked == 10 * static_cast<int>(dtypes.size()));
}

// Clusters need not be a power of two: three, six and twelve CTAs (twelve is non-portable).
TEST_CASE("backward: clusters of 3, 6 and 12 CTAs split LayerNorm rows, match the interpreter") {
  check_backward_on_clusters(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")),
                             {3, 6, 12});
}
TEST_CASE("backward: clusters of 3, 6 and 12 CTAs split RMSNorm rows, match the interpreter") {
  check_backward_on_clusters(tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"),
                                                {tilenorm::StatisticsMode::recompute}),
                             {3, 6, 12});
}

namespace {

// The backwards that the staged cluster tests run, a family at a time (a test case each, so
// that racecheck, which takes minutes per family on these kernels, can run them side by side):
// the built-in program `builtin`'s, reading the saved statistics and recomputing them, and with
// `with_dyt`, DyT's (a learned scalar).
std::vector<tilenorm::ir::Program> staged_cluster_programs(const char* builtin,
                                                           bool with_dyt = false) {
  const tilenorm::ir::Program& forward = tilenorm::kernels::builtin_program(builtin);
  std::vector<tilenorm::ir::Program> programs{
      tilenorm::backward(forward),
      tilenorm::backward(forward, {tilenorm::StatisticsMode::recompute})};
  if (with_dyt) programs.push_back(tilenorm::backward(dyt()));
  return programs;
}

// Runs `norm` (the backward of `program`) on fresh rows in a forced staged configuration: it
// matches the interpreter and writes every element.
void check_staged(const tilenorm::Norm& norm, const tilenorm::ir::Program& program, DType dtype,
                  std::int64_t n, std::int64_t m, const tilenorm::KernelConfig& config,
                  unsigned seed) {
  CAPTURE(program.name);
  CAPTURE(tilenorm::dtype_name(dtype));
  CAPTURE(config.describe());
  CAPTURE(n);
  CAPTURE(m);
  tilenorm::CheckOptions options = rows_of(program, dtype, m, n, seed);
  options.config = config;
  check_forced_config(tilenorm::check_against_interpreter(norm, options), config);
}

// Staged slices on clusters: each CTA copies its slice of the next row block into shared
// memory (cp.async) while it works on this one, with the saved statistics copied beside them;
// those were read before the copies' wait once, which gave the saved backwards wrong results that
// depended on timing (sixty-second session). Covered for each of `programs`: clusters of 2, 4 and
// 16; one, two and four rows per CTA (the statistics copied ahead for stacked bf16 rows on
// clusters of 16); one row block per cluster and many. `seed` starts the rows' seeds.
void check_staged_bf16_matrix(const std::vector<tilenorm::ir::Program>& programs, unsigned seed) {
  if (!runs_clusters(backward_runtime())) return;
  const int staged = static_cast<int>(tilenorm::RowStorage::staged);
  int checked = 0;
  for (const tilenorm::ir::Program& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (int ctas : {2, 4, 16}) {
      for (auto [n, m, rows_per_cta] : {std::tuple<std::int64_t, std::int64_t, int>{20000, 5, 1},
                                        {20000, 1000, 1},
                                        {20000, 1000, 2},
                                        {8192, 37, 4}}) {
        const tilenorm::KernelConfig config{
            256 / rows_per_cta, rows_per_cta, 8, staged, ctas, 0, 0};
        // (Slices that leave a CTA no columns, or too many values for the registers.)
        if (tilenorm::config_problem(norm.lowered(), {DType::bf16, DType::bf16, n, config}))
          continue;
        check_staged(norm, program, DType::bf16, n, m, config, seed + checked++);
      }
    }
  }
  CHECK(checked >= static_cast<int>(programs.size()) * 8);
}

// Slices of eight fp32 vectors on 16 x 512 threads (N = 262144), the heuristic's where they are
// staged: dy staged, x loaded at each row's start, unconditionally (rows past the end read row
// 0). M = 3 leaves most clusters without a row, M = 37 gives every cluster several row blocks.
void check_staged_fp32_slices(const std::vector<tilenorm::ir::Program>& programs, unsigned seed) {
  if (!runs_clusters(backward_runtime())) return;
  const tilenorm::KernelConfig config{512, 1, 4, static_cast<int>(tilenorm::RowStorage::staged),
                                      16,  0, 0};
  int checked = 0;
  for (const tilenorm::ir::Program& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (std::int64_t m : {3, 37})
      check_staged(norm, program, DType::f32, 262144, m, config, seed + checked++);
  }
  CHECK(checked == static_cast<int>(programs.size()) * 2);
}

}  // namespace

// The staged cases' names leave out "LayerNorm" and "RMSNorm", which name the other backward
// cluster units' cases (tests/CMakeLists.txt).
TEST_CASE("backward: staged row slices on clusters match the interpreter: layer_norm") {
  check_staged_bf16_matrix(staged_cluster_programs("layer_norm"), 900u);
}
TEST_CASE("backward: staged row slices on clusters match the interpreter: layer_norm_no_bias") {
  check_staged_bf16_matrix(staged_cluster_programs("layer_norm_no_bias"), 920u);
}
TEST_CASE("backward: staged row slices on clusters match the interpreter: rms_norm and DyT") {
  check_staged_bf16_matrix(staged_cluster_programs("rms_norm", true), 940u);
}
// DyT's slices need no cluster, so its fp32 rows are not among these.
TEST_CASE("backward: fp32 staged slices of N = 262144 on clusters of 16: layer_norm") {
  check_staged_fp32_slices(staged_cluster_programs("layer_norm"), 960u);
}
TEST_CASE("backward: fp32 staged slices of N = 262144 on clusters of 16: layer_norm_no_bias") {
  check_staged_fp32_slices(staged_cluster_programs("layer_norm_no_bias"), 970u);
}
TEST_CASE("backward: fp32 staged slices of N = 262144 on clusters of 16: rms_norm") {
  check_staged_fp32_slices(staged_cluster_programs("rms_norm"), 980u);
}

namespace {

// Runs `norm` on bf16 rows of n columns in the heuristic's configuration: it matches the
// interpreter, writes every element, and takes a cluster of `ctas` CTAs of `rows` stacked rows.
void check_stacked_cluster(const tilenorm::Norm& norm, std::int64_t n, std::int64_t m,
                           unsigned seed, int ctas, int rows = 4) {
  CAPTURE(n);
  CAPTURE(m);
  const auto report = tilenorm::check_against_interpreter(
      norm,
      {.io_dtype = DType::bf16, .param_dtype = DType::bf16, .rows = m, .cols = n, .seed = seed});
  INFO(report.describe());
  CHECK(report.ok());
  CHECK(report.unwritten == 0);
  CHECK(report.used.config.ctas_per_row == ctas);
  CHECK(report.used.config.rows_per_cta == rows);
}

// Runs `norm` (the backward of `program`) on misaligned rows, n columns from a base pointer
// `offset` elements past an aligned one: it matches the interpreter and writes every element
// of its outputs and nothing else; then `about_kernel` checks which kernel ran (in this
// function's context, so that a failure names the shape).
void check_misaligned(const tilenorm::Norm& norm, const tilenorm::ir::Program& program, DType dtype,
                      std::int64_t n, std::int64_t m, std::int64_t offset, unsigned seed,
                      const std::function<void(const tilenorm::CheckReport&)>& about_kernel) {
  CAPTURE(program.name);
  CAPTURE(tilenorm::dtype_name(dtype));
  CAPTURE(n);
  CAPTURE(m);
  CAPTURE(offset);
  tilenorm::CheckOptions options = rows_of(program, dtype, m, n, seed);
  options.element_offset = offset;
  const auto report = tilenorm::check_against_interpreter(norm, options);
  INFO(report.describe());
  CHECK(report.ok());
  CHECK(report.unwritten == 0);
  CHECK(report.clobbered == 0);
  about_kernel(report);
}

}  // namespace

// The heuristic's clusters of 5, 6 and 7 CTAs of 64 threads x 4 rows, whose slices tile bf16
// LayerNorm rows of 1280-1792 vectors exactly; M = 37 leaves the last CTA rows short, M = 1000
// loops the persistent clusters over many row blocks.
TEST_CASE("backward: stacked clusters of 5-7 CTAs take bf16 LayerNorm rows of 1280-1792 vectors") {
  if (!runs_clusters(backward_runtime())) return;
  const tilenorm::Norm norm =
      backward_runtime().load(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")));
  for (const auto& [n, ctas] : {std::pair<std::int64_t, int>{10240, 5}, {12288, 6}, {14336, 7}}) {
    for (std::int64_t m : {37, 1000})
      check_stacked_cluster(norm, n, m, 41u + static_cast<unsigned>(n + m), ctas);
  }
}

TEST_CASE("backward: clusters take bf16 rows of 1024 vectors, four stacked per CTA") {
  if (!runs_clusters(backward_runtime())) return;
  // The heuristic's own choice (no config given): backwards, reading saved statistics or
  // recomputing them, split N = 8192 across 4 CTAs of four rows each, but LayerNorm's recompute,
  // which stacks two rows of 128 threads; M = 37 leaves the last CTA one row.
  for (const auto mode : {tilenorm::StatisticsMode::saved, tilenorm::StatisticsMode::recompute})
    for (const char* name : {"layer_norm", "rms_norm"}) {
      CAPTURE(name);
      CAPTURE(mode == tilenorm::StatisticsMode::recompute);
      const tilenorm::Norm norm = backward_runtime().load(
          tilenorm::backward(tilenorm::kernels::builtin_program(name), {mode}));
      const bool two_rows =
          mode == tilenorm::StatisticsMode::recompute && std::string_view(name) == "layer_norm";
      for (std::int64_t m : {37, 1000})
        check_stacked_cluster(norm, 8192, m, static_cast<unsigned>(m), 4, two_rows ? 2 : 4);
    }
}

// LayerNorm's saved backward sums (x - mean) * g, centered. The uncentered form, sum(x * g) -
// mean * sum(g), rounds relative to |x|, not |x - mean|: emulated in fp32, 2.8e-5 at offset
// 100, N = 7, against fp32's 1e-5 (docs/performance.md, fifty-fifth session), so a kernel that
// summed that way would fail here. Rows of 100 + [-2, 2.5) and -300 + [-2, 2.5), the saved mean
// beside them, at N of one CTA, of a cluster and of peeled rows.
TEST_CASE("backward: LayerNorm's saved backward survives rows whose mean is far from zero") {
  const tilenorm::Norm norm =
      backward_runtime().load(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")));
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t n : {7, 1000, 12345, 65536}) {
      for (double offset : {100.0, -300.0}) {
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(n);
        CAPTURE(offset);
        const auto report = tilenorm::check_against_interpreter(
            norm, {.io_dtype = dtype,
                   .param_dtype = dtype,
                   .rows = 100,
                   .cols = n,
                   .seed = 53u + static_cast<unsigned>(n),
                   .slot_offsets = {{"x", offset}, {"mean", offset}}});
        INFO(report.describe());
        CHECK(report.ok());
        CHECK(report.unwritten == 0);
      }
    }
  }
}

TEST_CASE("backward: misaligned rows are peeled at one shift per thread across many rows") {
  // Odd N (every row starts at another misalignment) and an offset base pointer, with more
  // rows than the persistent grid holds, so that each thread sums the column gradients of
  // several rows: they are right only if every row a thread handles has its first row's shift
  // (peeled_grid). Long rows run on clusters; rows under 256 vectors narrow vec instead
  // (peels_rows).
  struct Case {
    std::int64_t n, m;
  };
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")),
      tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"),
                         {tilenorm::StatisticsMode::recompute})};
  for (const auto& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (DType dtype : {DType::bf16, DType::f32}) {
      for (const Case c : {Case{1001, 4000}, Case{2051, 6000}, Case{4097, 3000}, Case{12345, 1300},
                           Case{40001, 400}}) {
        for (std::int64_t offset : {0, 3}) {
          check_misaligned(norm, program, dtype, c.n, c.m, offset,
                           1234u + static_cast<unsigned>(c.n + offset), [&](const auto& report) {
                             // The widest vector, peeled, where the row has 256 vectors of it.
                             const int widest = dtype == DType::bf16 ? 8 : 4;
                             const bool peeled = c.n >= 256 * widest;
                             CHECK(report.used.peel_rows == peeled);
                             CHECK(report.used.config.vec == (peeled ? widest : 1));
                           });
        }
      }
    }
  }
}

TEST_CASE("backward: misaligned rows at every shift are walked class by class") {
  // With each row at its own shift (PeeledRowShifts::per_row), a backward's row blocks walk the
  // rows in class-major order and write a partial row of column sums for each class of rows
  // they meet (KernelSpec::shift_per_row): any grid, not whole periods of the shifts. Rows
  // enough that each row block meets several classes, some too few for every row block to get
  // one.
  static tilenorm::Runtime per_row(
      tilenorm::RuntimeOptions{.device = 0,
                               .use_tuning_database = false,
                               .peeled_row_shifts = tilenorm::PeeledRowShifts::per_row});
  struct Case {
    std::int64_t n, m;
  };
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")),
      tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"),
                         {tilenorm::StatisticsMode::recompute}),
      tilenorm::backward(dyt())};
  for (const auto& program : programs) {
    const tilenorm::Norm norm = per_row.load(program);
    const tilenorm::LoweredProgram lowered = tilenorm::lower(program);
    for (DType dtype : {DType::bf16, DType::f32}) {
      for (const Case c : {Case{4097, 3000}, Case{12345, 1300}, Case{65537, 300}, Case{131071, 9},
                           Case{262143, 40}}) {
        for (std::int64_t offset : {0, 3}) {
          check_misaligned(norm, program, dtype, c.n, c.m, offset,
                           4321u + static_cast<unsigned>(c.n + offset), [&](const auto& report) {
                             // The kernel that ran walked the rows class by class (else this
                             // test says nothing).
                             CHECK(report.used.peel_rows);
                             tilenorm::KernelSpec spec{dtype, dtype, c.n, report.used.config, true};
                             spec.shift_per_row = true;
                             CHECK(tilenorm::can_shift_per_row(lowered, spec));
                           });
        }
      }
    }
  }
}

TEST_CASE("backward: rows staged in shared memory (cp.async) match the interpreter") {
  // Staged rows copy the next row block asynchronously while this one is worked on. Covered:
  // every copy size (16 bytes: bf16 x 8 and fp32 x 4; 8 bytes: fp16 x 4; 4 bytes: bf16 x 2),
  // two rows per CTA, a ragged last chunk (N = 12345 in rows padded to a multiple of 8, so
  // the copy of the last chunk stops at the row's end), one row block and many per CTA.
  struct Case {
    DType dtype;
    int vec;
    int threads_per_row;
    int rows_per_cta;
    std::int64_t n;
  };
  const Case cases[] = {
      {DType::bf16, 8, 256, 1, 8192}, {DType::bf16, 8, 128, 2, 1000},
      {DType::f32, 4, 256, 1, 4096},  {DType::f16, 4, 128, 1, 2048},
      {DType::bf16, 2, 128, 1, 512},  {DType::bf16, 8, 256, 1, 12345},
  };
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")),
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"),
                         {tilenorm::StatisticsMode::recompute}),
      tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm")),
      tilenorm::backward(dyt())};
  int checked = 0;
  for (const auto& program : programs) {
    const tilenorm::Norm norm = backward_runtime().load(program);
    for (const Case& c : cases) {
      for (std::int64_t m : {3, 700}) {
        const tilenorm::KernelConfig config{c.threads_per_row, c.rows_per_cta, c.vec, 4, 1, 0, 0};
        CAPTURE(program.name);
        CAPTURE(tilenorm::dtype_name(c.dtype));
        CAPTURE(config.describe());
        CAPTURE(c.n);
        CAPTURE(m);
        REQUIRE_FALSE(tilenorm::config_problem(norm.lowered(), {c.dtype, c.dtype, c.n, config}));
        const std::int64_t padded = (c.n + 7) / 8 * 8;
        const auto report = tilenorm::check_against_interpreter(
            norm,
            {.io_dtype = c.dtype,
             .param_dtype = c.dtype,
             .rows = m,
             .cols = c.n,
             .extra_row_stride = padded - c.n,
             .seed = 500u + static_cast<unsigned>(checked),
             .scalars = program.find_slot("eps") ? std::vector<float>{1e-2f} : std::vector<float>{},
             .config = config});
        check_forced_config(report, config);
        CHECK(report.clobbered == 0);
        ++checked;
      }
    }
  }
  CHECK(checked == 48);
}

TEST_CASE("backward: 16-bit rows on the tuned configurations, as the heuristic picks them") {
  // tuned_short_backward_rows: rows of 16-64 vectors on launches of more rows than one pass of
  // its CTAs covers (LayerNorm at N = 128: 132 SMs x 8 CTAs x 16 rows on the H100); fewer rows
  // keep the other rules (M = 1000). And RMSNorm's bf16 recompute at N = 16384 on a cluster of
  // 8 x 128 threads (where the device has clusters). No configuration is forced: the test checks
  // what the runtime chose, so that the quick matrix (no N = 128 at many rows) still runs these
  // kernels.
  constexpr int registers = static_cast<int>(tilenorm::RowStorage::registers);
  constexpr int prefetched = static_cast<int>(tilenorm::RowStorage::prefetched);
  constexpr auto recompute = tilenorm::StatisticsMode::recompute;
  constexpr auto saved = tilenorm::StatisticsMode::saved;
  struct Case {
    const char* kernel;
    tilenorm::StatisticsMode mode;
    DType dtype;
    std::int64_t n;
    std::int64_t m;
    tilenorm::KernelConfig expected;  // threads_per_row 0: any configuration not in registers
  };
  const Case cases[] = {
      {"layer_norm", recompute, DType::bf16, 128, 20000, {16, 16, 8, registers, 1, 0, 0}},
      {"layer_norm", recompute, DType::bf16, 256, 10000, {32, 8, 8, registers, 1, 0, 0}},
      {"layer_norm", recompute, DType::bf16, 512, 20000, {16, 16, 8, registers, 1, 0, 0}},
      {"rms_norm", recompute, DType::bf16, 128, 40000, {8, 32, 8, registers, 1, 0, 0}},
      {"layer_norm_no_bias", recompute, DType::bf16, 128, 40000, {8, 32, 8, registers, 1, 0, 0}},
      {"layer_norm", recompute, DType::f16, 128, 20000, {16, 16, 8, registers, 1, 0, 0}},
      {"rms_norm", recompute, DType::f16, 128, 40000, {8, 32, 8, registers, 1, 0, 0}},
      {"rms_norm", saved, DType::bf16, 128, 40000, {8, 32, 8, prefetched, 1, 0, 0}},
      {"rms_norm", recompute, DType::bf16, 256, 40000, {8, 32, 8, prefetched, 1, 0, 0}},
      {"layer_norm_no_bias", recompute, DType::f16, 256, 20000, {16, 16, 8, registers, 1, 0, 0}},
      {"layer_norm", recompute, DType::f16, 512, 20000, {16, 16, 8, registers, 1, 0, 0}},
      {"layer_norm", saved, DType::f16, 512, 10000, {64, 4, 8, prefetched, 1, 0, 0}},
      {"layer_norm", recompute, DType::bf16, 128, 1000, {}},
      {"rms_norm", recompute, DType::bf16, 16384, 300, {128, 1, 8, prefetched, 8, 0, 0}},
  };
  int checked = 0;
  for (const Case& c : cases) {
    CAPTURE(c.kernel);
    CAPTURE(c.n);
    CAPTURE(c.m);
    CAPTURE(tilenorm::dtype_name(c.dtype));
    const bool recomputes = c.mode == recompute;
    CAPTURE(recomputes);
    const tilenorm::Norm norm = backward_runtime().load(
        tilenorm::backward(tilenorm::kernels::builtin_program(c.kernel), {c.mode}));
    const auto report = tilenorm::check_against_interpreter(
        norm, {.io_dtype = c.dtype,
               .param_dtype = c.dtype,
               .rows = c.m,
               .cols = c.n,
               .seed = 620u + static_cast<unsigned>(checked),
               .scalars = norm.lowered().program.find_slot("eps") ? std::vector<float>{1e-2f}
                                                                  : std::vector<float>{}});
    INFO(report.describe());
    CHECK(report.ok());
    CHECK(report.unwritten == 0);
    CHECK(report.clobbered == 0);
    if (c.expected.ctas_per_row > 1 && !runs_clusters(backward_runtime())) {
      CHECK(report.used.config.ctas_per_row == 1);
    } else if (c.expected.threads_per_row > 0) {
      CHECK(report.used.config == c.expected);
    } else {
      CHECK(report.used.config.row_storage != registers);
    }
    ++checked;
  }
  CHECK(checked == 14);
}

TEST_CASE("backward: under 99 KiB of shared memory per CTA, column partial sums in registers") {
  // The shared-memory limit of sm_86, sm_89 and sm_120, run on this GPU: LayerNorm's two column
  // partial sums at N = 16384 and RMSNorm's one at 32768 take 128 KiB in shared memory, so
  // there they stay in registers (fit_shared_memory), and must still match. In fp16 and fp32:
  // bf16 LayerNorm at N = 16384 takes a cluster whose partial sums fit the cap anyway.
  constexpr std::size_t kCap = 99 * 1024;
  tilenorm::Runtime capped(tilenorm::RuntimeOptions{
      .device = 0, .use_tuning_database = false, .shared_memory_per_block = kCap});
  CHECK(capped.shared_memory_per_block() == kCap);
  tilenorm::DeviceLimits limits = tilenorm::device_limits(driver::device_info(0));
  limits.shared_memory_per_block = kCap;
  struct Case {
    tilenorm::ir::Program program;
    std::int64_t n;
  };
  const Case cases[] = {
      {tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")), 16384},
      {tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"),
                          {tilenorm::StatisticsMode::recompute}),
       16384},
      {tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm")), 32768}};
  int in_registers = 0;
  for (const Case& c : cases) {
    const tilenorm::Norm norm = capped.load(c.program);
    for (DType dtype : {DType::f16, DType::f32}) {
      for (std::int64_t m : {3, 300}) {
        CAPTURE(c.program.name);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(m);
        const auto report =
            tilenorm::check_against_interpreter(norm, {.io_dtype = dtype,
                                                       .param_dtype = dtype,
                                                       .rows = m,
                                                       .cols = c.n,
                                                       .seed = 900u + static_cast<unsigned>(m),
                                                       .scalars = std::vector<float>{1e-2f}});
        INFO(report.describe());
        CHECK(report.ok());
        CHECK(report.unwritten == 0);
        CHECK(report.clobbered == 0);
        const tilenorm::KernelSpec spec = tilenorm::fit_shared_memory(
            norm.lowered(), {dtype, dtype, c.n, report.used.config}, limits);
        CHECK(tilenorm::dynamic_shared_memory_bytes(norm.lowered(), spec) <= kCap);
        in_registers += spec.partials_in_registers;
      }
    }
  }
  // Not vacuous: the cap moved the partial sums of some of those kernels.
  CHECK(in_registers > 0);
  MESSAGE(in_registers << " of 12 kernels kept their column partial sums in registers");
}

TEST_CASE("backward: layer_norm_backward is bitwise deterministic and captures into a graph") {
  check_layer_norm_backward_determinism(backward_runtime(), 3000, 4096);
}

TEST_CASE("backward: a missing or small workspace is an error and launches nothing") {
  const tilenorm::Norm norm =
      backward_runtime().load(tilenorm::kernels::builtin_program("rms_norm_backward"));
  driver::ScopedContext scope(driver::primary_context(0));
  driver::DeviceBuffer x(256 * 2 * 10), dy(256 * 2 * 10), rstd(40), dx(256 * 2 * 10), w(512),
      dw(512);
  auto view = [&](const driver::DeviceBuffer& buffer) {
    return tilenorm::TensorView::contiguous(reinterpret_cast<void*>(buffer.get()), DType::bf16, 10,
                                            256);
  };
  dx.fill_bytes(0xFF);
  const auto args = tilenorm::bind_args(
      norm.program(),
      {{"x", view(x)},
       {"dy", view(dy)},
       {"dx", view(dx)},
       {"rstd", tilenorm::RowStatView{reinterpret_cast<float*>(rstd.get()), 10}},
       {"weight", tilenorm::ColumnView{reinterpret_cast<void*>(w.get()), DType::bf16, 256}},
       {"dweight", tilenorm::ColumnView{reinterpret_cast<void*>(dw.get()), DType::bf16, 256}}});
  std::string message;
  try {
    norm.launch(args, nullptr);
  } catch (const tilenorm::Error& e) {
    message = e.what();
  }
  CHECK(message.find("rms_norm_backward: needs a workspace of ") == 0);
  std::vector<unsigned char> after(256 * 2 * 10);
  dx.download(after.data(), after.size());
  CHECK(std::all_of(after.begin(), after.end(), [](unsigned char c) { return c == 0xFF; }));
}

TEST_CASE("backward: clusters fold the column partial sums, so the workspace shrinks") {
  if (backward_runtime().compute_capability_major() < 9) {
    MESSAGE("skipped: folding across thread-block clusters needs sm_90 or later, this GPU is "
            << backward_runtime().arch());
    return;
  }
  // The same kernels launched without clusters (one partial row per CTA) and with the
  // runtime's choice: both against the interpreter, the folded workspace a fraction of the
  // other where the runtime folds (folding_kernel_pays: LayerNorm's two column gradients on CTAs
  // of one row), the same where it does not. Covered: partial sums in shared memory (staged rows),
  // register sums folded through shared memory (a ragged N), recomputed statistics, M of one
  // row block and of many; and kept unfolded: two row groups (fp32), one column gradient.
  tilenorm::Runtime unfolded(
      tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false, .fold_partials = false});
  struct Case {
    DType dtype;
    std::int64_t n;
    tilenorm::KernelConfig config;
  };
  const Case cases[] = {
      {DType::bf16, 8192, {256, 1, 8, static_cast<int>(tilenorm::RowStorage::staged), 1, 0, 0}},
      {DType::f32, 1024, {128, 2, 4, static_cast<int>(tilenorm::RowStorage::prefetched), 1, 0, 0}},
      {DType::bf16, 4000, {512, 1, 8, static_cast<int>(tilenorm::RowStorage::global), 1, 0, 0}},
  };
  const std::vector<tilenorm::ir::Program> programs = {
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm")),
      tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"),
                         {tilenorm::StatisticsMode::recompute}),
      tilenorm::backward(tilenorm::kernels::builtin_program("rms_norm"),
                         {tilenorm::StatisticsMode::recompute})};
  int checked = 0;
  for (const auto& program : programs) {
    const tilenorm::Norm folded_norm = backward_runtime().load(program);
    const tilenorm::Norm unfolded_norm = unfolded.load(program);
    for (const Case& c : cases) {
      for (std::int64_t m : {2, 1000}) {
        CAPTURE(program.name);
        CAPTURE(tilenorm::dtype_name(c.dtype));
        CAPTURE(c.config.describe());
        CAPTURE(c.n);
        CAPTURE(m);
        REQUIRE_FALSE(
            tilenorm::config_problem(folded_norm.lowered(), {c.dtype, c.dtype, c.n, c.config}));
        std::size_t workspace[2] = {};
        for (const tilenorm::Norm* norm : {&folded_norm, &unfolded_norm}) {
          const auto report = tilenorm::check_against_interpreter(
              *norm, {.io_dtype = c.dtype,
                      .param_dtype = c.dtype,
                      .rows = m,
                      .cols = c.n,
                      .seed = 900u + static_cast<unsigned>(checked),
                      .scalars = program.find_slot("eps") ? std::vector<float>{1e-2f}
                                                          : std::vector<float>{},
                      .config = c.config});
          INFO(report.describe());
          CHECK(report.ok());
          CHECK(report.unwritten == 0);
          CHECK(report.clobbered == 0);
          workspace[norm == &folded_norm ? 0 : 1] = report.workspace_bytes;
        }
        // Few rows per CTA, so the partial sums are a large share of the bytes: clusters of
        // at least two fold them where folding pays. Two rows: the grid is one cluster,
        // against one or two CTAs.
        const bool folds = tilenorm::plan_kernels(folded_norm.lowered()).column_partials >= 2 &&
                           c.config.rows_per_cta == 1;
        if (m == 1000 && folds) CHECK(2 * workspace[0] <= workspace[1]);
        if (!folds) CHECK(workspace[0] == workspace[1]);
        CHECK(workspace[0] <= workspace[1]);
        MESSAGE(program.name << " N=" << c.n << " M=" << m << ": workspace " << workspace[0]
                             << " bytes folded, " << workspace[1] << " not");
        ++checked;
      }
    }
  }
  CHECK(checked == 18);
}
