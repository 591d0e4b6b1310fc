// Every built-in kernel and the example against the fp64 interpreter, over dtypes, row
// lengths, row counts and memory layouts. TILENORM_GPU_TESTS=quick selects a smaller matrix
// (used under compute-sanitizer, which slows kernels down many times).
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <future>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "check_forced_config.hpp"
#include "four_reductions.hpp"
#include "gemma_rms_norm.hpp"
#include "quick_mode.hpp"
#include "residual_rms_norm.hpp"
#include "runs_clusters.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"

namespace {

using tilenorm::DType;

const std::vector<std::int64_t> kRowLengths = {1,    7,     128,   1000,  1024,  4096,
                                               5120, 12345, 16384, 32768, 65536, 262144};
const std::vector<std::int64_t> kRowCounts = {0, 1, 3, 1000};
// Launches of more row blocks than the H200 holds at once (2112 CTAs of 128 threads), which
// take the configurations that re-read rows from L2 where those apply (rereading_one_cta) on
// 64 to 256 threads (kRowCounts' 1000 rows already exceed what fits of 512 and 1024), and
// rows that leave the last sweep of 512 threads partly empty.
const std::vector<std::int64_t> kManyRowLengths = {1024, 2048, 4096, 8192, 12288};
constexpr std::int64_t kManyRows = 2200;

struct Layout {
  const char* name;
  std::int64_t extra_row_stride;
  std::int64_t element_offset;
};
// Strided rows keep 16-byte alignment (for N a multiple of 8). An odd row stride, and a base
// pointer one element in with a stride of N + 3, make rows start misaligned: those launches
// peel their rows (a scalar head and tail around aligned vectors) and keep the widest vector,
// as do contiguous rows whose N is not a multiple of the vector width.
const Layout kLayouts[] = {
    {"contiguous", 0, 0}, {"strided", 24, 0}, {"odd stride", 1, 0}, {"offset", 3, 1}};

tilenorm::Runtime& shared_runtime() {
  static tilenorm::Runtime runtime(
      tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false});
  return runtime;
}

// Runtimes whose persistent kernels on peeled rows find the rows' shifts one way only, so that
// both ways run whichever the grid would choose.
tilenorm::Runtime& runtime_with_row_shifts(tilenorm::PeeledRowShifts shifts) {
  static tilenorm::Runtime per_thread(
      tilenorm::RuntimeOptions{.device = 0,
                               .use_tuning_database = false,
                               .peeled_row_shifts = tilenorm::PeeledRowShifts::per_thread});
  static tilenorm::Runtime per_row(
      tilenorm::RuntimeOptions{.device = 0,
                               .use_tuning_database = false,
                               .peeled_row_shifts = tilenorm::PeeledRowShifts::per_row});
  return shifts == tilenorm::PeeledRowShifts::per_row ? per_row : per_thread;
}

// The norms to check a configuration on: the shared runtime's, and where the kernel would
// loop over peeled rows, one that keeps each thread's first shift and one that finds each
// row's (KernelSpec::shift_per_row).
std::vector<const tilenorm::Norm*> norms_for(const char* name, const tilenorm::KernelSpec& spec,
                                             const tilenorm::LoweredProgram& lowered) {
  tilenorm::KernelSpec per_row = spec;
  per_row.shift_per_row = true;
  if (!tilenorm::can_shift_per_row(lowered, per_row))
    return {&tilenorm::kernels::builtin(shared_runtime(), name)};
  return {&tilenorm::kernels::builtin(
              runtime_with_row_shifts(tilenorm::PeeledRowShifts::per_thread), name),
          &tilenorm::kernels::builtin(runtime_with_row_shifts(tilenorm::PeeledRowShifts::per_row),
                                      name)};
}

