// Launch-path behaviour on a real GPU: argument validation (nothing launched, nothing
// written), alignment peeling, M = 0, CUDA graph capture, the disk cache's warm start, tuned
// configurations, and the tuner's timing of the heuristic default.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "four_reductions.hpp"
#include "support/scoped.hpp"
#include "tilenorm/autotune/tuner.hpp"
#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/alignment.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

using tilenorm::DType;
namespace driver = tilenorm::driver;
using tilenorm::testing::ScopedEnv;
using tilenorm::testing::WarningCapture;

// Device buffers for one rms_norm launch of [rows, cols] bf16, outputs poisoned.
struct RmsBuffers {
  std::int64_t rows, cols;
  driver::DeviceBuffer x, w, y, rstd;
  RmsBuffers(std::int64_t r, std::int64_t c)
      : rows(r), cols(c), x(r * c * 2 + 64), w(c * 2 + 64), y(r * c * 2 + 64), rstd(r * 4 + 64) {
    const auto xs =
        tilenorm::encode(tilenorm::random_values(r * c, 5, -2, 2, DType::bf16), DType::bf16);
    const auto ws =
        tilenorm::encode(tilenorm::random_values(c, 6, -1, 1, DType::bf16), DType::bf16);
    x.upload(xs.data(), xs.size());
    w.upload(ws.data(), ws.size());
    y.fill_bytes(0xFF);
    rstd.fill_bytes(0xFF);
  }
  void* at(const driver::DeviceBuffer& b, std::size_t byte_offset = 0) const {
    return reinterpret_cast<std::byte*>(b.get()) + byte_offset;
  }
  tilenorm::TensorView x_view() const {
    return tilenorm::TensorView::contiguous(at(x), DType::bf16, rows, cols);
  }
  tilenorm::TensorView y_view() const {
    return tilenorm::TensorView::contiguous(at(y), DType::bf16, rows, cols);
  }
  tilenorm::ColumnView w_view() const { return {at(w), DType::bf16, cols}; }
  bool y_untouched() const {
    std::vector<unsigned char> bytes(y.bytes());
    y.download(bytes.data(), bytes.size());
    for (unsigned char b : bytes) {
      if (b != 0xFF) return false;
    }
    return true;
  }
};

tilenorm::Runtime& runtime() {
  static tilenorm::Runtime rt(tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false});
  return rt;
}

void expect_rejected(const RmsBuffers& b, const tilenorm::TensorView& x,
                     const tilenorm::TensorView& y, const std::optional<tilenorm::ColumnView>& w,
                     const std::string& message) {
  CAPTURE(message);
  CHECK_THROWS_WITH_AS(tilenorm::rms_norm(runtime(), x, w, y, 1e-5f, nullptr),
                       doctest::Contains(message.c_str()), tilenorm::Error);
  driver::check(driver::api().cuCtxSynchronize(), "synchronize");
  CHECK(b.y_untouched());
}

// A tuning database holding one bf16 rms_norm entry, for rows of n columns in m's bucket, in a
// directory of its own that TILENORM_TUNING_DB names while this lives.
class OneEntryDatabase {
 public:
  OneEntryDatabase(const std::string& name, std::int64_t n, std::int64_t m,
                   const tilenorm::KernelConfig& config)
      : dir_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))),
        path_(dir_ / "tuning.json"),
        named_("TILENORM_TUNING_DB", path_.c_str()) {
    std::filesystem::create_directories(dir_);
    const tilenorm::Norm probe = runtime().load(tilenorm::kernels::builtin_program("rms_norm"));
    tilenorm::TuningEntry entry;
    entry.key = probe.tuning_key(DType::bf16, DType::bf16, n, m);
    entry.config = tilenorm::reflect::to_json(config);
    entry.median_us = 10;
    entry.tbps = 3;
    entry.date = tilenorm::utc_date_time_now();
    tilenorm::upsert_entries(path_, {entry});
  }
  OneEntryDatabase(const OneEntryDatabase&) = delete;
  OneEntryDatabase& operator=(const OneEntryDatabase&) = delete;
  ~OneEntryDatabase() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path dir_, path_;
  ScopedEnv named_;
};

}  // namespace

TEST_CASE("bad launch arguments are rejected by name and nothing is written") {
  driver::ScopedContext scope(driver::primary_context(0));
  RmsBuffers b(64, 256);
  auto x = b.x_view();
  auto y = b.y_view();
  auto w = b.w_view();

  auto null_x = x;
  null_x.data = nullptr;
  expect_rejected(b, null_x, y, w, "rms_norm: row input 'x' is a null pointer");

  auto odd_x = x;
  odd_x.data = b.at(b.x, 1);
  expect_rejected(b, odd_x, y, w,
                  "row input 'x' is misaligned: its address must be a multiple of 2 bytes");

  auto fp32_y = y;
  fp32_y.dtype = DType::f32;
  expect_rejected(b, x, fp32_y, w, "row output 'y' has dtype fp32 but the row tensors are bf16");

  auto narrow_stride = x;
  narrow_stride.row_stride = 100;
  expect_rejected(b, narrow_stride, y, w, "row input 'x' has row_stride 100 < cols 256");

  auto negative = x;
  negative.rows = -1;
  expect_rejected(b, negative, y, w, "row input 'x' has negative rows (-1)");

  auto other_shape = y;
  other_shape.rows = 32;
  expect_rejected(b, x, other_shape, w, "row output 'y' is [32, 256] but 'x' is [64, 256]");

  auto short_w = w;
  short_w.size = 255;
  expect_rejected(b, x, y, short_w, "column 'weight' has size 255 but the rows have 256 columns");

  auto null_w = w;
  null_w.data = nullptr;
  expect_rejected(b, x, y, null_w, "column 'weight' is a null pointer");

  // In place (y over x), or y's last row over the weight.
  auto x_as_y = x;
  expect_rejected(b, x, x_as_y, w,
                  "row output 'y' shares memory with row input 'x': an output may not overlap "
                  "another argument (in-place launches are not supported)");
  auto w_under_y = w;
  w_under_y.data = b.at(b.y, 63 * 256 * 2);
  expect_rejected(b, x, y, w_under_y, "row output 'y' shares memory with column 'weight'");

  CHECK_THROWS_WITH_AS(
      tilenorm::layer_norm(runtime(), x, std::nullopt,
                           tilenorm::ColumnView{b.at(b.w), DType::bf16, 256}, y, 1e-5f, nullptr),
      "layer_norm: a bias needs a weight (pass both, the weight alone, or neither)",
      tilenorm::Error);
  CHECK(b.y_untouched());
}

