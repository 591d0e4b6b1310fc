// tilenorm-bench: times the built-in norms at M * N = --elements for each N, next to the
// device-to-device copy bandwidth measured in the same run (bench/README.md).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reference.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/runtime.hpp"
#include "tilenorm/runtime/stats.hpp"
#include "tilenorm/runtime/timing.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

namespace driver = tilenorm::driver;

constexpr const char* kUsage = R"(usage: tilenorm-bench [options]

Times the built-in norms on GPU 0 (forward, no saved statistics) at M * N = --elements for
each N, after checking each kernel against the fp64 interpreter, and measures the
device-to-device copy bandwidth in the same run as the ceiling.

options:
  --dtype T          storage type of rows and parameters: bf16 (default), fp16, fp32
  --n LIST           comma-separated row lengths (default
                     128,512,1024,2048,4096,5120,8192,16384,32768,65536,131072,262144)
  --elements E       elements per shape; M = E / N (default 67108864 = 2^26)
  --ops LIST         built-in kernels to time (default layer_norm,rms_norm: the weight + bias
                     LayerNorm and the weight RMSNorm)
  --pass LIST        forward (x read, y written), backward (the derived backward reading the
                     saved statistics: x and dy read, dx written, dweight/dbias summed) and
                     recompute (the backward recomputing the statistics from x); default
                     forward,backward
  --repeats R        timed launches per shape; the median is reported (default 50)
  --json PATH        also write the results as JSON to PATH
  --no-tuning-db     use the heuristic configuration only, ignoring tuning databases
  -h, --help         this text

exit status: 0 all shapes checked and timed, 1 some shape failed (see the table and
stderr), 2 bad arguments or a fatal error, 3 no GPU.
)";

constexpr double kEps = 1e-5;
// Launches before timing: they also queue enough GPU work that the host enqueues the timed
// launches ahead of the GPU, so no host gap lands between a pair of events.
constexpr int kWarmupLaunches = 10;
// Not a multiple of any power-of-two rows_per_cta, so the checked launch ends in a partial CTA.
constexpr std::int64_t kCheckRows = 67;
constexpr std::size_t kCopyBytes = std::size_t{2} << 30;
constexpr std::uint64_t kInputSeed = 1;
constexpr std::uint64_t kCheckSeed = 7;

struct Options {
  tilenorm::DType dtype = tilenorm::DType::bf16;
  std::vector<std::int64_t> ns = {128,  512,   1024,  2048,  4096,   5120,
                                  8192, 16384, 32768, 65536, 131072, 262144};
  std::int64_t elements = std::int64_t{1} << 26;
  std::vector<std::string> ops = {"layer_norm", "rms_norm"};
  std::vector<std::string> passes = {"forward", "backward"};
  int repeats = 50;
  std::string json_path;
  bool use_tuning_database = true;
};

std::int64_t to_positive_int(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  throw tilenorm::Error(flag + " needs a positive integer, got '" + text + "'");
}

std::vector<std::string> split_commas(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) throw tilenorm::Error(flag + " has an empty item in '" + text + "'");
    items.push_back(item);
  }
  if (items.empty()) throw tilenorm::Error(flag + " needs at least one item");
  return items;
}