// Compiles every kernel the matrix will need in parallel through the disk cache, so the
// serial launches below only load CUBINs: for aligned rows, and for rows that start
// misaligned (peeled, or with vec 1 for a persistent program, which cannot peel).
void warm_compile_cache(const tilenorm::ir::Program& program, const std::vector<DType>& dtypes) {
  const tilenorm::LoweredProgram lowered = tilenorm::lower(program);
  const std::string arch = shared_runtime().arch();
  const tilenorm::DeviceLimits limits = tilenorm::device_limits(tilenorm::driver::device_info(0));
  const bool persistent = tilenorm::plan_kernels(lowered).persistent;
  std::vector<std::future<void>> jobs;
  std::set<std::string> started;
  for (DType dtype : dtypes) {
    for (std::int64_t n : kRowLengths) {
      for (bool misaligned : {false, true}) {
        // The configurations of a few rows and of many (0: the heuristic's default).
        for (std::int64_t rows : {std::int64_t{1}, std::int64_t{0}}) {
          const bool peel = misaligned && !persistent;
          const int max_vec = misaligned && persistent ? 1 : 0;
          const tilenorm::KernelSpec spec{
              dtype, dtype, n,
              tilenorm::heuristic_config(lowered, dtype, dtype, n, limits, max_vec, peel, rows),
              peel};
          const std::string key = std::string(tilenorm::dtype_name(dtype)) + " " +
                                  std::to_string(n) + " " + spec.config.describe() +
                                  (peel ? " peeled" : "");
          if (!started.insert(key).second) continue;
          jobs.push_back(std::async(std::launch::async, [&lowered, spec, &arch] {
            tilenorm::build_kernel(lowered, spec, arch);
          }));
        }
      }
    }
  }
  for (auto& job : jobs) job.get();
}

void check_program(const tilenorm::ir::Program& program) {
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};
  warm_compile_cache(program, dtypes);
  const tilenorm::Norm norm = shared_runtime().load(program);
  std::uint64_t seed = std::random_device{}();
  int checked = 0;
  for (DType dtype : dtypes) {
    for (std::int64_t n : kRowLengths) {
      for (std::int64_t m : kRowCounts) {
        for (const Layout& layout : kLayouts) {
          if (quick() && m == 1000 && n > 4096) continue;
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
                     .reference_rows = n * m > (1 << 24) ? 48 : 0});
          INFO(report.describe());
          CHECK(report.unwritten == 0);
          CHECK(report.clobbered == 0);
          if (m > 0) {
            CHECK(report.ok());
          }
          if (m > 0) {
            // Rows that start misaligned are peeled and keep the widest vector: no launch
            // falls back to narrower vectors.
            const int widest = tilenorm::widest_vec(dtype, dtype);
            const bool misaligned =
                layout.element_offset % widest != 0 || (n + layout.extra_row_stride) % widest != 0;
            CHECK(report.used.config.vec == widest);
            CHECK(report.used.peel_rows == misaligned);
          }
          ++checked;
        }
      }
    }
  }
  for (DType dtype : dtypes) {
    for (std::int64_t n : kManyRowLengths) {
      for (const Layout& layout : {kLayouts[0], kLayouts[1]}) {
        CAPTURE(program.name);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(n);
        const std::string layout_name = layout.name;
        CAPTURE(layout_name);
        CAPTURE(seed);
        const tilenorm::CheckReport report =
            tilenorm::check_against_interpreter(norm, {.io_dtype = dtype,
                                                       .param_dtype = dtype,
                                                       .rows = kManyRows,
                                                       .cols = n,
                                                       .extra_row_stride = layout.extra_row_stride,
                                                       .seed = ++seed,
                                                       .reference_rows = 64});
        INFO(report.describe());
        CHECK(report.unwritten == 0);
        CHECK(report.clobbered == 0);
        CHECK(report.ok());
        ++checked;
      }
    }
  }
  MESSAGE(program.name << ": " << checked << " shapes checked against the interpreter");
}

}  // namespace