TEST_CASE("rows misaligned alike are peeled with the widest vector; unlike, vec narrows") {
  driver::ScopedContext scope(driver::primary_context(0));
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(runtime(), "rms_norm");
  RmsBuffers b(32, 256);
  auto resolve = [&](const tilenorm::TensorView& x, const tilenorm::TensorView& y,
                     const tilenorm::ColumnView& w) {
    return norm.resolve(tilenorm::bind_args(
        norm.program(),
        {{"x", x}, {"eps", 1e-5f}, {"rstd", tilenorm::RowStatView{}}, {"weight", w}, {"y", y}}));
  };
  auto moved = [&](tilenorm::TensorView view, const driver::DeviceBuffer& buffer,
                   std::size_t elements) {
    view.data = b.at(buffer, 2 * elements);
    return view;
  };
  const auto x = b.x_view(), y = b.y_view();
  const auto w = b.w_view();
  struct Case {
    const char* what;
    tilenorm::TensorView x, y;
    tilenorm::ColumnView w;
    int vec;
    bool peeled;
  };
  auto strided = [](tilenorm::TensorView view) {
    view.row_stride = 257;  // odd: every row starts one element later modulo 8
    return view;
  };
  const Case cases[] = {
      {"aligned", x, y, w, 8, false},
      {"x and y one element in", moved(x, b.x, 1), moved(y, b.y, 1), w, 8, true},
      {"x 9 and y 1 element in", moved(x, b.x, 9), moved(y, b.y, 1), w, 8, true},
      {"odd row stride", strided(x), strided(y), w, 8, true},
      {"weight one element in", x, y, {b.at(b.w, 2), DType::bf16, 256}, 8, true},
      {"x one, y three elements in", moved(x, b.x, 1), moved(y, b.y, 3), w, 2, true},
      {"x one element in, y aligned", moved(x, b.x, 1), y, w, 1, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const tilenorm::ResolvedConfig resolved = resolve(c.x, c.y, c.w);
    CHECK(resolved.config.vec == c.vec);
    CHECK(resolved.peel_rows == c.peeled);
  }
  // A peeled launch computes what the aligned one does: the same rows, one element in.
  const auto values = tilenorm::random_values(32 * 256, 5, -2, 2, DType::bf16);
  std::vector<std::byte> shifted(2);
  const auto bytes = tilenorm::encode(values, DType::bf16);
  shifted.insert(shifted.end(), bytes.begin(), bytes.end());
  driver::DeviceBuffer x2(shifted.size() + 64), y2(shifted.size() + 64);
  x2.upload(shifted.data(), shifted.size());
  y2.fill_bytes(0xFF);
  tilenorm::rms_norm(runtime(), x, w, y, 1e-5f, nullptr);
  tilenorm::rms_norm(runtime(), moved(x, x2, 1), w, moved(y, y2, 1), 1e-5f, nullptr);
  driver::check(driver::api().cuCtxSynchronize(), "synchronize");
  std::vector<std::byte> aligned_out(bytes.size()), peeled_out(y2.bytes());
  b.y.download(aligned_out.data(), aligned_out.size());
  y2.download(peeled_out.data(), peeled_out.size());
  const auto expected = tilenorm::decode(aligned_out, DType::bf16);
  const auto actual = tilenorm::decode(std::span(peeled_out).subspan(2, bytes.size()), DType::bf16);
  const auto comparison = tilenorm::compare(actual, expected, tilenorm::tolerance_for(DType::bf16));
  INFO(comparison.describe());
  CHECK(comparison.ok());
  // Nothing before the first row or after the last one was written.
  std::size_t clobbered = 0;
  for (std::size_t i = 0; i < peeled_out.size(); ++i) {
    const bool outside = i < 2 || i >= 2 + bytes.size();
    clobbered += outside && peeled_out[i] != std::byte{0xFF};
  }
  CHECK(clobbered == 0);
}

TEST_CASE("launch_grid reports the grid of a launch: one row block per CTA, or persistent") {
  driver::ScopedContext scope(driver::primary_context(0));
  constexpr std::int64_t rows = 16384;  // more row blocks than fit on the device at once
  RmsBuffers b(rows, 257);
  // `m` rows of `width` columns, `stride` apart, within b's buffers.
  auto args = [&](const tilenorm::Norm& norm, std::int64_t m, std::int64_t width,
                  std::int64_t stride) {
    REQUIRE(m * stride <= b.rows * b.cols);
    const tilenorm::TensorView x{b.at(b.x), DType::bf16, m, width, stride};
    const tilenorm::TensorView y{b.at(b.y), DType::bf16, m, width, stride};
    return tilenorm::bind_args(norm.program(),
                               {{"x", x},
                                {"eps", 1e-5f},
                                {"rstd", tilenorm::RowStatView{}},
                                {"weight", tilenorm::ColumnView{b.at(b.w), DType::bf16, width}},
                                {"y", y}});
  };
  const tilenorm::Norm& norm = tilenorm::kernels::builtin(runtime(), "rms_norm");
  SUBCASE("one row block per CTA") {
    const tilenorm::KernelConfig config{32, 4, 8, static_cast<int>(tilenorm::RowStorage::registers),
                                        1,  0, 0};
    const tilenorm::LaunchGrid grid = norm.launch_grid(args(norm, rows, 256, 256), config);
    CHECK(grid.ctas == rows / 4);
    CHECK(grid.threads_per_block == 128);
    CHECK(grid.ctas_per_row == 1);
    CHECK(grid.resident_row_blocks == 0);
    CHECK(grid.registers > 0);
    CHECK_FALSE(grid.shift_per_row);
  }
  SUBCASE("persistent, on peeled rows: whole periods of shifts, or each row at its own") {
    const tilenorm::KernelConfig config{
        32, 1, 8, static_cast<int>(tilenorm::RowStorage::prefetched), 1, 0, 0};
    // Each row starts one element later modulo 8. Hundreds of 32-thread CTAs fit, so whole
    // periods of 8 shifts keep nearly all of them busy, and each thread keeps its first shift.
    const tilenorm::LaunchGrid grid = norm.launch_grid(args(norm, rows, 256, 257), config);
    CAPTURE(grid.ctas);
    CAPTURE(grid.resident_row_blocks);
    CHECK(grid.resident_row_blocks > 0);
    CHECK_FALSE(grid.shift_per_row);
    CHECK(grid.ctas <= grid.resident_row_blocks);
    CHECK(grid.ctas % 8 == 0);
    CHECK(grid.ctas > grid.resident_row_blocks - 8);
    CHECK(grid.threads_per_block == 32);
    CHECK(grid.registers > 0);
    const tilenorm::LaunchGrid aligned = norm.launch_grid(args(norm, rows, 256, 256), config);
    CHECK_FALSE(aligned.shift_per_row);
    CHECK(aligned.ctas == std::min<std::int64_t>(rows, aligned.resident_row_blocks));
    // Asked to find each row's shift, the kernel takes every resident CTA.
    tilenorm::Runtime per_row(
        tilenorm::RuntimeOptions{.device = 0,
                                 .use_tuning_database = false,
                                 .peeled_row_shifts = tilenorm::PeeledRowShifts::per_row});
    const tilenorm::Norm& per_row_norm = tilenorm::kernels::builtin(per_row, "rms_norm");
    const tilenorm::LaunchGrid each =
        per_row_norm.launch_grid(args(per_row_norm, rows, 256, 257), config);
    CAPTURE(each.resident_row_blocks);
    CHECK(each.shift_per_row);
    CHECK(each.ctas == std::min<std::int64_t>(rows, each.resident_row_blocks));
  }
  SUBCASE("persistent clusters on long peeled rows: each row at its own shift where few fit") {
    // N = 262143 (heuristic: clusters of 16): about 14 clusters fit on an H200, of which whole
    // periods of 8 shifts would keep 8 busy; each row finds its shift where they would idle
    // over a quarter.
    const tilenorm::LaunchGrid grid = norm.launch_grid(args(norm, 16, 262143, 262143));
    CAPTURE(grid.ctas);
    CAPTURE(grid.resident_row_blocks);
    REQUIRE(grid.resident_row_blocks > 0);
    const std::int64_t row_blocks = std::min<std::int64_t>(16, grid.resident_row_blocks);
    CHECK(grid.shift_per_row == tilenorm::shift_per_row_pays(grid.resident_row_blocks, 8));
    if (grid.shift_per_row) {
      CHECK(grid.ctas == row_blocks * grid.ctas_per_row);
    } else {
      CHECK(grid.ctas == tilenorm::peeled_grid(row_blocks, 16, 262143, 8) * grid.ctas_per_row);
    }
    MESSAGE("N = 262143: " << grid.resident_row_blocks << " resident clusters of "
                           << grid.ctas_per_row << ", each row at its own shift: "
                           << (grid.shift_per_row ? "yes" : "no"));
  }
}

TEST_CASE("column parameters fetched early or in the output pass give the interpreter's results") {
  driver::ScopedContext scope(driver::primary_context(0));
  tilenorm::Runtime early(tilenorm::RuntimeOptions{
      .device = 0, .use_tuning_database = false, .early_columns = tilenorm::EarlyColumns::always});
  tilenorm::Runtime late(tilenorm::RuntimeOptions{
      .device = 0, .use_tuning_database = false, .early_columns = tilenorm::EarlyColumns::never});
  struct Shape {
    std::int64_t m, n;
  };
  // Decode sizes, rows the chunks do not tile (1000, 12345), and a full grid.
  const Shape shapes[] = {{1, 4096}, {3, 1000}, {300, 12345}, {2048, 4096}, {5000, 128}};
  std::uint64_t seed = std::random_device{}();
  for (const char* name : {"layer_norm", "rms_norm"}) {
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      for (const Shape& shape : shapes) {
        for (tilenorm::Runtime* rt : {&early, &late, &runtime()}) {
          CAPTURE(name);
          CAPTURE(tilenorm::dtype_name(dtype));
          CAPTURE(shape.m);
          CAPTURE(shape.n);
          CAPTURE(seed);
          const std::string fetch = rt == &early ? "always" : rt == &late ? "never" : "auto";
          CAPTURE(fetch);
          const tilenorm::CheckReport report = tilenorm::check_against_interpreter(
              tilenorm::kernels::builtin(*rt, name), {.io_dtype = dtype,
                                                      .param_dtype = dtype,
                                                      .rows = shape.m,
                                                      .cols = shape.n,
                                                      .seed = ++seed});
          INFO(report.describe());
          CHECK(report.unwritten == 0);
          CHECK(report.clobbered == 0);
          CHECK(report.ok());
        }
      }
    }
  }
}

