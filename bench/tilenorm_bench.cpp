// tilenorm-bench: times the built-in norms on a list of shapes M x N (rows optionally padded to a
// row stride), next to the device-to-device copy bandwidth measured in the same run; with
// --decode also against a copy of the same bytes, the host cost of a launch, and a CUDA-graph
// replay check (bench/README.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "four_reductions.hpp"
#include "residual_rms_norm.hpp"
#include "tilenorm/autotune/cli11.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/runtime.hpp"
#include "tilenorm/runtime/stats.hpp"
#include "tilenorm/runtime/timing.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

namespace tn = tilenorm;
namespace driver = tilenorm::driver;
namespace cli = tilenorm::cli;

constexpr const char* kDescription =
    "Times the built-in norms on GPU 0 for each shape M x N, after checking each kernel against "
    "the fp64 interpreter, and measures the device-to-device copy bandwidth in the same run as "
    "the ceiling. Shapes come from --shapes, or from --n and --elements (M = E / N).";

constexpr const char* kFooter = R"(
timing (--timing; the same methods as bench/torch_compare.py):
  events  each sample is one pair of CUDA events around L back-to-back launches, after a GPU
          spin twice as long as the host took to queue one untimed batch
  graph   the L launches are captured into one CUDA graph; each sample is one replay between
          a pair of events
  L is a whole number of passes over the buffer sets, at least 10 (the JSON's
  launches_per_sample); the time per launch is the median sample divided by L.

--decode adds, per row: the kernel against cuMemcpyDtoDAsync moving the same bytes (timed the
same way), and the host time per Norm::launch against a bare cuLaunchKernel of an empty kernel;
and per shape: layer_norm then rms_norm captured into a CUDA graph, replayed, and compared
bitwise with direct launches. Its default shapes are 1x4096,8x4096,64x4096,256x4096 and its
default pass is forward.

exit status: 0 every shape checked and timed (and every graph replay matched), 1 some shape
failed (see the table and stderr) or a graph replay differed, 2 bad arguments or a fatal error,
3 no GPU.)";

constexpr const char* kDefaultNs =
    "128,512,1024,2048,4096,5120,8192,16384,32768,65536,131072,262144";
constexpr const char* kDecodeShapes = "1x4096,8x4096,64x4096,256x4096";
constexpr std::int64_t kDefaultElements = std::int64_t{1} << 26;
constexpr std::int64_t kMaxN = std::int64_t{1} << 30;  // codegen's limit
constexpr std::int64_t kMaxM = (std::int64_t{1} << 31) - 1;
constexpr std::int64_t kMaxRepeats = std::int64_t{1} << 20;

constexpr double kEps = 1e-5;
// Launches before timing (they also load anything still lazy).
constexpr int kWarmupLaunches = 10;
// Launches per timing sample: whole passes over the buffer sets, at least this many.
constexpr int kBatchLaunches = 10;
// Buffer sets rotate until one pass is larger than twice the L2, but never more than this many
// (tiny shapes: their later sets stay in the L2).
constexpr std::size_t kMaxBufferSets = 8192;
// Each set starts at a multiple of this, as a fresh allocation would.
constexpr std::size_t kSetAlignment = 256;
// Events timing: the GPU spins before each sample for twice the host's queueing time plus this.
constexpr double kSpinMarginUs = 50.0;
constexpr long long kSpinCalibrationCycles = 10'000'000;
// Host cost per launch: launches per sample, samples (median), and the GPU spin per microsecond
// of expected host time that keeps the GPU busy meanwhile.
constexpr int kHostLaunches = 200;
constexpr int kHostSamples = 7;
constexpr double kHostSpinUsPerLaunch = 20.0;
// Not a multiple of any power-of-two rows_per_cta, so the checked launch ends in a partial CTA.
constexpr std::int64_t kCheckRows = 67;
constexpr std::size_t kCopyBytes = std::size_t{2} << 30;
constexpr std::uint64_t kInputSeed = 1;
constexpr std::uint64_t kCheckSeed = 7;

enum class Timing { events, graph };

const char* timing_name(Timing timing) {
  return timing == Timing::graph ? "graph" : "events";
}

struct Shape {
  std::int64_t m = 0;
  std::int64_t n = 0;
};

std::string shape_text(const Shape& shape) {
  return std::to_string(shape.m) + "x" + std::to_string(shape.n);
}

struct Options {
  tn::DType dtype = tn::DType::bf16;
  std::vector<Shape> shapes;
  std::optional<std::int64_t> elements;  // when the shapes come from --n / --elements
  std::int64_t row_stride = 0;           // 0: each shape's rows are contiguous (stride N)
  std::vector<std::string> ops = {"layer_norm", "rms_norm"};
  std::vector<std::string> passes = {"forward", "backward"};
  int repeats = 50;
  Timing timing = Timing::events;
  bool decode = false;
  std::string json_path;
  bool use_tuning_database = true;
  bool fold_partials = true;
  bool programmatic_launch = false;
  tn::PeeledRowShifts peeled_row_shifts = tn::PeeledRowShifts::automatic;
  tn::EarlyColumns early_columns = tn::EarlyColumns::automatic;
  std::string heuristic_device;  // RuntimeOptions::heuristic_device

  std::int64_t stride_for(const Shape& shape) const { return row_stride ? row_stride : shape.n; }
};

// The slot names of a program, in order.
std::vector<std::string> slot_names(const tn::ir::Program& program) {
  std::vector<std::string> names;
  for (const auto& slot : program.slots) names.push_back(slot.name);
  return names;
}

// The programs timed beside the built-in kernels (from examples/), as the pass runs them: the
// forward, or the backward tilenorm::backward derives from it. Nothing for a built-in kernel's
// name. Throws UsageError for a pass the program has no kernel for, and for a recompute that
// would time the saved backward again (a program that saves nothing its backward reads back).
std::optional<tn::ir::Program> bench_program(const std::string& op, const std::string& pass) {
  std::optional<tn::ir::Program> forward;
  if (op == "four_reductions") forward = four_reductions();
  if (op == "residual_rms_norm") forward = residual_rms_norm();
  if (!forward || pass == "forward") return forward;
  try {
    tn::ir::Program saved = tn::backward(*forward, {.mode = tn::StatisticsMode::saved});
    if (pass == "backward") return saved;
    tn::ir::Program recompute = tn::backward(*forward, {.mode = tn::StatisticsMode::recompute});
    if (slot_names(recompute) == slot_names(saved)) {
      throw tn::UsageError("--ops '" + op +
                           "' saves nothing its backward reads back, so its backward recomputes "
                           "already: give --pass backward, not recompute");
    }
    return recompute;
  } catch (const tn::ProgramError& e) {
    throw tn::UsageError("--ops '" + op + "' has no " + pass + " kernel: " + e.what());
  }
}