TEST_CASE("layer_norm matches the interpreter") {
  check_program(tilenorm::kernels::builtin_program("layer_norm"));
}
TEST_CASE("layer_norm_no_bias matches the interpreter") {
  check_program(tilenorm::kernels::builtin_program("layer_norm_no_bias"));
}
TEST_CASE("layer_norm_no_affine matches the interpreter") {
  check_program(tilenorm::kernels::builtin_program("layer_norm_no_affine"));
}
TEST_CASE("rms_norm matches the interpreter") {
  check_program(tilenorm::kernels::builtin_program("rms_norm"));
}
TEST_CASE("rms_norm_no_weight matches the interpreter") {
  check_program(tilenorm::kernels::builtin_program("rms_norm_no_weight"));
}
TEST_CASE("the Gemma RMSNorm example matches the interpreter") {
  check_program(gemma_rms_norm());
}
// Two row inputs and two row outputs (h = x + residual beside the normalized y).
TEST_CASE("the residual RMSNorm example matches the interpreter") {
  check_program(residual_rms_norm());
}
// Four reductions in one phase, and a division of every element by a row scalar (which
// hoist_reciprocals turns into one reciprocal per row).
TEST_CASE("the four_reductions example matches the interpreter") {
  check_program(four_reductions());
}

// A column parameter that starts misaligned (an offset weight or bias) keeps the widest vector:
// the rows are peeled, aligned or not, and each chunk of the parameter is read as the 32-bit
// words around it, shifted by half a word where a 16-bit chunk starts mid-word.
TEST_CASE("column parameters at any element offset are read right by peeled rows") {
  std::uint64_t seed = std::random_device{}();
  int checked = 0;
  for (const char* name : {"layer_norm", "rms_norm"}) {
    const tilenorm::Norm& norm = tilenorm::kernels::builtin(shared_runtime(), name);
    for (const auto& [io, param] :
         {std::pair{DType::bf16, DType::bf16}, std::pair{DType::f16, DType::f16},
          std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32}}) {
      for (std::int64_t n : {7, 1001, 4096, 4097, 12345}) {
        for (std::int64_t column_offset : {1, 3}) {
          for (const Layout& layout : {kLayouts[0], kLayouts[3]}) {
            CAPTURE(name);
            CAPTURE(tilenorm::dtype_name(io));
            CAPTURE(tilenorm::dtype_name(param));
            CAPTURE(n);
            CAPTURE(column_offset);
            const std::string layout_name = layout.name;
            CAPTURE(layout_name);
            CAPTURE(seed);
            const tilenorm::CheckReport report = tilenorm::check_against_interpreter(
                norm, {.io_dtype = io,
                       .param_dtype = param,
                       .rows = quick() ? 300 : 1000,
                       .cols = n,
                       .extra_row_stride = layout.extra_row_stride,
                       .element_offset = layout.element_offset,
                       .column_element_offset = column_offset,
                       .seed = ++seed});
            INFO(report.describe());
            CHECK(report.unwritten == 0);
            CHECK(report.clobbered == 0);
            CHECK(report.ok());
            CHECK(report.used.peel_rows);
            CHECK(report.used.config.vec == tilenorm::widest_vec(io, param));
            ++checked;
          }
        }
      }
    }
  }
  MESSAGE(checked << " shapes with offset column parameters checked against the interpreter");
}

TEST_CASE("LayerNorm's one-phase statistics survive a large offset, on one CTA and clusters") {
  // fp32 rows of 1000 + [-2, 2.5): E[x^2] - E[x]^2 in fp32 would lose about 2^-24 * 1000^2 /
  // 1.7, some 4% of the variance; the co-moment's per-chunk centering and the combine of the states
  // must keep rstd within fp32 tolerance (1e-5). Only the statistics are compared: y itself
  // inherits the rounding of x - mean at 1000 (about 6e-5 / std), beyond fp32's tolerance for
  // any fp32 kernel. N = 4096 tiles its threads evenly (states of equal counts, combined around
  // one lane's averages); 12345 is ragged; 65536 runs on a cluster on sm_90.
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(shared_runtime(), "layer_norm");
  for (std::int64_t n : {1000, 4096, 12345, 65536}) {
    for (double offset : {1000.0, -3000.0}) {
      CAPTURE(n);
      CAPTURE(offset);
      const auto report =
          tilenorm::check_against_interpreter(norm, {.io_dtype = DType::f32,
                                                     .param_dtype = DType::f32,
                                                     .rows = 64,
                                                     .cols = n,
                                                     .seed = static_cast<std::uint64_t>(4242 + n),
                                                     .row_input_offset = offset});
      INFO(report.describe());
      CHECK(report.unwritten == 0);
      int statistics = 0;
      for (const auto& output : report.outputs) {
        if (output.name != "mean" && output.name != "rstd") continue;
        CAPTURE(output.name);
        CHECK(output.comparison.ok());
        ++statistics;
      }
      CHECK(statistics == 2);
    }
  }
}