TEST_CASE("launch_grid reports column parameters fetched early where the rule takes them") {
  driver::ScopedContext scope(driver::primary_context(0));
  RmsBuffers b(2048, 4096);
  auto args = [&](const tilenorm::Norm& norm, std::int64_t m) {
    const tilenorm::TensorView x =
        tilenorm::TensorView::contiguous(b.at(b.x), DType::bf16, m, 4096);
    const tilenorm::TensorView y =
        tilenorm::TensorView::contiguous(b.at(b.y), DType::bf16, m, 4096);
    const tilenorm::ColumnView w{b.at(b.w), DType::bf16, 4096};
    if (norm.program().name == "rms_norm") {
      return tilenorm::bind_args(
          norm.program(),
          {{"x", x}, {"eps", 1e-5f}, {"rstd", tilenorm::RowStatView{}}, {"weight", w}, {"y", y}});
    }
    return tilenorm::bind_args(norm.program(), {{"x", x},
                                                {"eps", 1e-5f},
                                                {"mean", tilenorm::RowStatView{}},
                                                {"rstd", tilenorm::RowStatView{}},
                                                {"weight", w},
                                                {"bias", w},
                                                {"y", y}});
  };
  const int sms = runtime().multiprocessors();
  for (const char* name : {"layer_norm", "rms_norm"}) {
    const tilenorm::Norm& norm = tilenorm::kernels::builtin(runtime(), name);
    const tilenorm::LoweredProgram& lowered = norm.lowered();
    for (std::int64_t m : {1, 8, 256, 1024}) {
      CAPTURE(name);
      CAPTURE(m);
      const tilenorm::BoundArgs bound = args(norm, m);
      const tilenorm::ResolvedConfig resolved = norm.resolve(bound);
      const tilenorm::KernelSpec spec{DType::bf16, DType::bf16, 4096, resolved.config};
      REQUIRE(tilenorm::can_fetch_columns_early(lowered, spec));
      const tilenorm::LaunchGrid grid = norm.launch_grid(bound);
      const std::int64_t row_blocks =
          (m + resolved.config.rows_per_cta - 1) / resolved.config.rows_per_cta;
      CHECK(grid.early_columns ==
            tilenorm::early_columns_pay(
                tilenorm::early_column_vectors(lowered, spec), row_blocks, grid.threads_per_block,
                sms, tilenorm::driver::device_info(0).registers_per_multiprocessor));
      // RMSNorm holds four vectors of its weight; LayerNorm eight of its weight and bias, which
      // it fetches early only where every row block is resident at once.
      if (norm.program().name == "rms_norm" || m == 1) CHECK(grid.early_columns);
      if (norm.program().name == "layer_norm" && m == 1024) CHECK_FALSE(grid.early_columns);
      MESSAGE(name << " bf16 4096 x " << m << ": " << tilenorm::early_column_vectors(lowered, spec)
                   << " parameter vectors per thread, columns fetched early: "
                   << (grid.early_columns ? "yes" : "no"));
    }
  }
  // A configuration's column fetch (a tuning entry's) overrides the rule either way, and the
  // kernel it gives matches the interpreter. LayerNorm at 1024 rows: 64 threads per row hold
  // sixteen parameter vectors, which the rule fetches late; 256 threads hold four, fetched early.
  {
    const tilenorm::Norm& norm = tilenorm::kernels::builtin(runtime(), "layer_norm");
    const tilenorm::BoundArgs bound = args(norm, 1024);
    using tilenorm::ColumnFetch;
    for (const auto& [threads, fetch, early] :
         {std::tuple{64, ColumnFetch::rule, false}, std::tuple{64, ColumnFetch::early, true},
          std::tuple{256, ColumnFetch::rule, true}, std::tuple{256, ColumnFetch::late, false}}) {
      tilenorm::KernelConfig config{threads, 1, 8,
                                    static_cast<int>(tilenorm::RowStorage::registers), 1};
      config.column_fetch = static_cast<int>(fetch);
      CAPTURE(config.describe());
      CHECK(norm.launch_grid(bound, config).early_columns == early);
      const tilenorm::CheckReport report =
          tilenorm::check_against_interpreter(norm, {.io_dtype = DType::bf16,
                                                     .param_dtype = DType::bf16,
                                                     .rows = 1024,
                                                     .cols = 4096,
                                                     .seed = std::random_device{}(),
                                                     .config = config});
      INFO(report.describe());
      CHECK(report.unwritten == 0);
      CHECK(report.ok());
    }
  }
  // More row blocks than fit at once (1056 CTAs of 256 threads on an H200): RMSNorm's rows
  // are re-read from L2 instead, with the parameters read where they are used.
  const tilenorm::DeviceLimits limits = tilenorm::device_limits(tilenorm::driver::device_info(0));
  if (limits.threads_per_multiprocessor < 2048 ||
      sms * (limits.threads_per_multiprocessor / 256) >= 2048) {
    MESSAGE(
        "skipped the many-rows case: this GPU holds 2048 rows of 256 threads at once, or keeps "
        "rows in registers");
    return;
  }
  const tilenorm::Norm& rms = tilenorm::kernels::builtin(runtime(), "rms_norm");
  const tilenorm::BoundArgs many = args(rms, 2048);
  const tilenorm::ResolvedConfig resolved = rms.resolve(many);
  CHECK(resolved.config.row_storage == static_cast<int>(tilenorm::RowStorage::global));
  CHECK(resolved.config.threads_per_row == 256);
  CHECK_FALSE(rms.launch_grid(many).early_columns);
}