// The program a pass times: the forward, or its derived backward (statistics read back, or
// recomputed from x).
std::string program_for(const std::string& op, const std::string& pass) {
  if (pass == "backward") return op + "_backward";
  if (pass == "recompute") return op + "_backward_recompute";
  return op;
}

Shape parse_shape(const std::string& text) {
  const std::size_t x = text.find('x');
  if (x == std::string::npos) {
    throw tn::UsageError("--shapes: '" + text + "' is not MxN (such as 65536x1024)");
  }
  return {cli::parse_integer("--shapes (M of '" + text + "')", text.substr(0, x), 1, kMaxM),
          cli::parse_integer("--shapes (N of '" + text + "')", text.substr(x + 1), 1, kMaxN)};
}

// Everything is validated here, before anything is printed.
Options parse_options(const std::vector<std::string>& args) {
  CLI::App app{kDescription, "tilenorm-bench"};
  app.footer(kFooter);
  cli::add_common_flags(app, "tilenorm-bench");
  std::string dtype = "bf16", shapes, ns, elements, row_stride, ops, passes, repeats = "50",
              timing = "events", json;
  bool no_tuning_db = false, decode = false;
  auto* shapes_option = cli::add_value(
      app, "--shapes", shapes,
      "comma-separated shapes MxN, such as 65536x1024,1x4096 (default: from --n and --elements)",
      "LIST");
  auto* n_option = cli::add_value(app, "--n", ns,
                                  std::string("comma-separated row lengths, M = E / N for each "
                                              "(default ") +
                                      kDefaultNs + ")",
                                  "LIST");
  auto* elements_option =
      cli::add_value(app, "--elements", elements,
                     "elements per shape with --n: M = E / N (default 67108864 = 2^26)", "E");
  shapes_option->excludes(n_option)->excludes(elements_option);
  auto* row_stride_option = cli::add_value(
      app, "--row-stride", row_stride,
      "elements from one row's start to the next, >= every N: rows are padded, M * S "
      "elements are allocated per tensor, and the bytes counted are still M * N per "
      "tensor (default: N, contiguous rows)",
      "S");
  cli::add_value(app, "--dtype", dtype,
                 "storage type of rows and parameters: bf16 (default), fp16, fp32", "T");
  auto* ops_option = cli::add_value(
      app, "--ops", ops,
      "built-in kernels to time (default layer_norm,rms_norm: the weight + bias "
      "LayerNorm and the weight RMSNorm), and two example programs, their "
      "backward derived: four_reductions (mean, mean of squares, max and min of "
      "x in one reduction phase; it saves nothing, so its backward is its recompute) "
      "and residual_rms_norm (h = x + residual written out, y = RMSNorm(h) * "
      "weight; its backward reads h, dh and dy, its recompute x and residual in "
      "place of h)",
      "LIST");
  auto* pass_option = cli::add_value(
      app, "--pass", passes,
      "forward (x read, y written; no statistics saved), backward (the derived backward "
      "reading the saved statistics: x and dy read, dx written, dweight/dbias summed) "
      "and recompute (the backward recomputing the statistics from x); default "
      "forward,backward (forward with --decode)",
      "LIST");
  cli::add_value(app, "--timing", timing,
                 "events (default) or graph: how the launches are timed (see below)", "METHOD");
  cli::add_value(app, "--repeats", repeats,
                 "timing samples per shape; the median is reported (default 50)", "R");
  app.add_flag("--decode", decode,
               "small-M measurements: against a copy of the same bytes, host cost per launch, "
               "CUDA-graph replay check (see below)");
  cli::add_value(app, "--json", json, "also write the results as JSON to PATH", "PATH");
  app.add_flag("--no-tuning-db", no_tuning_db,
               "use the heuristic configuration only, ignoring tuning databases");
  bool no_fold = false;
  app.add_flag("--no-fold", no_fold,
               "one partial row of column sums per CTA: no folding across clusters "
               "(RuntimeOptions::fold_partials)");
  bool programmatic = false;
  app.add_flag("--programmatic-launch", programmatic,
               "launch with programmatic dependent launch (sm_90+): each kernel may be scheduled "
               "while the previous one finishes, and waits for it on the GPU "
               "(RuntimeOptions::programmatic_launch)");
  std::string row_shifts = "auto";
  cli::add_value(app, "--row-shifts", row_shifts,
                 "how persistent kernels on misaligned (peeled) rows find each row's shift: auto "
                 "(default), per-thread or per-row (RuntimeOptions::peeled_row_shifts)",
                 "WAY");
  std::string early_columns = "auto";
  cli::add_value(app, "--early-columns", early_columns,
                 "whether one-CTA kernels in registers fetch their column parameters before the "
                 "row loop: auto (default), never or always (RuntimeOptions::early_columns)",
                 "WHEN");
  std::string heuristic_device;
  cli::add_value(app, "--heuristic-device", heuristic_device,
                 "choose configurations as on this known GPU (A100, A10, L40S, H100, H200, B200, "
                 "RTX5090) within this one's limits, without tuning databases "
                 "(RuntimeOptions::heuristic_device)",
                 "NAME");
  cli::parse(app, args);

  Options options;
  options.decode = decode;
  options.use_tuning_database = !no_tuning_db;
  options.fold_partials = !no_fold;
  options.programmatic_launch = programmatic;
  options.peeled_row_shifts = cli::parse_peeled_row_shifts("--row-shifts", row_shifts);
  options.early_columns = cli::parse_early_columns("--early-columns", early_columns);
  if (!heuristic_device.empty()) {
    try {
      options.heuristic_device = tn::known_device(heuristic_device).name;
    } catch (const tn::Error& e) {
      throw tn::UsageError(std::string("--heuristic-device: ") + e.what());
    }
    options.use_tuning_database = false;
  }
  options.json_path = json;
  try {
    options.dtype = tn::parse_dtype(dtype);
  } catch (const tn::Error& e) {
    throw tn::UsageError("--dtype '" + dtype + "': " + e.what() + "; write bf16, fp16 or fp32");
  }
  if (timing == "events" || timing == "graph") {
    options.timing = timing == "graph" ? Timing::graph : Timing::events;
  } else {
    throw tn::UsageError("--timing must be events or graph, got '" + timing + "'");
  }
  options.repeats = static_cast<int>(cli::parse_integer("--repeats", repeats, 1, kMaxRepeats));
  if (ops_option->count()) options.ops = cli::split_list("--ops", ops);
  if (pass_option->count()) {
    options.passes = cli::split_list("--pass", passes);
  } else if (decode) {
    options.passes = {"forward"};
  }
  for (const std::string& pass : options.passes) {
    if (pass != "forward" && pass != "backward" && pass != "recompute") {
      throw tn::UsageError("--pass: unknown pass '" + pass +
                           "' (expected forward, backward or recompute)");
    }
  }
  for (const std::string& op : options.ops) {
    if (bench_program(op, "forward")) {
      for (const std::string& pass : options.passes) bench_program(op, pass);
      continue;
    }
    try {
      cli::parse_kernel_name("--ops", op);
    } catch (const tn::UsageError& e) {
      throw tn::UsageError(std::string(e.what()) +
                           "; example programs: four_reductions, residual_rms_norm");
    }
    for (const std::string& pass : options.passes) {
      try {
        tn::kernels::builtin_program(program_for(op, pass));
      } catch (const tn::Error&) {
        throw tn::UsageError("--ops '" + op + "' has no built-in " + pass + " kernel '" +
                             program_for(op, pass) +
                             "': --ops names forward kernels, --pass picks their backward");
      }
    }
  }

  const bool given_shapes = shapes_option->count() > 0;
  const bool given_ns = n_option->count() > 0, given_elements = elements_option->count() > 0;
  if (given_shapes || (decode && !given_ns && !given_elements)) {
    for (const std::string& item :
         cli::split_list("--shapes", given_shapes ? shapes : kDecodeShapes)) {
      options.shapes.push_back(parse_shape(item));
    }
  } else {
    const std::int64_t total = !given_elements
                                   ? kDefaultElements
                                   : cli::parse_integer("--elements", elements, 1, kMaxM * kMaxN);
    for (const std::string& item : cli::split_list("--n", given_ns ? ns : kDefaultNs)) {
      const std::int64_t n = cli::parse_integer("--n", item, 1, kMaxN);
      if (n > total) {
        throw tn::UsageError("--n " + std::to_string(n) + " exceeds --elements " +
                             std::to_string(total) + ": no full row fits");
      }
      if (total / n > kMaxM) {
        throw tn::UsageError("--elements " + std::to_string(total) + " / --n " + std::to_string(n) +
                             " is more than " + std::to_string(kMaxM) + " rows");
      }
      options.shapes.push_back({total / n, n});
    }
    options.elements = total;
  }
  if (row_stride_option->count()) {
    options.row_stride = cli::parse_integer("--row-stride", row_stride, 1, kMaxN);
    for (const Shape& shape : options.shapes) {
      if (options.row_stride < shape.n) {
        throw tn::UsageError("--row-stride " + std::to_string(options.row_stride) +
                             " is less than N of shape " + shape_text(shape));
      }
    }
  }
  return options;
}