TEST_CASE("every row storage mode gives the same results") {
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(shared_runtime(), "layer_norm");
  for (int storage = 0; storage < tilenorm::kRowStorageCount; ++storage) {
    // 5121: rows start misaligned, so vec 8 is a peeled kernel, which cannot stage its rows
    // (cp.async) but can fetch them ahead, keeping each thread's first shift or finding each
    // row's: so there enough rows that each thread handles several, at different shifts.
    for (std::int64_t n : {1000, 5120, 5121}) {
      CAPTURE(storage);
      CAPTURE(n);
      // Pipelined rows need a cluster: covered by the cluster test below.
      if (storage == static_cast<int>(tilenorm::RowStorage::pipelined)) continue;
      const tilenorm::KernelConfig config{256, 1, 8, storage, 1, 0, 0};
      const bool peeled = n == 5121;
      if (peeled && storage == static_cast<int>(tilenorm::RowStorage::staged)) {
        const auto problem = tilenorm::config_problem(
            norm.lowered(), {DType::bf16, DType::bf16, n, config, /*peel_rows=*/true});
        REQUIRE(problem);
        CHECK(problem->find("cannot stage rows") != std::string::npos);
        continue;
      }
      const bool ahead = tilenorm::fetches_ahead(static_cast<tilenorm::RowStorage>(storage));
      for (const tilenorm::Norm* checked :
           norms_for("layer_norm", {DType::bf16, DType::bf16, n, config, peeled}, norm.lowered())) {
        const auto report =
            tilenorm::check_against_interpreter(*checked, {.io_dtype = DType::bf16,
                                                           .param_dtype = DType::bf16,
                                                           .rows = peeled && ahead ? 3001 : 300,
                                                           .cols = n,
                                                           .seed = 99u + storage,
                                                           .config = config});
        INFO(report.describe());
        CHECK(report.ok());
      }
    }
  }
}