TEST_CASE("a heuristic configuration that spills heavily runs on more threads, or re-reads rows") {
  // The four_reductions example's backward keeps nine reductions' values live: the heuristic's
  // configurations spill kilobytes (NVRTC 13.0, sm_90: 2704 bytes on 64 threads per row at
  // bf16 N = 4096, fixed by 128 threads; 2980 bytes on 256 threads at N = 16384, where 512
  // threads still spill 1292 and rows re-read from L2 spill nothing).
  const tilenorm::Norm norm = runtime().load(tilenorm::backward(four_reductions()));
  const tilenorm::LoweredProgram& lowered = norm.lowered();
  const tilenorm::DeviceLimits limits = tilenorm::device_limits(tilenorm::driver::device_info(0));
  for (const auto& [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{16384, 4096}, {4096, 16384}}) {
    CAPTURE(cols);
    const tilenorm::KernelConfig heuristic =
        tilenorm::heuristic_config(lowered, DType::bf16, DType::bf16, cols, limits, 8, false, rows);
    const auto spilled = [&](const tilenorm::KernelConfig& config) {
      return tilenorm::build_kernel(lowered, {DType::bf16, DType::bf16, cols, config},
                                    runtime().arch())
          .spill_bytes;
    };
    const int heuristic_spill = spilled(heuristic);
    if (heuristic_spill <= tilenorm::kToleratedSpillBytes) {
      MESSAGE("skipped N = " << cols << ": this NVRTC spills " << heuristic_spill
                             << " bytes of the heuristic's " << heuristic.describe()
                             << ", within what is tolerated");
      continue;
    }
    tilenorm::CheckOptions check;
    check.rows = rows;
    check.cols = cols;
    check.reference_rows = 64;
    const tilenorm::CheckReport report = tilenorm::check_against_interpreter(norm, check);
    CHECK_MESSAGE(report.ok(), report.describe());
    CAPTURE(heuristic.describe());
    CAPTURE(report.used.config.describe());
    CHECK(report.used.source == tilenorm::ConfigSource::heuristic);
    const int used_spill = spilled(report.used.config);
    CHECK(used_spill < heuristic_spill);
    MESSAGE("N = " << cols << ": the heuristic's " << heuristic.describe() << " spills "
                   << heuristic_spill << " bytes; the runtime ran " << report.used.config.describe()
                   << ", which spills " << used_spill);
  }
}