Options parse_options(const std::vector<std::string>& args, bool& help) {
  Options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw tilenorm::Error(arg + " needs a value");
      return args[++i];
    };
    if (arg == "-h" || arg == "--help") {
      help = true;
      return options;
    } else if (arg == "--dtype") {
      options.dtype = tilenorm::parse_dtype(value());
    } else if (arg == "--n") {
      options.ns.clear();
      for (const std::string& item : split_commas(arg, value())) {
        options.ns.push_back(to_positive_int(arg, item));
      }
    } else if (arg == "--elements") {
      options.elements = to_positive_int(arg, value());
    } else if (arg == "--ops") {
      options.ops = split_commas(arg, value());
      for (const std::string& op : options.ops) tilenorm::kernels::builtin_program(op);
    } else if (arg == "--pass") {
      options.passes = split_commas(arg, value());
      for (const std::string& pass : options.passes) {
        if (pass != "forward" && pass != "backward" && pass != "recompute")
          throw tilenorm::Error("--pass: unknown pass '" + pass +
                                "' (expected forward, backward or recompute)");
      }
    } else if (arg == "--repeats") {
      options.repeats =
          static_cast<int>(std::min<std::int64_t>(to_positive_int(arg, value()), 1 << 20));
    } else if (arg == "--json") {
      options.json_path = value();
    } else if (arg == "--no-tuning-db") {
      options.use_tuning_database = false;
    } else {
      throw tilenorm::Error("unknown argument '" + arg + "' (see --help)");
    }
  }
  for (std::int64_t n : options.ns) {
    if (n > options.elements) {
      throw tilenorm::Error("--n " + std::to_string(n) + " exceeds --elements " +
                            std::to_string(options.elements) + ": no full row fits");
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
  ceiling.tbps = tilenorm::measure_copy_ceiling_tbps(kCopyBytes);
  ceiling.median_us = ceiling.bytes / (ceiling.tbps * 1e6);
  return ceiling;
}

struct ShapeResult {
  std::string op;
  std::string pass;
  std::int64_t n = 0;
  std::int64_t m = 0;
  double bytes = 0;  // row tensors read + written (x, y; or x, dy, dx)
  int buffer_sets = 0;
  std::optional<tilenorm::ResolvedConfig> resolved;
  double median_us = 0;
  double min_us = 0;
  double tbps = 0;
  std::string error;  // empty when the shape was checked and timed
};

// The program a pass times: the forward, or its derived backward (statistics read back, or
// recomputed from x).
std::string program_for(const std::string& op, const std::string& pass) {
  if (pass == "backward") return op + "_backward";
  if (pass == "recompute") return op + "_backward_recompute";
  return op;
}

// Everything one (op, pass) needs for every N, derived from the program's slots: buffers sized
// for --elements, columns for the largest N.
class OpBench {
 public:
  OpBench(tilenorm::Runtime& runtime, const std::string& op, const std::string& pass,
          const Options& options, const std::vector<std::byte>& input_bytes, std::size_t l2_bytes)
      : norm_(tilenorm::kernels::builtin(runtime, program_for(op, pass))),
        op_(op),
        pass_(pass),
        options_(options) {
    const tilenorm::ir::Program& program = norm_.program();
    const std::size_t element_size = tilenorm::dtype_size(options.dtype);
    const std::size_t tensor_bytes = static_cast<std::size_t>(options.elements) * element_size;
    std::size_t row_tensors = 0;
    for (const auto& slot : program.slots) row_tensors += slot.shape == tilenorm::ir::Shape::tile;
    const std::size_t set_bytes = row_tensors * tensor_bytes;
    // At least two sets, and more until one pass over them is larger than twice the L2.
    const std::size_t sets = std::max<std::size_t>(2, 2 * l2_bytes / set_bytes + 1);
    const std::int64_t max_n = *std::max_element(options.ns.begin(), options.ns.end());
    const std::int64_t min_n = *std::min_element(options.ns.begin(), options.ns.end());
    const auto max_m = static_cast<std::size_t>(options.elements / min_n);
    slot_buffers_.resize(program.slots.size());
    for (std::size_t s = 0; s < sets; ++s) {
      auto& set = sets_.emplace_back(program.slots.size());
      for (std::size_t i = 0; i < program.slots.size(); ++i) {
        const auto& slot = program.slots[i];
        if (slot.shape != tilenorm::ir::Shape::tile) continue;
        set[i] = driver::DeviceBuffer(tensor_bytes);
        if (slot.role == tilenorm::ir::Role::read) set[i].upload(input_bytes.data(), tensor_bytes);
      }
    }
    for (std::size_t i = 0; i < program.slots.size(); ++i) {
      const auto& slot = program.slots[i];
      const bool read = slot.role == tilenorm::ir::Role::read;
      if (slot.shape == tilenorm::ir::Shape::column) {
        const std::vector<std::byte> bytes =
            tilenorm::encode(tilenorm::random_values(static_cast<std::size_t>(max_n),
                                                     kInputSeed + 1 + i, -1.5, 1.5, options.dtype),
                             options.dtype);
        slot_buffers_[i] = driver::DeviceBuffer(bytes.size());
        if (read) slot_buffers_[i].upload(bytes.data(), bytes.size());
      } else if (slot.shape == tilenorm::ir::Shape::row_scalar && read) {
        // Saved statistics read back by the backward: plausible values (mean 0, rstd 1).
        const std::vector<float> ones(max_m, slot.name == "mean" ? 0.0f : 1.0f);
        slot_buffers_[i] = driver::DeviceBuffer(max_m * sizeof(float));
        slot_buffers_[i].upload(ones.data(), max_m * sizeof(float));
      } else if (slot.shape == tilenorm::ir::Shape::scalar && !read) {
        slot_buffers_[i] = driver::DeviceBuffer(sizeof(float));
      }
    }
  }

  ShapeResult run(std::int64_t n, driver::Stream& stream, std::vector<driver::Event>& starts,
                  std::vector<driver::Event>& ends) const {
    ShapeResult result;
    result.op = op_;
    result.pass = pass_;
    result.n = n;
    result.m = options_.elements / n;
    result.buffer_sets = static_cast<int>(sets_.size());
    const double tensor_bytes =
        static_cast<double>(result.m * n) * tilenorm::dtype_size(options_.dtype);
    std::size_t row_tensors = 0;
    for (const auto& slot : norm_.program().slots)
      row_tensors += slot.shape == tilenorm::ir::Shape::tile;
    result.bytes = static_cast<double>(row_tensors) * tensor_bytes;
    try {
      const std::vector<std::vector<tilenorm::Arg>> args = make_args(n, result.m);
      result.resolved = norm_.resolve(args[0]);
      const std::size_t workspace_bytes = norm_.workspace_bytes(args[0]);
      driver::DeviceBuffer workspace_buffer(std::max<std::size_t>(workspace_bytes, 16));
      const tilenorm::Workspace workspace{reinterpret_cast<void*>(workspace_buffer.get()),
                                          workspace_bytes};
      const tilenorm::Stream launch_stream = stream.get();
      // The first launch compiles or loads the kernel, and surfaces a fault before any timing.
      norm_.launch(args[0], launch_stream, workspace);
      stream.synchronize();

      // The same configuration on a small M, against the interpreter: never time a wrong kernel.
      tilenorm::CheckOptions check;
      check.io_dtype = options_.dtype;
      check.param_dtype = options_.dtype;
      check.rows = std::min(result.m, kCheckRows);
      check.cols = n;
      check.seed = kCheckSeed;
      check.config = result.resolved->config;
      const tilenorm::CheckReport report = tilenorm::check_against_interpreter(norm_, check);
      if (!report.ok()) {
        result.error = "check against the interpreter failed: " + report.describe();
        return result;
      }

      for (int i = 0; i < kWarmupLaunches; ++i)
        norm_.launch(args[i % args.size()], launch_stream, workspace);
      for (int r = 0; r < options_.repeats; ++r) {
        starts[r].record(stream.get());
        norm_.launch(args[(kWarmupLaunches + r) % args.size()], launch_stream, workspace);
        ends[r].record(stream.get());
      }
      stream.synchronize();
      std::vector<double> samples;
      for (int r = 0; r < options_.repeats; ++r) {
        samples.push_back(1e3 * driver::Event::elapsed_ms(starts[r], ends[r]));
      }
      result.median_us = tilenorm::median(samples);
      result.min_us = *std::min_element(samples.begin(), samples.end());
      result.tbps = terabytes_per_second(result.bytes, result.median_us);
    } catch (const tilenorm::Error& e) {
      result.error = e.what();
    }
    return result;
  }

 private:
  // One argument list per buffer set, in slot order.
  std::vector<std::vector<tilenorm::Arg>> make_args(std::int64_t n, std::int64_t m) const {
    const tilenorm::ir::Program& program = norm_.program();
    std::vector<std::vector<tilenorm::Arg>> all;
    for (const auto& set : sets_) {
      auto& args = all.emplace_back();
      for (std::size_t i = 0; i < program.slots.size(); ++i) {
        const auto& slot = program.slots[i];
        void* shared = reinterpret_cast<void*>(slot_buffers_[i].get());
        switch (slot.shape) {
          case tilenorm::ir::Shape::tile:
            args.push_back(tilenorm::TensorView::contiguous(reinterpret_cast<void*>(set[i].get()),
                                                            options_.dtype, m, n));
            break;
          case tilenorm::ir::Shape::column:
            args.push_back(tilenorm::ColumnView{shared, options_.dtype, n});
            break;
          case tilenorm::ir::Shape::row_scalar:
            // Null statistics are not written: the inference forward, as torch.compile runs it.
            args.push_back(tilenorm::RowStatView{static_cast<float*>(shared), m});
            break;
          case tilenorm::ir::Shape::scalar:
            if (slot.role == tilenorm::ir::Role::read)
              args.push_back(static_cast<float>(kEps));
            else
              args.push_back(tilenorm::ScalarView{static_cast<float*>(shared)});
            break;
        }
      }
    }
    return all;
  }

  const tilenorm::Norm& norm_;
  std::string op_, pass_;
  const Options& options_;
  // Row tensors per set and slot; the timed launches rotate over the sets so inputs come from
  // DRAM.
  std::vector<std::vector<driver::DeviceBuffer>> sets_;
  std::vector<driver::DeviceBuffer> slot_buffers_;  // shared by the sets, per slot
};

void print_header(const driver::DeviceInfo& info, const Options& options,
                  const CopyCeiling& ceiling) {
  std::cout << "device: " << info.name << " (" << info.arch() << ", " << info.multiprocessors
            << " SMs, L2 " << info.l2_bytes / (1 << 20) << " MiB)\n"
            << "dtype " << tilenorm::dtype_name(options.dtype) << ", M * N <= " << options.elements
            << ", median of " << options.repeats << " launches, tuning database "
            << (options.use_tuning_database ? "on" : "off") << "\n"
            << std::fixed << std::setprecision(2) << "copy ceiling: " << ceiling.tbps
            << " TB/s (cuMemcpyDtoDAsync of 2 GiB, " << std::setprecision(1) << ceiling.median_us
            << " us median, bytes read + written)\n\n"
            << std::left << std::setw(22) << "op" << std::right << std::setw(8) << "N"
            << std::setw(9) << "M" << std::setw(10) << "us" << std::setw(8) << "TB/s"
            << std::setw(8) << "%ceil"
            << "  config (source)\n";
}

void print_row(const ShapeResult& row, const CopyCeiling& ceiling) {
  std::cout << std::left << std::setw(22) << (row.op + " " + row.pass) << std::right << std::setw(8)
            << row.n << std::setw(9) << row.m;
  if (row.error.empty()) {
    std::cout << std::fixed << std::setprecision(1) << std::setw(10) << row.median_us
              << std::setprecision(2) << std::setw(8) << row.tbps << std::setprecision(1)
              << std::setw(8) << 100.0 * row.tbps / ceiling.tbps;
  } else {
    std::cout << std::setw(26) << "FAILED";
  }
  if (row.resolved) {
    std::cout << "  " << row.resolved->config.describe() << " ("
              << tilenorm::config_source_name(row.resolved->source) << ")";
  }
  std::cout << std::endl;
  if (!row.error.empty()) {
    std::cerr << "tilenorm-bench: " << row.op << " N=" << row.n << ": " << row.error << "\n";
  }
}

nlohmann::json to_json(const ShapeResult& row, const CopyCeiling& ceiling) {
  nlohmann::json out = {{"op", row.op}, {"pass", row.pass},   {"n", row.n},
                        {"m", row.m},   {"bytes", row.bytes}, {"buffer_sets", row.buffer_sets}};
  if (row.resolved) {
    out["config"] = tilenorm::reflect::to_json(row.resolved->config);
    out["config_text"] = row.resolved->config.describe();
    out["config_source"] = tilenorm::config_source_name(row.resolved->source);
  }
  if (row.error.empty()) {
    out["median_us"] = row.median_us;
    out["min_us"] = row.min_us;
    out["tbps"] = row.tbps;
    out["percent_of_ceiling"] = 100.0 * row.tbps / ceiling.tbps;
  } else {
    out["error"] = row.error;
  }
  return out;
}

void write_json(const std::string& path, const driver::DeviceInfo& info, const Options& options,
                const CopyCeiling& ceiling, const std::vector<ShapeResult>& rows) {
  nlohmann::json out = {{"tool", "tilenorm-bench"},
                        {"device", info.name},
                        {"arch", info.arch()},
                        {"l2_bytes", info.l2_bytes},
                        {"date_utc", tilenorm::utc_date_time_now()},
                        {"dtype", tilenorm::dtype_name(options.dtype)},
                        {"elements", options.elements},
                        {"eps", kEps},
                        {"repeats", options.repeats},
                        {"tuning_database", options.use_tuning_database},
                        {"copy_ceiling",
                         {{"method", "cuMemcpyDtoDAsync"},
                          {"bytes", ceiling.bytes},
                          {"median_us", ceiling.median_us},
                          {"tbps", ceiling.tbps}}},
                        {"rows", nlohmann::json::array()}};
  for (const ShapeResult& row : rows) out["rows"].push_back(to_json(row, ceiling));
  std::ofstream file(path);
  file << out.dump(2) << "\n";
  if (!file) throw tilenorm::Error("cannot write " + path);
}

int run(const Options& options) {
  driver::ScopedContext scope(driver::primary_context(0));
  const driver::DeviceInfo info = driver::device_info(0);
  const CopyCeiling ceiling = measure_copy_ceiling();
  print_header(info, options, ceiling);

  tilenorm::Runtime runtime({.device = 0, .use_tuning_database = options.use_tuning_database});
  const std::vector<std::byte> input_bytes =
      tilenorm::encode(tilenorm::random_values(static_cast<std::size_t>(options.elements),
                                               kInputSeed, -2.0, 2.5, options.dtype),
                       options.dtype);
  driver::Stream stream;
  std::vector<driver::Event> starts(options.repeats), ends(options.repeats);

  std::vector<ShapeResult> rows;
  for (const std::string& pass : options.passes) {
    for (const std::string& op : options.ops) {
      const OpBench bench(runtime, op, pass, options, input_bytes,
                          static_cast<std::size_t>(info.l2_bytes));
      for (std::int64_t n : options.ns) {
        rows.push_back(bench.run(n, stream, starts, ends));
        print_row(rows.back(), ceiling);
      }
    }
  }
  if (!options.json_path.empty()) write_json(options.json_path, info, options, ceiling, rows);
  const bool all_ok = std::all_of(rows.begin(), rows.end(),
                                  [](const ShapeResult& row) { return row.error.empty(); });
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    bool help = false;
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc), help);
    if (help) {
      std::cout << kUsage;
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "tilenorm-bench: error: " << e.what() << "\n";
    return 2;
  }
  if (!driver::gpu_available()) {
    std::cerr << "tilenorm-bench: no GPU: " << driver::gpu_unavailable_reason() << "\n";
    return 3;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "tilenorm-bench: error: " << e.what() << "\n";
    return 2;
  }
}