namespace {

// Checks the bf16 kernel of `config` on rows of N (peeled where N is not a multiple of 8) against
// the interpreter, at each row count, with every way of shifting peeled rows the spec allows.
// Returns the launches checked: none where config_problem refuses the configuration.
int check_on_cluster(const char* name, const tilenorm::Norm& norm,
                     const tilenorm::KernelConfig& config, std::int64_t n,
                     const std::vector<std::int64_t>& row_counts, unsigned seed) {
  const tilenorm::KernelSpec spec{DType::bf16, DType::bf16, n, config, n % 8 != 0};
  if (tilenorm::config_problem(norm.lowered(), spec)) return 0;
  int checked = 0;
  for (std::int64_t m : row_counts) {
    for (const tilenorm::Norm* checked_norm : norms_for(name, spec, norm.lowered())) {
      CAPTURE(name);
      CAPTURE(config.describe());
      CAPTURE(n);
      CAPTURE(m);
      const auto report = tilenorm::check_against_interpreter(
          *checked_norm, {.io_dtype = DType::bf16,
                          .param_dtype = DType::bf16,
                          .rows = m,
                          .cols = n,
                          .seed = seed + 100 * static_cast<unsigned>(checked),
                          .config = config});
      check_forced_config(report, config);
      ++checked;
    }
  }
  return checked;
}

// Each cluster size, one and two rows per CTA, eight (row groups of one warp, which exchange their
// totals together) on clusters of 16, M = 37 (a last row block short of a CTA's rows), a ragged
// last slice (N = 20000); for LayerNorm (a co-moment exchanged as four floats) and RMSNorm (one
// sum), each a test case (a CTest unit) of its own, so that the two run side by side. Persistent
// clusters (prefetched, pipelined) also at M = 600, where each cluster loops over several row
// blocks and a pipelined one cycles its four exchange buffers. N = 20001 peels its rows: a
// prefetched cluster keeps each thread's first shift, or finds each row's.
void check_clusters_of_every_size(const char* name) {
  if (!runs_clusters(shared_runtime())) return;
  using tilenorm::RowStorage;
  int checked = 0;
  std::array<int, tilenorm::kRowStorageCount> checked_by_storage{};
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(shared_runtime(), name);
  for (int ctas : {2, 4, 8, 16}) {
    for (RowStorage storage :
         {RowStorage::registers, RowStorage::prefetched, RowStorage::pipelined}) {
      for (int rows_per_cta : {1, 2, 8}) {
        // One-warp row groups on the largest cluster only: on smaller ones their slices take
        // dozens of vectors per thread, which spill and compile for seconds each.
        if (rows_per_cta == 8 && ctas != 16) continue;
        for (std::int64_t n : {20000, 20001, 65536}) {
          const tilenorm::KernelConfig config{
              256 / rows_per_cta, rows_per_cta, 8, static_cast<int>(storage), ctas, 0, 0};
          const bool persistent = tilenorm::fetches_ahead(storage);
          const int runs =
              check_on_cluster(name, norm, config, n,
                               persistent && n < 65536 ? std::vector<std::int64_t>{37, 600}
                                                       : std::vector<std::int64_t>{37},
                               7u + ctas + 100 * checked);
          checked += runs;
          checked_by_storage[static_cast<int>(storage)] += runs;
        }
      }
    }
  }
  // Peeled rows on a cluster are refused with several rows per CTA, as are slices that leave a
  // CTA no columns; every storage ran the valid rest (20, 36 and 30 runs per program).
  for (RowStorage storage :
       {RowStorage::registers, RowStorage::prefetched, RowStorage::pipelined}) {
    CAPTURE(tilenorm::row_storage_name(storage));
    CHECK(checked_by_storage[static_cast<int>(storage)] >= 10);
  }
}

// Three, six, seven (the heuristic's sizes for rows that no power of two tiles) and twelve CTAs
// (non-portable, past eight): a row each size tiles exactly in sweeps of three vectors per
// thread, a ragged one (N = 20000), a peeled one (N = 20001); LayerNorm's co-moments combine over
// a butterfly padded with empty states, RMSNorm's sums in rank order. Persistent clusters also at
// M = 600, several row blocks each.
void check_clusters_of_other_sizes(const char* name) {
  if (!runs_clusters(shared_runtime())) return;
  using tilenorm::RowStorage;
  int checked = 0;
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(shared_runtime(), name);
  for (int ctas : {3, 6, 7, 12}) {
    for (RowStorage storage :
         {RowStorage::registers, RowStorage::prefetched, RowStorage::pipelined}) {
      for (int rows_per_cta : {1, 2}) {
        const int threads = 256 / rows_per_cta;
        for (std::int64_t n :
             {std::int64_t{ctas} * threads * 8 * 3, std::int64_t{20000}, std::int64_t{20001}}) {
          const tilenorm::KernelConfig config{
              threads, rows_per_cta, 8, static_cast<int>(storage), ctas, 0, 0};
          checked +=
              check_on_cluster(name, norm, config, n,
                               tilenorm::fetches_ahead(storage) ? std::vector<std::int64_t>{37, 600}
                                                                : std::vector<std::int64_t>{37},
                               13u + ctas + 100 * checked);
        }
      }
    }
  }
  // 96 runs per program (config_problem refuses the rest).
  CHECK(checked >= 30);
}

}  // namespace

TEST_CASE("clusters of every size split LayerNorm rows and give the interpreter's results") {
  check_clusters_of_every_size("layer_norm");
}

TEST_CASE("clusters of every size split RMSNorm rows and give the interpreter's results") {
  check_clusters_of_every_size("rms_norm");
}

TEST_CASE(
    "clusters of sizes other than powers of two split LayerNorm rows, match the interpreter") {
  check_clusters_of_other_sizes("layer_norm");
}

TEST_CASE("clusters of sizes other than powers of two split RMSNorm rows, match the interpreter") {
  check_clusters_of_other_sizes("rms_norm");
}