TEST_CASE("the heuristic sees this GPU's limits as the table of known GPUs has them") {
  // The runtime's limits come from the driver; tilenorm-dump, the tuner's --dry-run and the
  // unit tests use the table. On a GPU the table names, both give the same configurations.
  const driver::DeviceInfo info = driver::device_info(0);
  const tilenorm::DeviceLimits limits = tilenorm::device_limits(info);
  CHECK(limits.threads_per_multiprocessor == info.max_threads_per_multiprocessor);
  CHECK(limits.multiprocessors == info.multiprocessors);
  const tilenorm::DeviceLimits* known = nullptr;
  for (const tilenorm::DeviceLimits& row : tilenorm::known_devices())
    if (info.name.find(row.name) != std::string::npos && info.arch() == row.arch()) known = &row;
  if (known == nullptr) {
    MESSAGE("skipped the comparison: '" << info.name << "' is not in the table of known GPUs");
    return;
  }
  CHECK(limits.threads_per_multiprocessor == known->threads_per_multiprocessor);
  CHECK(limits.cluster_ctas == known->cluster_ctas);
  CHECK(limits.compute_capability == known->compute_capability);
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    const tilenorm::LoweredProgram lowered = tilenorm::lower(kernel.program);
    for (DType dtype : {DType::bf16, DType::f32}) {
      for (std::int64_t n : {128, 1024, 4096, 8192, 16384, 32768, 65536, 262144}) {
        CAPTURE(kernel.name);
        CAPTURE(n);
        CHECK(tilenorm::heuristic_config(lowered, dtype, dtype, n, limits) ==
              tilenorm::heuristic_config(lowered, dtype, dtype, n, *known));
      }
    }
  }
}

TEST_CASE("M = 0 is a no-op, even with null pointers") {
  const tilenorm::TensorView empty{nullptr, DType::bf16, 0, 4096, 4096};
  CHECK_NOTHROW(tilenorm::rms_norm(
      runtime(), empty, tilenorm::ColumnView{nullptr, DType::bf16, 4096}, empty, 1e-5f, nullptr));
}

TEST_CASE("a launch captured into a CUDA graph replays correctly") {
  driver::ScopedContext scope(driver::primary_context(0));
  RmsBuffers b(512, 4096);
  driver::Stream stream;
  // Load the kernel outside the capture (the first launch compiles).
  tilenorm::rms_norm(runtime(), b.x_view(), b.w_view(), b.y_view(), 1e-5f,
                     reinterpret_cast<tilenorm::Stream>(stream.get()));
  stream.synchronize();
  b.y.fill_bytes(0xFF);

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  driver::check(
      driver::api().cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      "begin capture");
  tilenorm::rms_norm(runtime(), b.x_view(), b.w_view(), b.y_view(), 1e-5f,
                     reinterpret_cast<tilenorm::Stream>(stream.get()),
                     {reinterpret_cast<float*>(b.rstd.get()), b.rows});
  driver::check(driver::api().cuStreamEndCapture(stream.get(), &graph), "end capture");
  CHECK(b.y_untouched());  // capturing ran nothing
  driver::check(driver::api().cuGraphInstantiateWithFlags(&exec, graph, 0), "instantiate");
  driver::check(driver::api().cuGraphLaunch(exec, stream.get()), "graph launch");
  stream.synchronize();
  CHECK_FALSE(b.y_untouched());

  // Compare the replayed output with a direct launch on fresh buffers of the same input.
  std::vector<std::uint16_t> replayed(b.rows * b.cols), direct(b.rows * b.cols);
  b.y.download(replayed.data(), replayed.size() * 2);
  b.y.fill_bytes(0xFF);
  tilenorm::rms_norm(runtime(), b.x_view(), b.w_view(), b.y_view(), 1e-5f,
                     reinterpret_cast<tilenorm::Stream>(stream.get()));
  stream.synchronize();
  b.y.download(direct.data(), direct.size() * 2);
  CHECK(replayed == direct);
  driver::api().cuGraphExecDestroy(exec);
  driver::api().cuGraphDestroy(graph);
}