double terabytes_per_second(double bytes, double microseconds) {
  return bytes / microseconds / 1e6;
}

struct CopyCeiling {
  double bytes = 0;
  double median_us = 0;
  double tbps = 0;
};

// A large device-to-device copy, counting the bytes read and the bytes written.
CopyCeiling measure_copy_ceiling() {
  CopyCeiling ceiling;
  ceiling.bytes = 2.0 * static_cast<double>(kCopyBytes);
  ceiling.tbps = tn::measure_copy_ceiling_tbps(kCopyBytes);
  ceiling.median_us = ceiling.bytes / (ceiling.tbps * 1e6);
  return ceiling;
}

// An empty kernel (the floor of a launch's host cost) and a spin kernel (keeps the GPU busy while
// the host queues work), compiled with NVRTC for this device.
class HelperKernels {
 public:
  explicit HelperKernels(const std::string& arch) {
    const tn::CompiledKernel compiled = tn::compile_cuda({kSource, "tn_empty", arch, {}});
    driver::check(driver::api().cuModuleLoadData(&module_, compiled.cubin.data()),
                  "cuModuleLoadData (helper kernels)");
    driver::check(driver::api().cuModuleGetFunction(&empty_, module_, "tn_empty"),
                  "cuModuleGetFunction tn_empty");
    driver::check(driver::api().cuModuleGetFunction(&spin_, module_, "tn_spin"),
                  "cuModuleGetFunction tn_spin");
  }
  ~HelperKernels() {
    if (module_) driver::api().cuModuleUnload(module_);
  }
  HelperKernels(const HelperKernels&) = delete;
  HelperKernels& operator=(const HelperKernels&) = delete;

  void launch_empty(CUstream stream) const {
    driver::check(
        driver::api().cuLaunchKernel(empty_, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
        "cuLaunchKernel tn_empty");
  }

  void spin_cycles(CUstream stream, long long cycles) const {
    void* params[] = {&cycles};
    driver::check(driver::api().cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr),
                  "cuLaunchKernel tn_spin");
  }

  // Keeps the GPU busy for about `us` microseconds (after calibrate()).
  void spin_us(CUstream stream, double us) const {
    spin_cycles(stream, static_cast<long long>(cycles_per_us_ * us));
  }

  void calibrate(driver::Stream& stream) {
    spin_cycles(stream.get(), 1000);
    driver::Event start, end;
    start.record(stream.get());
    spin_cycles(stream.get(), kSpinCalibrationCycles);
    end.record(stream.get());
    end.synchronize();
    cycles_per_us_ =
        static_cast<double>(kSpinCalibrationCycles) / (1e3 * driver::Event::elapsed_ms(start, end));
  }

 private:
  static constexpr const char* kSource = R"(
extern "C" __global__ void tn_empty() {}
extern "C" __global__ void tn_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
)";
  CUmodule module_ = nullptr;
  CUfunction empty_ = nullptr;
  CUfunction spin_ = nullptr;
  double cycles_per_us_ = 1000.0;
};

// The work enqueued on `stream` between cuStreamBeginCapture and cuStreamEndCapture, instantiated.
class CapturedGraph {
 public:
  CapturedGraph(CUstream stream, const std::function<void()>& record) {
    driver::check(driver::api().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                  "cuStreamBeginCapture");
    CUgraph graph = nullptr;
    try {
      record();
    } catch (...) {
      driver::api().cuStreamEndCapture(stream, &graph);  // leaves the stream usable
      if (graph) driver::api().cuGraphDestroy(graph);
      throw;
    }
    driver::check(driver::api().cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
    const CUresult instantiated = driver::api().cuGraphInstantiateWithFlags(&exec_, graph, 0);
    driver::api().cuGraphDestroy(graph);
    driver::check(instantiated, "cuGraphInstantiateWithFlags");
  }
  ~CapturedGraph() {
    if (exec_) driver::api().cuGraphExecDestroy(exec_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(CUstream stream) const {
    driver::check(driver::api().cuGraphLaunch(exec_, stream), "cuGraphLaunch");
  }

 private:
  CUgraphExec exec_ = nullptr;
};

struct Timed {
  double median_us = 0;  // per launch
  double min_us = 0;
  int launches_per_sample = 0;
};

// Times launch(i) for the buffer sets i = 0 .. count - 1 with options.timing (see kFooter).
class Timer {
 public:
  Timer(const Options& options, driver::Stream& stream, const HelperKernels& helpers)
      : options_(options),
        stream_(stream),
        helpers_(helpers),
        starts_(options.repeats),
        ends_(options.repeats) {}

  Timed time(const std::function<void(int set)>& launch, int count) {
    for (int i = 0; i < kWarmupLaunches; ++i) launch(i % count);
    const int batch = count * ((kBatchLaunches + count - 1) / count);
    const CUstream stream = stream_.get();
    std::optional<CapturedGraph> graph;
    if (options_.timing == Timing::graph) {
      stream_.synchronize();
      graph.emplace(stream, [&] {
        for (int i = 0; i < batch; ++i) launch(i % count);
      });
      graph->launch(stream);  // the first replay uploads the graph
      for (int r = 0; r < options_.repeats; ++r) {
        starts_[r].record(stream);
        graph->launch(stream);
        ends_[r].record(stream);
      }
    } else {
      // The host's queueing time, measured once on an untimed batch. (Not again on the timed
      // ones: a batch longer than the launch queue keeps the host waiting on the GPU, spin
      // included, so each sample's time would double the next spin.)
      using Clock = std::chrono::steady_clock;
      const auto begin = Clock::now();
      for (int i = 0; i < batch; ++i) launch(i % count);
      const double host_us =
          std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
      for (int r = 0; r < options_.repeats; ++r) {
        helpers_.spin_us(stream, 2.0 * host_us + kSpinMarginUs);
        starts_[r].record(stream);
        for (int i = 0; i < batch; ++i) launch(i % count);
        ends_[r].record(stream);
      }
    }
    stream_.synchronize();
    std::vector<double> samples;
    for (int r = 0; r < options_.repeats; ++r) {
      samples.push_back(1e3 * driver::Event::elapsed_ms(starts_[r], ends_[r]) / batch);
    }
    return {tn::median(samples), *std::min_element(samples.begin(), samples.end()), batch};
  }

  // Host microseconds per launch(): kHostLaunches calls timed with std::chrono while a spin
  // keeps the GPU busy (so the launches only queue), the stream synchronized after each sample;
  // the median of kHostSamples samples.
  double host_us(const std::function<void(int i)>& launch) {
    for (int i = 0; i < kWarmupLaunches; ++i) launch(i);
    stream_.synchronize();
    std::vector<double> samples;
    for (int s = 0; s < kHostSamples; ++s) {
      helpers_.spin_us(stream_.get(), kHostLaunches * kHostSpinUsPerLaunch);
      const auto begin = std::chrono::steady_clock::now();
      for (int i = 0; i < kHostLaunches; ++i) launch(i);
      const auto end = std::chrono::steady_clock::now();
      stream_.synchronize();
      samples.push_back(std::chrono::duration<double, std::micro>(end - begin).count() /
                        kHostLaunches);
    }
    return tn::median(samples);
  }

 private:
  const Options& options_;
  driver::Stream& stream_;
  const HelperKernels& helpers_;
  std::vector<driver::Event> starts_, ends_;
};

// --decode's measurements of one row.
struct DecodeResult {
  double kernel_bytes = 0;     // every tensor the kernel reads or writes (workspace excluded)
  std::size_t copy_size = 0;   // cuMemcpyDtoDAsync size: it reads and writes kernel_bytes
  Timed copy;                  // per copy
  double launch_us = 0;        // host time per Norm::launch
  double empty_launch_us = 0;  // host time per cuLaunchKernel of tn_empty
};

struct ShapeResult {
  std::string op;
  std::string pass;
  Shape shape;
  std::int64_t row_stride = 0;
  double bytes = 0;  // row tensors read + written (x, y; or x, dy, dx), M * N elements each
  int buffer_sets = 0;
  std::size_t workspace_bytes = 0;  // the partial sums of a backward (not in `bytes`)
  std::optional<tn::ResolvedConfig> resolved;
  std::optional<tn::LaunchGrid> grid;
  Timed timed;
  double tbps = 0;
  std::optional<DecodeResult> decode;
  std::string error;  // empty when the shape was checked and timed
};

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Uploads `bytes` (M rows of N elements, contiguous) to each of `sets` tensors of `buffer`,
// `pitch` bytes apart, with rows `stride` elements apart (the padding holds zeros).
void upload_rows(const driver::DeviceBuffer& buffer, std::size_t sets, std::size_t pitch,
                 const std::byte* bytes, const Shape& shape, std::int64_t stride, tn::DType dtype) {
  const std::size_t size = tn::dtype_size(dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(shape.n) * size;
  const std::size_t tensor_bytes = static_cast<std::size_t>(shape.m * stride) * size;
  std::vector<std::byte> strided;
  const std::byte* image = bytes;
  if (stride != shape.n) {
    strided.assign(tensor_bytes, std::byte{0});
    for (std::int64_t r = 0; r < shape.m; ++r) {
      std::memcpy(strided.data() + r * stride * size, bytes + r * row_bytes, row_bytes);
    }
    image = strided.data();
  }
  for (std::size_t s = 0; s < sets; ++s) {
    driver::check(driver::api().cuMemcpyHtoD(buffer.get() + s * pitch, image, tensor_bytes),
                  "cuMemcpyHtoD (inputs)");
  }
}

// One (op, pass) on one shape: its buffers, checked, then timed.
class RowBench {
 public:
  RowBench(const tn::Norm& norm, const std::string& op, const std::string& pass, Shape shape,
           const Options& options, const std::vector<std::byte>& input_bytes, std::size_t l2_bytes)
      : norm_(norm), options_(options), input_bytes_(input_bytes), l2_bytes_(l2_bytes) {
    result_.op = op;
    result_.pass = pass;
    result_.shape = shape;
    result_.row_stride = options.stride_for(shape);
    const std::size_t size = tn::dtype_size(options.dtype);
    for (const auto& slot : norm.program().slots) row_tensors_ += slot.shape == tn::ir::Shape::tile;
    result_.bytes = static_cast<double>(row_tensors_) * static_cast<double>(shape.m) *
                    static_cast<double>(shape.n) * static_cast<double>(size);
  }

  ShapeResult run(Timer& timer, driver::Stream& stream, const HelperKernels& helpers) {
    try {
      allocate();
      const std::vector<std::vector<tn::Arg>> args = make_args();
      result_.resolved = norm_.resolve(args[0]);
      result_.grid = norm_.launch_grid(args[0]);
      const std::size_t workspace_bytes = norm_.workspace_bytes(args[0]);
      result_.workspace_bytes = workspace_bytes;
      driver::DeviceBuffer workspace_buffer(std::max<std::size_t>(workspace_bytes, 16));
      const tn::Workspace workspace{reinterpret_cast<void*>(workspace_buffer.get()),
                                    workspace_bytes};
      const tn::Stream launch_stream = stream.get();
      // The first launch compiles or loads the kernel, and surfaces a fault before any timing.
      norm_.launch(args[0], launch_stream, workspace);
      stream.synchronize();

      // The same configuration and row stride on a small M, against the interpreter: never
      // time a wrong kernel.
      tn::CheckOptions check;
      check.io_dtype = options_.dtype;
      check.param_dtype = options_.dtype;
      check.rows = std::min(result_.shape.m, kCheckRows);
      check.cols = result_.shape.n;
      check.extra_row_stride = result_.row_stride - result_.shape.n;
      check.seed = kCheckSeed;
      check.config = result_.resolved->config;
      const tn::CheckReport report = tn::check_against_interpreter(norm_, check);
      if (!report.ok()) {
        result_.error = "check against the interpreter failed: " + report.describe();
        return std::move(result_);
      }

      const auto launch = [&](int set) { norm_.launch(args[set], launch_stream, workspace); };
      result_.timed = timer.time(launch, static_cast<int>(sets_));
      result_.tbps = terabytes_per_second(result_.bytes, result_.timed.median_us);
      if (options_.decode) result_.decode = measure_decode(timer, stream, helpers, launch);
    } catch (const tn::Error& e) {
      result_.error = e.what();
    }
    return std::move(result_);
  }

 private:
  // The buffer sets (one allocation per row slot, the sets `pitch_` bytes apart) and the
  // buffers the sets share.
  void allocate() {
    const tn::ir::Program& program = norm_.program();
    const Shape shape = result_.shape;
    const std::size_t size = tn::dtype_size(options_.dtype);
    const std::size_t set_bytes = static_cast<std::size_t>(result_.bytes);
    // At least two sets, and more until one pass over them is larger than twice the L2.
    sets_ = std::clamp<std::size_t>(2 * l2_bytes_ / std::max<std::size_t>(set_bytes, 1) + 1, 2,
                                    kMaxBufferSets);
    result_.buffer_sets = static_cast<int>(sets_);
    pitch_ = round_up(static_cast<std::size_t>(shape.m * result_.row_stride) * size, kSetAlignment);
    rows_.resize(program.slots.size());
    shared_.resize(program.slots.size());
    for (std::size_t i = 0; i < program.slots.size(); ++i) {
      const auto& slot = program.slots[i];
      const bool read = slot.role == tn::ir::Role::read;
      if (slot.shape == tn::ir::Shape::tile) {
        rows_[i] = driver::DeviceBuffer(sets_ * pitch_);
        if (read) {
          upload_rows(rows_[i], sets_, pitch_, input_bytes_.data(), shape, result_.row_stride,
                      options_.dtype);
        }
      } else if (slot.shape == tn::ir::Shape::column) {
        const std::vector<std::byte> bytes =
            tn::encode(tn::random_values(static_cast<std::size_t>(shape.n), kInputSeed + 1 + i,
                                         -1.5, 1.5, options_.dtype),
                       options_.dtype);
        shared_[i] = driver::DeviceBuffer(bytes.size());
        if (read) shared_[i].upload(bytes.data(), bytes.size());
      } else if (slot.shape == tn::ir::Shape::row_scalar && read) {
        // Saved statistics read back by the backward: plausible values (mean 0, rstd 1).
        const auto m = static_cast<std::size_t>(shape.m);
        const std::vector<float> values(m, slot.name == "mean" ? 0.0f : 1.0f);
        shared_[i] = driver::DeviceBuffer(m * sizeof(float));
        shared_[i].upload(values.data(), m * sizeof(float));
      } else if (slot.shape == tn::ir::Shape::scalar && !read) {
        shared_[i] = driver::DeviceBuffer(sizeof(float));
      }
    }
  }

  // One argument list per buffer set, in slot order.
  std::vector<std::vector<tn::Arg>> make_args() const {
    const tn::ir::Program& program = norm_.program();
    const Shape shape = result_.shape;
    std::vector<std::vector<tn::Arg>> all;
    for (std::size_t s = 0; s < sets_; ++s) {
      auto& args = all.emplace_back();
      for (std::size_t i = 0; i < program.slots.size(); ++i) {
        const auto& slot = program.slots[i];
        void* shared = reinterpret_cast<void*>(shared_[i].get());
        switch (slot.shape) {
          case tn::ir::Shape::tile:
            args.push_back(tn::TensorView{reinterpret_cast<void*>(rows_[i].get() + s * pitch_),
                                          options_.dtype, shape.m, shape.n, result_.row_stride});
            break;
          case tn::ir::Shape::column:
            args.push_back(tn::ColumnView{shared, options_.dtype, shape.n});
            break;
          case tn::ir::Shape::row_scalar:
            // Null statistics are not written: the inference forward, as torch.compile runs it.
            args.push_back(tn::RowStatView{static_cast<float*>(shared), shape.m});
            break;
          case tn::ir::Shape::scalar:
            if (slot.role == tn::ir::Role::read)
              args.push_back(static_cast<float>(kEps));
            else
              args.push_back(tn::ScalarView{static_cast<float*>(shared)});
            break;
        }
      }
    }
    return all;
  }

  // Every tensor the kernel reads or writes: the rows, the parameters (or their gradients), the
  // statistics it reads or writes, and written scalars; not the backward's workspace.
  double kernel_bytes() const {
    const Shape shape = result_.shape;
    const double size = static_cast<double>(tn::dtype_size(options_.dtype));
    double bytes = result_.bytes;
    const tn::ir::Program& program = norm_.program();
    for (std::size_t i = 0; i < program.slots.size(); ++i) {
      const auto& slot = program.slots[i];
      if (slot.shape == tn::ir::Shape::column) {
        bytes += static_cast<double>(shape.n) * size;
      } else if (slot.shape == tn::ir::Shape::row_scalar && shared_[i].get() != 0) {
        bytes += static_cast<double>(shape.m) * sizeof(float);
      } else if (slot.shape == tn::ir::Shape::scalar && slot.role != tn::ir::Role::read) {
        bytes += sizeof(float);
      }
    }
    return bytes;
  }

  DecodeResult measure_decode(Timer& timer, driver::Stream& stream, const HelperKernels& helpers,
                              const std::function<void(int)>& launch) const {
    DecodeResult decode;
    decode.kernel_bytes = kernel_bytes();
    // A copy reads and writes its size: half the kernel's bytes moves all of them.
    decode.copy_size = static_cast<std::size_t>(decode.kernel_bytes / 2);
    const std::size_t copy_pitch = round_up(decode.copy_size, kSetAlignment);
    driver::DeviceBuffer source(sets_ * copy_pitch), destination(sets_ * copy_pitch);
    source.fill_bytes(0x5A);
    const CUstream raw = stream.get();
    decode.copy = timer.time(
        [&](int set) {
          driver::check(driver::api().cuMemcpyDtoDAsync(destination.get() + set * copy_pitch,
                                                        source.get() + set * copy_pitch,
                                                        decode.copy_size, raw),
                        "cuMemcpyDtoDAsync (same bytes as the kernel)");
        },
        static_cast<int>(sets_));
    const int sets = static_cast<int>(sets_);
    decode.launch_us = timer.host_us([&](int i) { launch(i % sets); });
    decode.empty_launch_us = timer.host_us([&](int) { helpers.launch_empty(raw); });
    return decode;
  }

  const tn::Norm& norm_;
  const Options& options_;
  const std::vector<std::byte>& input_bytes_;
  std::size_t l2_bytes_ = 0;
  std::size_t row_tensors_ = 0;
  std::size_t sets_ = 0;
  std::size_t pitch_ = 0;
  ShapeResult result_;
  std::vector<driver::DeviceBuffer> rows_;    // per row slot: every set's tensor
  std::vector<driver::DeviceBuffer> shared_;  // per other slot, shared by the sets
};

// --decode (c): layer_norm then rms_norm (on layer_norm's y), captured into one CUDA graph and
// replayed twice; each replay's outputs must equal the direct launches' bit for bit.
struct GraphCheck {
  Shape shape;
  std::int64_t row_stride = 0;
  bool ok = false;
  std::string detail;
};

GraphCheck check_graph_replay(tn::Runtime& runtime, const Shape& shape, const Options& options,
                              const std::vector<std::byte>& input_bytes, driver::Stream& stream) {
  GraphCheck check{shape, options.stride_for(shape), false, ""};
  try {
    const tn::Norm& layer_norm = tn::kernels::builtin(runtime, "layer_norm");
    const tn::Norm& rms_norm = tn::kernels::builtin(runtime, "rms_norm");
    const tn::DType dtype = options.dtype;
    const std::size_t size = tn::dtype_size(dtype);
    const std::size_t tensor_bytes = static_cast<std::size_t>(shape.m * check.row_stride) * size;
    driver::DeviceBuffer x(tensor_bytes), y1(tensor_bytes), y2(tensor_bytes);
    upload_rows(x, 1, tensor_bytes, input_bytes.data(), shape, check.row_stride, dtype);
    std::vector<driver::DeviceBuffer> params;
    for (std::uint64_t seed : {11, 12, 13}) {
      const std::vector<std::byte> bytes = tn::encode(
          tn::random_values(static_cast<std::size_t>(shape.n), seed, -1.5, 1.5, dtype), dtype);
      params.emplace_back(bytes.size()).upload(bytes.data(), bytes.size());
    }
    auto rows = [&](const driver::DeviceBuffer& buffer) {
      return tn::TensorView{reinterpret_cast<void*>(buffer.get()), dtype, shape.m, shape.n,
                            check.row_stride};
    };
    auto column = [&](const driver::DeviceBuffer& buffer) {
      return tn::ColumnView{reinterpret_cast<void*>(buffer.get()), dtype, shape.n};
    };
    const tn::RowStatView none{nullptr, shape.m};
    const tn::BoundArgs first =
        tn::bind_args(layer_norm.program(), {{"x", rows(x)},
                                             {"eps", static_cast<float>(kEps)},
                                             {"mean", none},
                                             {"rstd", none},
                                             {"weight", column(params[0])},
                                             {"bias", column(params[1])},
                                             {"y", rows(y1)}});
    const tn::BoundArgs second =
        tn::bind_args(rms_norm.program(), {{"x", rows(y1)},
                                           {"eps", static_cast<float>(kEps)},
                                           {"rstd", none},
                                           {"weight", column(params[2])},
                                           {"y", rows(y2)}});
    const tn::Stream launch_stream = stream.get();
    auto enqueue = [&] {
      layer_norm.launch(first, launch_stream);
      rms_norm.launch(second, launch_stream);
    };
    auto outputs = [&] {
      std::vector<std::byte> bytes(2 * tensor_bytes);
      y1.download(bytes.data(), tensor_bytes);
      y2.download(bytes.data() + tensor_bytes, tensor_bytes);
      return bytes;
    };
    auto poison = [&] {
      y1.fill_bytes(0xFF);
      y2.fill_bytes(0xFF);
    };
    poison();
    enqueue();
    stream.synchronize();
    const std::vector<std::byte> direct = outputs();
    poison();
    const CapturedGraph graph(stream.get(), enqueue);
    for (int replay = 1; replay <= 2; ++replay) {
      graph.launch(stream.get());
      stream.synchronize();
      const std::vector<std::byte> replayed = outputs();
      if (std::memcmp(replayed.data(), direct.data(), direct.size()) != 0) {
        std::size_t at = 0;
        while (replayed[at] == direct[at]) ++at;
        check.detail = "replay " + std::to_string(replay) + ": " +
                       (at < tensor_bytes ? "layer_norm's y" : "rms_norm's y") +
                       " differs from the direct launch at byte " +
                       std::to_string(at % tensor_bytes);
        return check;
      }
      poison();
    }
    check.ok = true;
    check.detail = "2 replays equal to the direct launches, bit for bit";
  } catch (const tn::Error& e) {
    check.detail = e.what();
  }
  return check;
}

void print_header(const driver::DeviceInfo& info, const Options& options,
                  const CopyCeiling& ceiling) {
  std::cout << "device: " << info.name << " (" << info.arch() << ", " << info.multiprocessors
            << " SMs, L2 " << info.l2_bytes / (1 << 20) << " MiB)\n"
            << "dtype " << tn::dtype_name(options.dtype) << ", " << options.shapes.size()
            << " shapes"
            << (options.row_stride ? ", row stride " + std::to_string(options.row_stride) : "")
            << ", " << timing_name(options.timing) << " timing, median of " << options.repeats
            << " samples, tuning database " << (options.use_tuning_database ? "on" : "off")
            << ", partial sums " << (options.fold_partials ? "folded" : "not folded")
            << (options.programmatic_launch ? ", programmatic launch" : "")
            << ", peeled row shifts " << tn::peeled_row_shifts_name(options.peeled_row_shifts)
            << ", early columns " << tn::early_columns_name(options.early_columns)
            << (options.heuristic_device.empty()
                    ? std::string()
                    : ", configurations as on " + options.heuristic_device)
            << "\n"
            << std::fixed << std::setprecision(2) << "copy ceiling: " << ceiling.tbps
            << " TB/s (cuMemcpyDtoDAsync of 2 GiB, " << std::setprecision(1) << ceiling.median_us
            << " us median, bytes read + written)\n\n"
            << std::left << std::setw(22) << "op" << std::right << std::setw(11) << "M"
            << std::setw(8) << "N" << std::setw(8) << "stride" << std::setw(10) << "us"
            << std::setw(8) << "TB/s" << std::setw(8) << "%ceil"
            << "  config (source)\n";
}

// The main kernel's launch as a result line shows it: "1024 CTAs x 256 threads, 40
// registers", and for a persistent kernel the row blocks resident at once (clusters, or CTAs).
std::string grid_text(const tn::LaunchGrid& grid) {
  std::ostringstream text;
  text << grid.ctas << " CTAs x " << grid.threads_per_block << " threads, " << grid.registers
       << " registers";
  if (grid.resident_row_blocks > 0) {
    text << ", persistent on " << grid.resident_row_blocks << " resident "
         << (grid.ctas_per_row > 1 ? std::string(grid.global_exchange ? "software " : "") +
                                         "clusters of " + std::to_string(grid.ctas_per_row)
                                   : "CTAs");
  }
  if (grid.shift_per_row) text << ", each row at its own shift";
  if (grid.early_columns) text << ", columns fetched early";
  return text.str();
}

void print_row(const ShapeResult& row, const CopyCeiling& ceiling) {
  std::cout << std::left << std::setw(22) << (row.op + " " + row.pass) << std::right
            << std::setw(11) << row.shape.m << std::setw(8) << row.shape.n << std::setw(8)
            << row.row_stride;
  if (row.error.empty()) {
    std::cout << std::fixed << std::setprecision(2) << std::setw(10) << row.timed.median_us
              << std::setw(8) << row.tbps << std::setprecision(1) << std::setw(8)
              << 100.0 * row.tbps / ceiling.tbps;
  } else {
    std::cout << std::setw(26) << "FAILED";
  }
  if (row.resolved) {
    std::cout << "  " << row.resolved->config.describe() << " ("
              << tn::config_source_name(row.resolved->source) << ")";
  }
  if (row.workspace_bytes > 0) {
    std::cout << std::setprecision(2) << ", workspace "
              << static_cast<double>(row.workspace_bytes) / (1 << 20) << " MiB";
  }
  if (row.grid) std::cout << ", grid " << grid_text(*row.grid);
  std::cout << std::endl;
  if (!row.error.empty()) {
    std::cerr << "tilenorm-bench: " << row.op << " " << row.pass << " " << shape_text(row.shape)
              << " stride " << row.row_stride << ": " << row.error << "\n";
  }
}

void print_decode(const std::vector<ShapeResult>& rows, const std::vector<GraphCheck>& checks) {
  std::cout << "\ndecode: kernel against cuMemcpyDtoDAsync moving the same bytes (read + written),"
               " same timing;\nhost us per Norm::launch against a bare cuLaunchKernel of an empty "
               "kernel\n"
            << std::left << std::setw(22) << "op" << std::right << std::setw(11) << "M"
            << std::setw(8) << "N" << std::setw(8) << "stride" << std::setw(12) << "bytes"
            << std::setw(11) << "kernel us" << std::setw(9) << "copy us" << std::setw(13)
            << "kernel/copy" << std::setw(11) << "launch us" << std::setw(10) << "empty us"
            << std::setw(14) << "launch/empty\n";
  for (const ShapeResult& row : rows) {
    if (!row.decode) continue;
    const DecodeResult& d = *row.decode;
    std::cout << std::left << std::setw(22) << (row.op + " " + row.pass) << std::right
              << std::setw(11) << row.shape.m << std::setw(8) << row.shape.n << std::setw(8)
              << row.row_stride << std::setw(12) << std::setprecision(0) << d.kernel_bytes
              << std::setprecision(2) << std::setw(11) << row.timed.median_us << std::setw(9)
              << d.copy.median_us << std::setw(13) << row.timed.median_us / d.copy.median_us
              << std::setw(11) << d.launch_us << std::setw(10) << d.empty_launch_us << std::setw(13)
              << d.launch_us / d.empty_launch_us << "\n";
  }
  std::cout << "\nCUDA graph (layer_norm then rms_norm) replayed against direct launches:\n";
  for (const GraphCheck& check : checks) {
    std::cout << "  " << shape_text(check.shape) << " stride " << check.row_stride << ": "
              << (check.ok ? "pass" : "FAIL") << " (" << check.detail << ")\n";
    if (!check.ok) {
      std::cerr << "tilenorm-bench: graph replay " << shape_text(check.shape) << " stride "
                << check.row_stride << ": " << check.detail << "\n";
    }
  }
  std::cout.flush();
}

nlohmann::json to_json(const ShapeResult& row, const CopyCeiling& ceiling, Timing timing) {
  nlohmann::json out = {{"op", row.op},
                        {"pass", row.pass},
                        {"m", row.shape.m},
                        {"n", row.shape.n},
                        {"row_stride", row.row_stride},
                        {"bytes", row.bytes},
                        {"buffer_sets", row.buffer_sets},
                        {"workspace_bytes", row.workspace_bytes},
                        {"timing", timing_name(timing)}};
  if (row.grid) {
    out["grid"] = {{"ctas", row.grid->ctas},
                   {"threads_per_block", row.grid->threads_per_block},
                   {"ctas_per_row", row.grid->ctas_per_row},
                   {"fold", row.grid->fold},
                   {"resident_row_blocks", row.grid->resident_row_blocks},
                   {"registers", row.grid->registers},
                   {"dynamic_shared_bytes", row.grid->dynamic_shared_bytes},
                   {"shift_per_row", row.grid->shift_per_row},
                   {"early_columns", row.grid->early_columns},
                   {"global_exchange", row.grid->global_exchange}};
  }
  if (row.resolved) {
    out["config"] = tn::reflect::to_json(row.resolved->config);
    out["config_text"] = row.resolved->config.describe();
    out["config_source"] = tn::config_source_name(row.resolved->source);
    if (!row.resolved->database.empty()) {
      out["config_database"] = row.resolved->database.string();
      out["config_database_shipped"] = row.resolved->shipped_database;
    }
  }
  if (row.error.empty()) {
    out["launches_per_sample"] = row.timed.launches_per_sample;
    out["median_us"] = row.timed.median_us;
    out["min_us"] = row.timed.min_us;
    out["tbps"] = row.tbps;
    out["percent_of_ceiling"] = 100.0 * row.tbps / ceiling.tbps;
  } else {
    out["error"] = row.error;
  }
  if (row.decode) {
    const DecodeResult& d = *row.decode;
    out["decode"] = {{"kernel_bytes", d.kernel_bytes},
                     {"copy_size_bytes", d.copy_size},
                     {"copy_median_us", d.copy.median_us},
                     {"copy_min_us", d.copy.min_us},
                     {"kernel_over_copy", row.timed.median_us / d.copy.median_us},
                     {"host_launches_per_sample", kHostLaunches},
                     {"launch_us", d.launch_us},
                     {"empty_launch_us", d.empty_launch_us},
                     {"launch_over_empty", d.launch_us / d.empty_launch_us}};
  }
  return out;
}

void write_json(const std::string& path, const driver::DeviceInfo& info, const Options& options,
                const CopyCeiling& ceiling, const std::vector<ShapeResult>& rows,
                const std::vector<GraphCheck>& checks) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const Shape& shape : options.shapes) shapes.push_back(shape_text(shape));
  nlohmann::json out = {
      {"tool", "tilenorm-bench"},
      {"device", info.name},
      {"arch", info.arch()},
      {"l2_bytes", info.l2_bytes},
      {"cooperative_launch", info.cooperative_launch},
      {"date_utc", tn::utc_date_time_now()},
      {"dtype", tn::dtype_name(options.dtype)},
      {"elements", options.elements ? nlohmann::json(*options.elements) : nlohmann::json(nullptr)},
      {"shapes", shapes},
      {"row_stride",
       options.row_stride ? nlohmann::json(options.row_stride) : nlohmann::json(nullptr)},
      {"eps", kEps},
      {"repeats", options.repeats},
      {"timing", timing_name(options.timing)},
      {"decode", options.decode},
      {"tuning_database", options.use_tuning_database},
      {"fold_partials", options.fold_partials},
      {"programmatic_launch", options.programmatic_launch},
      {"peeled_row_shifts", tn::peeled_row_shifts_name(options.peeled_row_shifts)},
      {"early_columns", tn::early_columns_name(options.early_columns)},
      {"heuristic_device", options.heuristic_device.empty()
                               ? nlohmann::json(nullptr)
                               : nlohmann::json(options.heuristic_device)},
      {"copy_ceiling",
       {{"method", "cuMemcpyDtoDAsync"},
        {"bytes", ceiling.bytes},
        {"median_us", ceiling.median_us},
        {"tbps", ceiling.tbps}}},
      {"rows", nlohmann::json::array()}};
  for (const ShapeResult& row : rows) out["rows"].push_back(to_json(row, ceiling, options.timing));
  if (options.decode) {
    out["graph_checks"] = nlohmann::json::array();
    for (const GraphCheck& check : checks) {
      out["graph_checks"].push_back({{"m", check.shape.m},
                                     {"n", check.shape.n},
                                     {"row_stride", check.row_stride},
                                     {"ops", {"layer_norm", "rms_norm"}},
                                     {"ok", check.ok},
                                     {"detail", check.detail}});
    }
  }
  std::ofstream file(path);
  file << out.dump(2) << "\n";
  if (!file) throw tn::Error("cannot write " + path);
}

int run(const Options& options) {
  driver::ScopedContext scope(driver::primary_context(0));
  const driver::DeviceInfo info = driver::device_info(0);
  const CopyCeiling ceiling = measure_copy_ceiling();
  print_header(info, options, ceiling);

  tn::Runtime runtime({.device = 0,
                       .use_tuning_database = options.use_tuning_database,
                       .fold_partials = options.fold_partials,
                       .peeled_row_shifts = options.peeled_row_shifts,
                       .early_columns = options.early_columns,
                       .heuristic_device = options.heuristic_device,
                       .programmatic_launch = options.programmatic_launch});
  std::int64_t max_elements = 0;
  for (const Shape& shape : options.shapes)
    max_elements = std::max(max_elements, shape.m * shape.n);
  const std::vector<std::byte> input_bytes =
      tn::encode(tn::random_values(static_cast<std::size_t>(max_elements), kInputSeed, -2.0, 2.5,
                                   options.dtype),
                 options.dtype);
  driver::Stream stream;
  HelperKernels helpers(runtime.arch());
  helpers.calibrate(stream);
  Timer timer(options, stream, helpers);

  std::vector<ShapeResult> rows;
  for (const std::string& pass : options.passes) {
    for (const std::string& op : options.ops) {
      std::optional<tn::Norm> loaded;
      if (auto program = bench_program(op, pass)) loaded.emplace(runtime.load(*program));
      const tn::Norm& norm =
          loaded ? *loaded : tn::kernels::builtin(runtime, program_for(op, pass));
      for (const Shape& shape : options.shapes) {
        RowBench bench(norm, op, pass, shape, options, input_bytes,
                       static_cast<std::size_t>(info.l2_bytes));
        rows.push_back(bench.run(timer, stream, helpers));
        print_row(rows.back(), ceiling);
      }
    }
  }
  std::vector<GraphCheck> checks;
  if (options.decode) {
    for (const Shape& shape : options.shapes) {
      checks.push_back(check_graph_replay(runtime, shape, options, input_bytes, stream));
    }
    print_decode(rows, checks);
  }
  if (!options.json_path.empty())
    write_json(options.json_path, info, options, ceiling, rows, checks);
  const bool rows_ok = std::all_of(rows.begin(), rows.end(),
                                   [](const ShapeResult& row) { return row.error.empty(); });
  const bool checks_ok =
      std::all_of(checks.begin(), checks.end(), [](const GraphCheck& check) { return check.ok; });
  return rows_ok && checks_ok ? cli::kExitOk : cli::kExitFailure;
}

int bench(const std::vector<std::string>& args) {
  const Options options = parse_options(args);  // UsageError: exit 2, nothing printed yet
  if (!driver::gpu_available()) {
    std::cerr << "tilenorm-bench: no GPU: " << driver::gpu_unavailable_reason() << "\n";
    return cli::kExitNoGpu;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {  // a fatal error: exit 2 (1 is a failed shape)
    std::cerr << "tilenorm-bench: error: " << e.what() << "\n";
    return cli::kExitUsage;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("tilenorm-bench",
                       [&] { return bench(std::vector<std::string>(argv + 1, argv + argc)); });
}