// A chain of launches on one stream, each reading what the one before wrote: y1 = RMSNorm(x),
// y2 = RMSNorm(y1), the backward with x = y1 and dy = y2 (its main kernel, then the finishing
// kernel that sums the partial rows), and y3 = RMSNorm(dx). Returns y2, dx, dweight and y3.
std::vector<std::uint16_t> run_chain(tilenorm::Runtime& rt, std::int64_t rows, std::int64_t cols,
                                     bool captured) {
  const auto elements = static_cast<std::size_t>(rows * cols);
  driver::DeviceBuffer x(elements * 2), y1(elements * 2), y2(elements * 2), dx(elements * 2),
      y3(elements * 2), w(static_cast<std::size_t>(cols) * 2),
      dw(static_cast<std::size_t>(cols) * 2);
  const auto xs = tilenorm::encode(
      tilenorm::random_values(static_cast<std::int64_t>(elements), 11, -2, 2, DType::bf16),
      DType::bf16);
  const auto ws =
      tilenorm::encode(tilenorm::random_values(cols, 12, -1, 1, DType::bf16), DType::bf16);
  x.upload(xs.data(), xs.size());
  w.upload(ws.data(), ws.size());
  for (driver::DeviceBuffer* out : {&y1, &y2, &dx, &y3, &dw}) out->fill_bytes(0xFF);
  auto address = [](const driver::DeviceBuffer& b) { return reinterpret_cast<void*>(b.get()); };
  auto rows_of = [&](const driver::DeviceBuffer& b) {
    return tilenorm::TensorView::contiguous(address(b), DType::bf16, rows, cols);
  };
  const tilenorm::ColumnView weight{address(w), DType::bf16, cols};
  const tilenorm::RmsNormBackward backward{rows_of(y1), rows_of(y2), rows_of(dx), weight,
                                           tilenorm::ColumnView{address(dw), DType::bf16, cols}};
  driver::DeviceBuffer workspace(
      std::max<std::size_t>(1, tilenorm::rms_norm_backward_workspace(rt, backward)));
  driver::Stream stream;
  const auto s = reinterpret_cast<tilenorm::Stream>(stream.get());
  auto chain = [&] {
    tilenorm::rms_norm(rt, rows_of(x), weight, rows_of(y1), 1e-5f, s);
    tilenorm::rms_norm(rt, rows_of(y1), weight, rows_of(y2), 1e-5f, s);
    tilenorm::rms_norm_backward(rt, backward, {address(workspace), workspace.bytes()}, s);
    tilenorm::rms_norm(rt, rows_of(dx), weight, rows_of(y3), 1e-5f, s);
  };
  if (!captured) {
    chain();
  } else {
    // Loaded outside the capture (the first launch compiles), then the outputs poisoned again.
    chain();
    stream.synchronize();
    for (driver::DeviceBuffer* out : {&y1, &y2, &dx, &y3, &dw}) out->fill_bytes(0xFF);
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    driver::check(
        driver::api().cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "begin capture");
    chain();
    driver::check(driver::api().cuStreamEndCapture(stream.get(), &graph), "end capture");
    driver::check(driver::api().cuGraphInstantiateWithFlags(&exec, graph, 0), "instantiate");
    driver::check(driver::api().cuGraphLaunch(exec, stream.get()), "graph launch");
    stream.synchronize();
    driver::api().cuGraphExecDestroy(exec);
    driver::api().cuGraphDestroy(graph);
  }
  stream.synchronize();
  std::vector<std::uint16_t> all;
  for (const driver::DeviceBuffer* out : {&y2, &dx, &y3, &dw}) {
    std::vector<std::uint16_t> values(out->bytes() / 2);
    out->download(values.data(), out->bytes());
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

TEST_CASE("programmatic launches chain dependent kernels as plain launches do, also captured") {
  driver::ScopedContext scope(driver::primary_context(0));
  tilenorm::Runtime overlapping(tilenorm::RuntimeOptions{
      .device = 0, .use_tuning_database = false, .programmatic_launch = true});
  if (overlapping.compute_capability_major() < 9)
    MESSAGE("this GPU has no programmatic dependent launch: both runtimes launch plainly");
  // Grids the runtime launches programmatically: persistent clusters on fewer rows than fit at
  // once (8 rows of 65536), a persistent backward on few rows (64 x 4096), one CTA per row over
  // many waves (4096 x 4096; its backward fills the device and launches plainly), and every
  // finishing kernel.
  for (const auto& [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{8, 65536}, {64, 4096}, {4096, 4096}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const std::vector<std::uint16_t> plain = run_chain(runtime(), rows, cols, false);
    // Every output written (the poison is all ones, a NaN in bf16).
    CHECK(std::find(plain.begin(), plain.end(), std::uint16_t{0xFFFF}) == plain.end());
    CHECK(run_chain(overlapping, rows, cols, false) == plain);
    CHECK(run_chain(overlapping, rows, cols, true) == plain);
  }
}

TEST_CASE("a fresh runtime loads kernels from the disk cache without NVRTC") {
  const auto program = tilenorm::kernels::builtin_program("layer_norm");
  const tilenorm::CheckOptions options{
      .io_dtype = DType::bf16, .param_dtype = DType::bf16, .rows = 8, .cols = 3072, .seed = 17};
  {
    tilenorm::Runtime first(tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false});
    CHECK(tilenorm::check_against_interpreter(first.load(program), options).ok());
    CHECK(first.statistics().kernels_loaded == 1);
  }
  tilenorm::Runtime second(tilenorm::RuntimeOptions{.device = 0, .use_tuning_database = false});
  CHECK(tilenorm::check_against_interpreter(second.load(program), options).ok());
  CHECK(second.statistics().kernels_loaded == 1);
  CHECK(second.statistics().nvrtc_compiles == 0);
}

TEST_CASE("the runtime uses tuned configurations: exact, nearest M bucket, then the heuristic") {
  const tilenorm::KernelConfig tuned{64, 4, 4, static_cast<int>(tilenorm::RowStorage::registers),
                                     1,  0, 0};
  const OneEntryDatabase db("tilenorm-gpu-db", 2048, 4096, tuned);

  tilenorm::Runtime rt;  // reads TILENORM_TUNING_DB
  const tilenorm::Norm norm = rt.load(tilenorm::kernels::builtin_program("rms_norm"));
  auto resolve_for = [&](std::int64_t rows, std::int64_t cols) {
    return tilenorm::check_against_interpreter(norm, {.io_dtype = DType::bf16,
                                                      .param_dtype = DType::bf16,
                                                      .rows = rows,
                                                      .cols = cols,
                                                      .seed = 3});
  };
  const auto exact = resolve_for(4096, 2048);
  CHECK(exact.ok());
  CHECK(exact.used.source == tilenorm::ConfigSource::tuned_exact);
  CHECK(exact.used.config == tuned);
  const auto nearest = resolve_for(100, 2048);
  CHECK(nearest.ok());
  CHECK(nearest.used.source == tilenorm::ConfigSource::tuned_nearest_m);
  CHECK(nearest.used.config == tuned);
  const auto untuned = resolve_for(100, 2304);
  CHECK(untuned.ok());
  CHECK(untuned.used.source == tilenorm::ConfigSource::heuristic);
}

TEST_CASE("a tuned configuration these rows cannot use is named in a warning, and kept") {
  // 1024 threads per row, 4 rows per CTA: a block of 4096 threads, which no device runs (an
  // entry written by another version of tilenorm, say, or edited by hand).
  const tilenorm::KernelConfig unusable{
      1024, 4, 8, static_cast<int>(tilenorm::RowStorage::registers), 1, 0, 0};
  const OneEntryDatabase db("tilenorm-gpu-db-unusable", 4096, 512, unusable);

  std::vector<std::string> warnings;
  tilenorm::CheckReport report;
  {
    const WarningCapture capture;
    tilenorm::Runtime rt;  // reads TILENORM_TUNING_DB
    const tilenorm::Norm norm = rt.load(tilenorm::kernels::builtin_program("rms_norm"));
    report = tilenorm::check_against_interpreter(norm, {.io_dtype = DType::bf16,
                                                        .param_dtype = DType::bf16,
                                                        .rows = 512,
                                                        .cols = 4096,
                                                        .seed = 5});
    warnings = capture.messages();
  }
  // The heuristic ran, correctly, and the warning says which entry and why.
  CHECK(report.ok());
  CHECK(report.unwritten == 0);
  CHECK(report.used.source == tilenorm::ConfigSource::heuristic);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("rms_norm: not using the tuned configuration " + unusable.describe() +
                         " for N = 4096: ") == 0);
  CHECK(warnings[0].find("threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, "
                         "got 4096") != std::string::npos);
  CHECK(warnings[0].find("the heuristic configuration runs instead") != std::string::npos);
  // The entry is still in the database.
  CHECK(tilenorm::TuningDatabase::load_file(db.path()).entries().size() == 1);
}

// The databases that ship with tilenorm, read with no setting (the tests' environment turns them
// off; this case turns them on). On a GPU they were measured on, a built-in norm runs its entry;
// where the rows rule an entry out (a backward's stacked rows on rows that start misaligned), the
// heuristic runs without a warning. On any other GPU no entry matches.
TEST_CASE("the shipped databases are used on the GPU they were measured on, and quietly not") {
  const ScopedEnv shipped_on("TILENORM_DISABLE_SHIPPED_DATABASES", nullptr);
  const WarningCapture warnings;
  {
    tilenorm::Runtime rt;
    const tilenorm::Norm forward = rt.load(tilenorm::kernels::builtin_program("layer_norm"));
    const tilenorm::TuningKey key = forward.tuning_key(DType::bf16, DType::bf16, 4096, 16384);
    std::optional<std::filesystem::path> file;
    for (const auto& path : tilenorm::shipped_tuning_db_paths()) {
      if (tilenorm::TuningDatabase::load_file(path).find(key)) file = path;
    }
    const tilenorm::CheckOptions options{.io_dtype = DType::bf16,
                                         .param_dtype = DType::bf16,
                                         .rows = 16384,
                                         .cols = 4096,
                                         .seed = 11};
    const auto report = tilenorm::check_against_interpreter(forward, options);
    CHECK(report.ok());
    CHECK(report.unwritten == 0);
    if (!file) {
      MESSAGE("no shipped database holds " << key.device_name << ": the heuristic runs");
      CHECK(report.used.source == tilenorm::ConfigSource::heuristic);
      CHECK(report.used.database.empty());
    } else {
      const tilenorm::TuningDatabase database = tilenorm::TuningDatabase::load_file(*file);
      CHECK(report.used.source == tilenorm::ConfigSource::tuned_exact);
      CHECK(report.used.database == *file);
      CHECK(report.used.shipped_database);
      CHECK(report.used.config ==
            tilenorm::reflect::from_json<tilenorm::KernelConfig>(
                database.find(key)->config, "config", tilenorm::kKernelConfigLaterFields));
      // A saved backward whose entry for 1000 rows stacks rows in a CTA, on rows that all start
      // one element past a 16-byte boundary: peeled rows need one row per CTA there. (Persistent
      // kernels peel rows of 256 vectors and more, bf16 N >= 2048; shorter rows narrow their
      // vectors instead, and the entry runs with them.)
      const tilenorm::Norm backward =
          rt.load(tilenorm::kernels::builtin_program("rms_norm_backward"));
      std::optional<std::int64_t> stacked_n;
      for (std::int64_t n : {2048, 5120, 8192}) {
        const tilenorm::TuningLookup found =
            database.lookup(backward.tuning_key(DType::bf16, DType::bf16, n, 1000));
        if (found.entry && found.entry->config.value("rows_per_cta", 1) > 1) {
          stacked_n = n;
          break;
        }
      }
      REQUIRE_MESSAGE(stacked_n, "no stacked backward entry in " << file->string());
      const auto peeled = tilenorm::check_against_interpreter(backward, {.io_dtype = DType::bf16,
                                                                         .param_dtype = DType::bf16,
                                                                         .rows = 1000,
                                                                         .cols = *stacked_n,
                                                                         .element_offset = 1,
                                                                         .seed = 12});
      CHECK(peeled.ok());
      CHECK(peeled.unwritten == 0);
      CHECK(peeled.used.peel_rows);
      CHECK(peeled.used.source == tilenorm::ConfigSource::heuristic);
    }
  }
  CHECK(warnings.messages().empty());
}

TEST_CASE("the tuner times the heuristic default where it spills, and stores nothing slower") {
  // LayerNorm's fp32 recomputing backward at N = 262144: its heuristic configuration spills a
  // few bytes (checked below). Candidates of the search space that spill are dropped; the
  // default is not, since the runtime runs it for any shape the database lacks.
  const std::int64_t n = 262144;
  const tilenorm::ir::Program& program =
      tilenorm::kernels::builtin_program("layer_norm_backward_recompute");
  tilenorm::TuneOptions options;
  options.repeats = 3;
  options.final_repeats = 6;
  const tilenorm::TuneReport report = tilenorm::tune(
      {{"layer_norm_backward_recompute", program, DType::f32, DType::f32, n, {256}}}, options);
  REQUIRE(report.results.size() == 1);
  const tilenorm::TuneResult& result = report.results[0];
  CAPTURE(result.error);

  const tilenorm::Norm norm = runtime().load(program);
  const tilenorm::KernelSpec spec{DType::f32, DType::f32, n, result.heuristic};
  const tilenorm::BuiltKernel built =
      tilenorm::build_kernel(norm.lowered(), spec, runtime().arch());
  REQUIRE_MESSAGE(built.spill_bytes > 0,
                  "the heuristic no longer spills here: pick a shape where it does");

  REQUIRE(result.ok);
  for (const tilenorm::CandidateFailure& failure : result.failures) {
    CAPTURE(failure.reason);
    CHECK_FALSE(failure.config == result.heuristic);
    // Every candidate that compiles computes what the interpreter does.
    CHECK(failure.kind != tilenorm::DropKind::wrong_results);
    CHECK(failure.reason.starts_with(tilenorm::drop_kind_name(failure.kind)));
  }
  CHECK(result.heuristic_us > 0);
  CHECK(result.median_us <= result.heuristic_us);
}

TEST_CASE("the tuner times each M against what the runtime launches for that many rows") {
  // LayerNorm's bf16 backward at N = 128: the runtime stacks 32 rows per CTA for many rows and
  // fewer for few (fit_to_launch), so the tuner's heuristic default, and the speedup it reports,
  // differ per M.
  const std::int64_t n = 128;
  const tilenorm::ir::Program& program = tilenorm::kernels::builtin_program("layer_norm_backward");
  tilenorm::TuneOptions options;
  options.repeats = 3;
  options.final_repeats = 6;
  const std::vector<std::int64_t> row_counts = {256, 65536};
  const tilenorm::TuneReport report = tilenorm::tune(
      {{"layer_norm_backward", program, DType::bf16, DType::bf16, n, row_counts}}, options);
  REQUIRE(report.results.size() == row_counts.size());
  const tilenorm::Norm norm = runtime().load(program);
  const tilenorm::DeviceLimits limits = tilenorm::device_limits(tilenorm::driver::device_info(0));
  for (const tilenorm::TuneResult& result : report.results) {
    CAPTURE(result.m);
    CAPTURE(result.error);
    REQUIRE(result.ok);
    CHECK(result.heuristic == tilenorm::heuristic_config(norm.lowered(), DType::bf16, DType::bf16,
                                                         n, limits, 0, false, result.m));
    // The runtime's own choice ran in the final rounds, and nothing slower was kept.
    CHECK(result.heuristic_us > 0);
    CHECK(result.median_us <= result.heuristic_us);
  }
  CHECK(report.results[0].heuristic.rows_per_cta < report.results[1].heuristic.rows_per_cta);
}

TEST_CASE("driver: buffers, streams, events and a compiled kernel") {
  const driver::Api& cuda = driver::api();
  CUcontext context = driver::primary_context(0);
  CHECK(driver::primary_context(0) == context);  // Retained once, then reused.
  CUcontext before = nullptr;
  driver::check(cuda.cuCtxGetCurrent(&before), "cuCtxGetCurrent");
  {
    driver::ScopedContext nested(context);
    CUcontext current = nullptr;
    driver::check(cuda.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    CHECK(current == context);
  }
  CUcontext after = nullptr;
  driver::check(cuda.cuCtxGetCurrent(&after), "cuCtxGetCurrent");
  CHECK(after == before);
  driver::ScopedContext scoped(context);

  constexpr int kCount = 1000;
  std::vector<float> input(kCount);
  for (int i = 0; i < kCount; ++i) input[i] = static_cast<float>(i);
  driver::DeviceBuffer buffer(kCount * sizeof(float));
  CHECK(buffer.bytes() == kCount * sizeof(float));
  buffer.upload(input.data(), input.size() * sizeof(float));

  tilenorm::CompileRequest request;
  request.kernel_name = "scale_by_two";
  const driver::DeviceInfo info = driver::device_info(0);
  // A GPU NVRTC knows compiles for its own architecture, and a driver that loads NVRTC's
  // cubins is not older than it.
  request.arch = tilenorm::target_arch(info.compute_capability(), info.label());
  CHECK(request.arch == info.arch());
  CHECK(tilenorm::older_driver_note(driver::driver_version(), tilenorm::nvrtc_version()).empty());
  request.source = R"(
extern "C" __global__ void scale_by_two(float* data, int count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) data[i] *= 2.0f;
})";
  tilenorm::CompiledKernel kernel = tilenorm::compile_cuda(request);
  CUmodule module = nullptr;
  driver::check(cuda.cuModuleLoadData(&module, kernel.cubin.data()), "cuModuleLoadData");
  CUfunction function = nullptr;
  driver::check(cuda.cuModuleGetFunction(&function, module, "scale_by_two"), "cuModuleGetFunction");

  driver::Stream stream;
  driver::Event start;
  driver::Event end;
  start.record(stream.get());
  CUdeviceptr data = buffer.get();
  int count = kCount;
  void* arguments[] = {&data, &count};
  driver::check(cuda.cuLaunchKernel(function, (kCount + 255) / 256, 1, 1, 256, 1, 1, 0,
                                    stream.get(), arguments, nullptr),
                "cuLaunchKernel");
  end.record(stream.get());
  end.synchronize();
  stream.synchronize();
  CHECK(driver::Event::elapsed_ms(start, end) >= 0.0f);

  std::vector<float> output(kCount);
  buffer.download(output.data(), output.size() * sizeof(float));
  for (int i = 0; i < kCount; ++i) REQUIRE(output[i] == 2.0f * input[i]);

  buffer.fill_bytes(0);
  buffer.download(output.data(), output.size() * sizeof(float));
  CHECK(output[kCount - 1] == 0.0f);

  driver::DeviceBuffer moved = std::move(buffer);
  CHECK(moved.get() == data);
  CHECK(buffer.get() == 0);
  try {
    moved.upload(input.data(), moved.bytes() + 1);
    FAIL("an oversized upload did not throw");
  } catch (const tilenorm::Error& error) {
    CHECK(std::string(error.what())
              .starts_with("DeviceBuffer upload of 4001 bytes exceeds the buffer size"));
  }
  driver::check(cuda.cuModuleUnload(module), "cuModuleUnload");
}
