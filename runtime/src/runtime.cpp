#include "tilenorm/runtime/runtime.hpp"

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <unordered_map>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/runtime/alignment.hpp"
#include "tilenorm/runtime/disk_cache.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/footprint.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/occupancy.hpp"
#include "tilenorm/runtime/paths.hpp"

namespace tilenorm {

std::string_view config_source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::tuned_exact:
      return "tuned (exact)";
    case ConfigSource::tuned_nearest_m:
      return "tuned (nearest M bucket)";
    case ConfigSource::heuristic:
      return "heuristic";
    case ConfigSource::explicit_config:
      return "explicit";
  }
  return "?";
}

std::string_view peeled_row_shifts_name(PeeledRowShifts shifts) {
  switch (shifts) {
    case PeeledRowShifts::automatic:
      return "auto";
    case PeeledRowShifts::per_thread:
      return "per-thread";
    case PeeledRowShifts::per_row:
      return "per-row";
  }
  return "?";
}

std::string_view early_columns_name(EarlyColumns early) {
  switch (early) {
    case EarlyColumns::automatic:
      return "auto";
    case EarlyColumns::never:
      return "never";
    case EarlyColumns::always:
      return "always";
  }
  return "?";
}

std::string tuning_dtype_key(DType io_dtype, DType param_dtype) {
  std::string key(dtype_name(io_dtype));
  if (param_dtype != io_dtype) key += "/" + std::string(dtype_name(param_dtype));
  return key;
}

void BoundArgs::push_back(const Arg& arg) {
  if (size_ == kMaxBoundArgs)
    throw Error("more than " + std::to_string(kMaxBoundArgs) + " arguments to bind");
  args_[size_++] = arg;
}

BoundArgs bind_args(const ir::Program& program, std::initializer_list<NamedArg> named) {
  BoundArgs args;
  for (const ir::Slot& slot : program.slots) {
    const NamedArg* found = nullptr;
    for (const NamedArg& arg : named) {
      if (arg.first == slot.name) found = &arg;
    }
    if (!found) throw Error(program.name + ": no argument for slot '" + slot.name + "'");
    args.push_back(found->second);
  }
  return args;
}

namespace {

// Shared memory per SM where no device is at hand: that of the arch's first known GPU (its
// opt-in limit per CTA and the 1 KiB the system reserves), else 100 KiB, the least of the
// supported architectures (sm_86, sm_120).
std::size_t shared_memory_per_sm(std::string_view arch) {
  for (const DeviceLimits& device : known_devices()) {
    if (device.arch() == arch) return device.shared_memory_per_block + 1024;
  }
  return 100 * 1024;
}

}  // namespace

BuiltKernel build_kernel(const LoweredProgram& program, const KernelSpec& spec,
                         const std::string& arch, bool use_disk_cache) {
  BuiltKernel built;
  built.generated = generate_cuda(program, spec);
  const CompileRequest request{built.generated.source, built.generated.name, arch, {}};
  std::optional<DiskCache> cache;
  if (use_disk_cache) cache.emplace(cache_directory());
  CompiledKernel compiled = compile_for_occupancy(
      request, built.generated.threads_per_block, built.generated.dynamic_shared_bytes,
      shared_memory_per_sm(arch), occupancy_cta_limit(built.generated),
      occupancy_register_ceiling(built.generated), cache ? &*cache : nullptr);
  built.cubin = std::move(compiled.cubin);
  built.registers = compiled.registers;
  built.spill_bytes = compiled.spill_store_bytes + compiled.spill_load_bytes;
  built.static_shared_bytes = compiled.shared_memory_bytes;
  built.from_disk_cache = compiled.from_disk_cache;
  return built;
}

std::optional<std::string> shared_memory_problem(std::size_t static_bytes,
                                                 std::size_t dynamic_bytes,
                                                 std::size_t limit_bytes) {
  if (static_bytes + dynamic_bytes <= limit_bytes) return std::nullopt;
  return "it needs " + std::to_string(static_bytes + dynamic_bytes) +
         " bytes of shared memory per CTA (" + std::to_string(static_bytes) + " static, " +
         std::to_string(dynamic_bytes) + " dynamic); the device allows " +
         std::to_string(limit_bytes);
}

namespace {

constexpr std::size_t kMaxKernelParams = 64;

// What validation learned about a launch.
struct LaunchShape {
  DType io_dtype = DType::bf16;
  DType param_dtype = DType::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;  // the first row tensor's, in elements (peeled_grid)
  int max_vec = 1;              // widest vector the pointers' and strides' alignment allows
  int peel_vec = 1;  // widest vector with alignment peeling (>= max_vec; see peel_rows())
  // Whether a launch with `config` peels its rows: its vectors are wider than the alignment
  // allows, and peeling makes up the difference.
  bool peel_rows(const KernelConfig& config) const { return config.vec > max_vec; }
  // The period of the rows' shifts peeled at `vec` (1 for a single row, whatever its stride).
  std::int64_t shift_period(int vec) const {
    return rows > 1 ? tilenorm::shift_period(row_stride, vec) : 1;
  }
  KernelSpec spec(const KernelConfig& config) const {
    return {io_dtype, param_dtype, cols, config, peel_rows(config)};
  }
};

struct LaunchKey {
  DType io_dtype;
  DType param_dtype;
  std::int64_t n;
  std::int64_t m_bucket;
  int max_vec;
  int peel_vec;
  std::int64_t shift_period;  // of the rows peeled at peel_vec: whether each row finds its shift
  std::optional<KernelConfig> forced;
  bool operator==(const LaunchKey& o) const {
    return io_dtype == o.io_dtype && param_dtype == o.param_dtype && n == o.n &&
           m_bucket == o.m_bucket && max_vec == o.max_vec && peel_vec == o.peel_vec &&
           shift_period == o.shift_period && forced == o.forced;
  }
};

struct LaunchKeyHash {
  std::size_t operator()(const LaunchKey& k) const {
    std::size_t h = std::hash<std::int64_t>()(k.n) ^ (std::hash<std::int64_t>()(k.m_bucket) << 1);
    h ^= (static_cast<std::size_t>(k.io_dtype) << 3) ^
         (static_cast<std::size_t>(k.param_dtype) << 5) ^
         (static_cast<std::size_t>(k.max_vec) << 7) ^ (static_cast<std::size_t>(k.peel_vec) << 12) ^
         (static_cast<std::size_t>(k.shift_period) << 17);
    if (k.forced) {
      h ^= std::hash<int>()(k.forced->threads_per_row * 131 + k.forced->rows_per_cta * 17 +
                            k.forced->vec * 3 + k.forced->row_storage);
    }
    return h;
  }
};

struct LoadedKernel {
  CUfunction function = nullptr;
  CUfunction finish = nullptr;  // the finishing kernel, for cross-row reductions
  GeneratedKernel generated;
  ResolvedConfig resolved;
  int max_grid = 0;  // persistent kernels: row blocks (CTAs or clusters) resident at once
  // The largest cluster in which the main kernel may fold its column partial sums
  // (folds_partials): 1 where it cannot.
  int max_fold = 1;
  std::int64_t row_bytes = 0;  // bytes per column of one row in all the row tensors
  int registers = 0;           // per thread, of the main kernel
};

std::optional<DiskCache> open_disk_cache() {
  try {
    return DiskCache(cache_directory());
  } catch (const Error& e) {
    warn(std::string("no disk cache for compiled kernels: ") + e.what());
    return std::nullopt;
  }
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

}  // namespace

// A kernel's launch: plain, with clusters of `ctas` CTAs along x, or cooperative (every CTA
// resident at once, which software clusters wait on); `programmatic`: it may be scheduled
// before the previous kernel in the stream ends (RuntimeOptions::programmatic_launch).
CUresult launch_kernel(CUfunction function, unsigned grid, unsigned threads, unsigned shared_bytes,
                       int ctas, bool cooperative, bool programmatic, CUstream stream,
                       void** params) {
  if (ctas == 1 && !cooperative && !programmatic) {
    return driver::api().cuLaunchKernel(function, grid, 1, 1, threads, 1, 1, shared_bytes, stream,
                                        params, nullptr);
  }
  CUlaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (cooperative) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count++].value.cooperative = 1;
  } else if (ctas > 1) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = static_cast<unsigned>(ctas);
    attributes[count].value.clusterDim.y = 1;
    attributes[count++].value.clusterDim.z = 1;
  }
  if (programmatic) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return driver::api().cuLaunchKernelEx(&config, function, params, nullptr);
}

struct Runtime::Impl {
  RuntimeOptions options;
  driver::DeviceInfo info;
  std::string arch;  // what NVRTC compiles for: target_arch()
  CUcontext context = nullptr;
  DeviceLimits limits;
  // Without a usable cache directory (no HOME, no XDG_CACHE_HOME, no TILENORM_CACHE_DIR) the
  // runtime still works, compiling in every process.
  std::optional<DiskCache> disk = open_disk_cache();
  TuningDatabaseStack tuning;
  std::mutex mutex;                                   // guards modules, compiled and builtins
  std::unordered_map<std::string, CUmodule> modules;  // by compile cache key, in `context`
  // NVRTC's results for this device, by compile cache key: what load() loads, and what
  // resolve() reads a heuristic configuration's spills from.
  std::unordered_map<std::string, CompiledKernel> compiled;
  std::map<std::string, Norm, std::less<>> builtins;  // load_named, by name
  std::atomic<std::uint64_t> kernels_loaded{0};
  std::atomic<std::uint64_t> nvrtc_compiles{0};

  // Compiles `generated` for this device once (`mutex` held).
  CompiledKernel& compile_locked(const GeneratedKernel& generated, const std::string& key) {
    auto it = compiled.find(key);
    if (it != compiled.end()) return it->second;
    const CompileRequest request{generated.source, generated.name, arch, {}};
    CompiledKernel result =
        compile_for_occupancy(request, generated.threads_per_block, generated.dynamic_shared_bytes,
                              info.shared_memory_per_multiprocessor, occupancy_cta_limit(generated),
                              occupancy_register_ceiling(generated), disk ? &*disk : nullptr);
    if (!result.from_disk_cache) ++nvrtc_compiles;
    return compiled.emplace(key, std::move(result)).first->second;
  }

  // RuntimeOptions::programmatic_launch, where this GPU has it (griddepcontrol: sm_90+).
  bool programmatic_launch() const { return options.programmatic_launch && info.cc_major >= 9; }

  std::string compile_key(const GeneratedKernel& generated) const {
    return cache_key({generated.source, generated.name, arch, {}}, nvrtc_version());
  }

  // The bytes the main kernel of `generated` spills (stores and loads), as NVRTC reports them.
  int spill_bytes(const GeneratedKernel& generated) {
    const std::string key = compile_key(generated);
    std::lock_guard lock(mutex);
    const CompiledKernel& kernel = compile_locked(generated, key);
    return kernel.spill_store_bytes + kernel.spill_load_bytes;
  }

  CUfunction load(const GeneratedKernel& generated, CUfunction* finish) {
    const std::string key = compile_key(generated);
    std::lock_guard lock(mutex);
    auto it = modules.find(key);
    if (it == modules.end()) {
      CompiledKernel& kernel = compile_locked(generated, key);
      if (auto problem = shared_memory_problem(
              static_cast<std::size_t>(std::max(kernel.shared_memory_bytes, 0)),
              generated.dynamic_shared_bytes, limits.shared_memory_per_block)) {
        throw Error("cannot load kernel " + generated.name + " (" + arch + "): " + *problem);
      }
      driver::ScopedContext scope(context);
      CUmodule module = nullptr;
      try {
        driver::check(driver::api().cuModuleLoadData(&module, kernel.cubin.data()),
                      "cuModuleLoadData for kernel " + generated.name + " (" + arch + ")");
      } catch (const driver::CudaError& e) {
        const std::string note = older_driver_note(driver::driver_version(), nvrtc_version());
        if (note.empty()) throw;
        throw driver::CudaError(e.result(), std::string(e.what()) + ". " + note);
      }
      it = modules.emplace(key, module).first;
      ++kernels_loaded;
      // Loaded, the module is what stays: only the spill counts are read again.
      std::vector<char>().swap(kernel.cubin);
    }
    CUfunction function = nullptr;
    driver::check(driver::api().cuModuleGetFunction(&function, it->second, generated.name.c_str()),
                  "cuModuleGetFunction " + generated.name);
    if (generated.finish) {
      driver::check(
          driver::api().cuModuleGetFunction(finish, it->second, generated.finish->name.c_str()),
          "cuModuleGetFunction " + generated.finish->name);
    }
    // The default limit (48 KiB) covers static and dynamic shared memory together, so any
    // dynamic shared memory is declared: with a little static memory beside it, exactly 48 KiB
    // of dynamic memory is already too much.
    if (generated.dynamic_shared_bytes > 0) {
      driver::check(driver::api().cuFuncSetAttribute(
                        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        static_cast<int>(generated.dynamic_shared_bytes)),
                    "cuFuncSetAttribute (dynamic shared memory) for " + generated.name);
    }
    if (generated.ctas_per_row > kPortableClusterCtas) {
      driver::check(driver::api().cuFuncSetAttribute(
                        function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                    "cuFuncSetAttribute (cluster of " + std::to_string(generated.ctas_per_row) +
                        " CTAs) for " + generated.name);
    }
    return function;
  }
};

struct Norm::State {
  std::shared_ptr<Runtime::Impl> runtime;
  ir::Program program;
  LoweredProgram lowered;
  KernelPlan plan;
  std::string hash;
  // Labels for error messages, made once so that validating a launch allocates nothing
  // unless it fails.
  std::vector<std::string> labels;
  std::string slot_list;
  mutable std::shared_mutex mutex;
  mutable std::unordered_map<LaunchKey, LoadedKernel, LaunchKeyHash> kernels;
  // Tuned configurations found unusable, each reported once (resolve() runs for Norm::resolve
  // as well as for every new launch shape).
  mutable std::mutex reported_mutex;
  mutable std::set<std::string> reported;

  [[noreturn]] void fail(const std::string& what) const { throw Error(program.name + ": " + what); }

  static const char* expected_kind(const ir::Slot& slot) {
    switch (slot.shape) {
      case ir::Shape::tile:
        return "a TensorView";
      case ir::Shape::column:
        return "a ColumnView";
      case ir::Shape::row_scalar:
        return "a RowStatView";
      case ir::Shape::scalar:
        return slot.role == ir::Role::read ? "a float value" : "a ScalarView";
    }
    return "?";
  }
  static Arg::Kind kind_for(const ir::Slot& slot) {
    switch (slot.shape) {
      case ir::Shape::tile:
        return Arg::Kind::rows;
      case ir::Shape::column:
        return Arg::Kind::column;
      case ir::Shape::row_scalar:
        return Arg::Kind::row_stat;
      case ir::Shape::scalar:
        return slot.role == ir::Role::read ? Arg::Kind::scalar_value : Arg::Kind::scalar_out;
    }
    return Arg::Kind::rows;
  }

  // The bytes an argument covers (none for a value or an output that is not wanted).
  static std::optional<Footprint> footprint_of(const Arg& arg) {
    const TensorView& t = arg.view();
    if (arg.kind() == Arg::Kind::scalar_value || !t.data) return std::nullopt;
    const auto size = static_cast<std::int64_t>(dtype_size(t.dtype));
    const auto address = reinterpret_cast<std::uintptr_t>(t.data);
    if (t.rows <= 1 || t.row_stride == t.cols)
      return Footprint{address, 1, 0, t.rows * t.cols * size};
    return Footprint{address, t.rows, t.row_stride * size, t.cols * size};
  }

  // No output may share a byte with another argument: the kernels read every input through
  // __restrict__ pointers, and an output written over an input still to be read is wrong.
  void refuse_shared_outputs(KernelArgs args) const {
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (program.slots[i].role != ir::Role::written) continue;
      const std::optional<Footprint> output = footprint_of(args[i]);
      if (!output) continue;
      for (std::size_t j = 0; j < args.size(); ++j) {
        const std::optional<Footprint> other = j == i ? std::nullopt : footprint_of(args[j]);
        if (!other || !footprints_overlap(*output, *other)) continue;
        fail(labels[i] + " shares memory with " + labels[j] +
             ": an output may not overlap another argument (in-place launches are not "
             "supported)");
      }
    }
  }

  // The workspace is written too, so it may not overlap any argument.
  void refuse_shared_workspace(KernelArgs args, Workspace workspace, std::size_t needed) const {
    const Footprint scratch{reinterpret_cast<std::uintptr_t>(workspace.data), 1, 0,
                            static_cast<std::int64_t>(needed)};
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::optional<Footprint> footprint = footprint_of(args[i]);
      if (footprint && footprints_overlap(scratch, *footprint))
        fail("the workspace shares memory with " + labels[i]);
    }
  }

  LaunchShape validate(KernelArgs args) const {
    if (args.size() != program.slots.size()) {
      fail("expected " + std::to_string(program.slots.size()) + " arguments (" + slot_list +
           "), got " + std::to_string(args.size()));
    }
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind() != kind_for(program.slots[i]))
        fail(labels[i] + " needs " + expected_kind(program.slots[i]));
    }
    LaunchShape shape;
    // The first Tile without a fixed dtype sets the row dtype, the first such Column the
    // parameter dtype; the first Tile sets the shape.
    std::optional<std::size_t> first_tile, io_source, param_source;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const ir::Slot& slot = program.slots[i];
      if (slot.shape == ir::Shape::tile && !first_tile) first_tile = i;
      if (slot.shape == ir::Shape::tile && !slot.dtype && !io_source) io_source = i;
      if (slot.shape == ir::Shape::column && !slot.dtype && !param_source) param_source = i;
    }
    const TensorView& first = args[*first_tile].view();
    shape.rows = first.rows;
    shape.cols = first.cols;
    shape.row_stride = first.row_stride;
    shape.io_dtype = io_source ? args[*io_source].view().dtype : first.dtype;
    shape.param_dtype = param_source ? args[*param_source].view().dtype : shape.io_dtype;
    const std::string& first_label = labels[*first_tile];
    if (shape.rows < 0)
      fail(first_label + " has negative rows (" + std::to_string(shape.rows) + ")");
    if (shape.cols < 1)
      fail(first_label + " has cols " + std::to_string(shape.cols) + "; need at least 1");
    const bool empty = shape.rows == 0;
    // The row tensors' placements, for alignment peeling. A program with more row tensors than
    // this has more kernel parameters than a launch takes (it fails below).
    std::array<RowPlacement, kMaxKernelParams / 2> placements;
    std::size_t row_tensors = 0;
    int max_vec = 16;
    auto narrow_vec = [&max_vec](std::uintptr_t address_or_bytes, std::size_t element) {
      while (max_vec > 1 && address_or_bytes % (max_vec * element) != 0) max_vec /= 2;
    };
    auto check_pointer = [&](const void* data, std::size_t size, const std::string& what) {
      if (!data) fail(what + " is a null pointer");
      if (!aligned(data, size))
        fail(what + " is misaligned: its address must be a multiple of " + std::to_string(size) +
             " bytes");
    };
    for (std::size_t i = 0; i < args.size(); ++i) {
      const ir::Slot& slot = program.slots[i];
      const std::string& what = labels[i];
      const TensorView& t = args[i].view();
      const DType expected = ir::storage_dtype(slot, shape.io_dtype, shape.param_dtype);
      switch (slot.shape) {
        case ir::Shape::tile: {
          if (t.dtype != expected) {
            fail(what + " has dtype " + std::string(dtype_name(t.dtype)) +
                 (slot.dtype ? " but needs " : " but the row tensors are ") +
                 std::string(dtype_name(expected)));
          }
          if (t.rows != shape.rows || t.cols != shape.cols) {
            fail(what + " is [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                 "] but '" + program.slots[*first_tile].name + "' is [" +
                 std::to_string(shape.rows) + ", " + std::to_string(shape.cols) + "]");
          }
          if (t.row_stride < t.cols) {
            fail(what + " has row_stride " + std::to_string(t.row_stride) + " < cols " +
                 std::to_string(t.cols));
          }
          if (t.rows > 1 &&
              t.row_stride > (std::numeric_limits<std::int64_t>::max() / 4) / t.rows) {
            fail(what + " spans more elements than 64-bit indexing allows");
          }
          if (empty) break;
          const std::size_t size = dtype_size(t.dtype);
          check_pointer(t.data, size, what);
          narrow_vec(reinterpret_cast<std::uintptr_t>(t.data), size);
          narrow_vec(static_cast<std::uintptr_t>(t.row_stride) * size, size);
          if (row_tensors < placements.size())
            placements[row_tensors++] = {reinterpret_cast<std::uintptr_t>(t.data), size,
                                         t.row_stride};
          break;
        }
        case ir::Shape::column: {
          if (t.dtype != expected) {
            fail(what + " has dtype " + std::string(dtype_name(t.dtype)) + " but needs " +
                 std::string(dtype_name(expected)));
          }
          if (t.cols != shape.cols)
            fail(what + " has size " + std::to_string(t.cols) + " but the rows have " +
                 std::to_string(shape.cols) + " columns");
          if (empty && slot.role == ir::Role::read) break;
          const std::size_t size = dtype_size(t.dtype);
          check_pointer(t.data, size, what);
          if (slot.role == ir::Role::read)
            narrow_vec(reinterpret_cast<std::uintptr_t>(t.data), size);
          break;
        }
        case ir::Shape::row_scalar:
          if (!t.data && slot.role == ir::Role::written) break;  // not wanted
          if (t.rows != shape.rows)
            fail(what + " has " + std::to_string(t.rows) + " rows but the input has " +
                 std::to_string(shape.rows));
          if (empty) break;
          check_pointer(t.data, sizeof(float), what);
          break;
        case ir::Shape::scalar:
          if (slot.role == ir::Role::written) check_pointer(t.data, sizeof(float), what);
          break;
      }
    }
    refuse_shared_outputs(args);
    const int widest = widest_vec(shape.io_dtype, shape.param_dtype);
    shape.max_vec = std::min(max_vec, widest);
    // Alignment peeling: rows that start misaligned (N not a multiple of the vector width with
    // contiguous rows, an odd row stride, an offset base pointer) keep wide vectors when every
    // row tensor is misaligned alike; column parameters are read at any alignment then. A
    // kernel that loops over row blocks keeps one shift per thread, which its grid preserves
    // (grid_for).
    shape.peel_vec = peels_rows(lowered, shape.cols, widest)
                         ? std::max(shape.max_vec,
                                    peel_vec({placements.data(), row_tensors}, shape.rows, widest))
                         : shape.max_vec;
    return shape;
  }

  // Why this device cannot run a kernel the code generator accepts, if it cannot.
  std::optional<std::string> device_problem(const KernelSpec& spec) const {
    const std::size_t smem = dynamic_shared_memory_bytes(lowered, spec);
    if (smem > runtime->limits.shared_memory_per_block) {
      return "it needs " + std::to_string(smem) + " bytes of shared memory; the device allows " +
             std::to_string(runtime->limits.shared_memory_per_block);
    }
    if (spec.global_exchange) return std::nullopt;  // a software cluster runs anywhere
    // A program that sums across rows, on a device that cannot run its software cluster.
    if (spec.config.ctas_per_row > runtime->limits.cluster_ctas && plan.needs_finish() &&
        !runs_software_clusters(plan, runtime->limits)) {
      return "it splits rows across " + std::to_string(spec.config.ctas_per_row) +
             " CTAs, more than this device's clusters hold, as a software cluster, which needs "
             "cooperative launches; the driver reports them off for " +
             runtime->info.label();
    }
    if (spec.config.ctas_per_row > 1 && !runtime->limits.clusters()) {
      if (runtime->info.cluster_launch && !nvrtc_assembles_clusters(nvrtc_version())) {
        return "it splits rows across a thread-block cluster, whose row exchange NVRTC " +
               nvrtc_version() + " cannot assemble (NVRTC 12.1 or later can)";
      }
      // (The limits' arch: another GPU's under RuntimeOptions::heuristic_device.)
      return "it splits rows across a thread-block cluster, which needs sm_90 or later; this "
             "device is " +
             runtime->limits.arch();
    }
    if (spec.config.ctas_per_row > runtime->limits.cluster_ctas) {
      return "it splits rows across a cluster of " + std::to_string(spec.config.ctas_per_row) +
             " CTAs; this device (" + runtime->info.arch() + ") runs clusters of at most " +
             std::to_string(runtime->limits.cluster_ctas);
    }
    return std::nullopt;
  }

  ResolvedConfig resolve(const LaunchShape& shape) const {
    const Runtime::Impl& rt = *runtime;
    // Why a tuned configuration cannot run these rows on this device, if it cannot.
    auto unusable = [&](const KernelConfig& config) -> std::optional<std::string> {
      const KernelSpec spec = fit_shared_memory(lowered, shape.spec(config), rt.limits);
      if (auto problem = config_problem(lowered, spec)) return problem;
      return device_problem(spec);
    };
    // A tuned vec wider than the launch allows (with peeling where the kernel can peel).
    auto narrowed = [&](KernelConfig config) {
      config.vec = std::min(config.vec, shape.peel_vec);
      return config;
    };
    if (rt.options.use_tuning_database) {
      const TuningLookup found =
          rt.tuning.lookup(key(shape.io_dtype, shape.param_dtype, shape.cols, shape.rows));
      if (found.entry) {
        try {
          const KernelConfig config = narrowed(reflect::from_json<KernelConfig>(
              found.entry->config, "tuning entry config", kKernelConfigLaterFields));
          // Not silently: an entry from another version, or for rows these do not match, would
          // otherwise look tuned while the heuristic runs. The entry stays in the database.
          const std::optional<std::string> problem = unusable(config);
          if (!problem) {
            return {config,
                    found.source == TuningLookup::Source::exact ? ConfigSource::tuned_exact
                                                                : ConfigSource::tuned_nearest_m,
                    shape.peel_rows(config), found.file, found.origin == TuningOrigin::shipped};
          }
          // The shipped databases were tuned on contiguous rows: where these rows (misaligned,
          // say) rule an entry out, the heuristic is what the user asked for by asking nothing.
          if (found.origin == TuningOrigin::user) {
            report_once(program.name + ": not using the tuned configuration " + config.describe() +
                        " for N = " + std::to_string(shape.cols) + ": " + *problem +
                        "; the heuristic configuration runs instead");
          }
        } catch (const Error& e) {
          report_once(program.name + ": ignoring a tuning entry: " + e.what());
        }
      }
    }
    const KernelConfig config = without_heavy_spills(
        heuristic_config(lowered, shape.io_dtype, shape.param_dtype, shape.cols, rt.limits,
                         shape.peel_vec, shape.peel_vec > shape.max_vec, shape.rows),
        shape);
    return {config, ConfigSource::heuristic, shape.peel_rows(config)};
  }

  // The configuration the runtime runs for the heuristic's (heuristics.hpp): one whose
  // compile spills little.
  KernelConfig without_heavy_spills(const KernelConfig& heuristic, const LaunchShape& shape) const {
    return tilenorm::without_heavy_spills(
        heuristic, [&](const KernelConfig& config) -> std::optional<int> {
          // Compiled as kernel_for() will build it, so that the load finds the compile.
          KernelSpec spec = fit_shared_memory(lowered, shape.spec(config), runtime->limits);
          if (config_problem(lowered, spec) || device_problem(spec)) return std::nullopt;
          spec.early_columns = fetches_columns_early(spec, shape);
          try {
            return runtime->spill_bytes(generate_cuda(lowered, spec));
          } catch (const Error&) {  // NVRTC refused it: no candidate (the heuristic's own
            return std::nullopt;    // compile fails again, with its message, at the load)
          }
        });
  }

  void report_once(const std::string& message) const {
    {
      std::lock_guard lock(reported_mutex);
      if (!reported.insert(message).second) return;
    }
    warn(message);
  }

  TuningKey key(DType io, DType param, std::int64_t n, std::int64_t rows) const {
    const auto& info = runtime->info;
    return {info.name, info.cc_major,   info.cc_minor,
            hash,      kCodegenVersion, tuning_dtype_key(io, param),
            n,         m_bucket(rows)};
  }

  const LoadedKernel& kernel_for(const LaunchShape& shape, const KernelConfig* forced) const {
    const LaunchKey key{shape.io_dtype,
                        shape.param_dtype,
                        shape.cols,
                        m_bucket(shape.rows),
                        shape.max_vec,
                        shape.peel_vec,
                        shape.shift_period(shape.peel_vec),
                        forced ? std::optional<KernelConfig>(*forced) : std::nullopt};
    {
      std::shared_lock lock(mutex);
      if (auto it = kernels.find(key); it != kernels.end()) return it->second;
    }
    std::unique_lock lock(mutex);
    if (auto it = kernels.find(key); it != kernels.end()) return it->second;
    LoadedKernel loaded;
    if (forced) {
      KernelConfig config = *forced;
      if (config.vec > shape.peel_vec) {
        fail("the requested vec " + std::to_string(config.vec) + " needs " +
             std::to_string(config.vec * dtype_size(shape.io_dtype)) +
             "-byte alignment, which these pointers or strides do not have" +
             (plan.persistent ? std::string()
                              : " (nor do the row tensors share one misalignment, which "
                                "alignment peeling would need)"));
      }
      loaded.resolved = {config, ConfigSource::explicit_config, shape.peel_rows(config)};
    } else {
      loaded.resolved = resolve(shape);
    }
    KernelSpec spec =
        fit_shared_memory(lowered, shape.spec(loaded.resolved.config), runtime->limits);
    if (auto problem = device_problem(spec))
      fail("configuration " + spec.config.describe() + " cannot run: " + *problem);
    spec.early_columns = fetches_columns_early(spec, shape);
    // Peeled rows that whole periods of their shifts would keep off many resident row blocks
    // (see peeled_grid) take the kernel that finds each row's shift, where it fits the device.
    // Automatically, that takes the resident count of the kernel at one shift per thread, so
    // it loads that one first.
    KernelSpec per_row = spec;
    per_row.shift_per_row = true;
    const PeeledRowShifts shifts = can_shift_per_row(lowered, per_row) && !device_problem(per_row)
                                       ? runtime->options.peeled_row_shifts
                                       : PeeledRowShifts::per_thread;
    load(loaded, shifts == PeeledRowShifts::per_row ? per_row : spec);
    const std::int64_t period = shape.shift_period(spec.config.vec);
    if (shifts == PeeledRowShifts::automatic && shift_per_row_pays(loaded.max_grid, period)) {
      // Unless its own registers keep as many row blocks off the SMs as the periods would (a
      // class-major LayerNorm recompute without bias, bf16 N = 65537: 151 registers, 7
      // clusters where whole periods keep 8 of 14; 31.1% of the copy against 40.5%, H100).
      // (The runtime keeps every module it loaded, so the copy's functions stay valid.)
      const LoadedKernel per_thread = loaded;
      load(loaded, per_row);
      if (loaded.max_grid <= per_thread.max_grid / period * period) loaded = per_thread;
    }
    for (const ir::Slot& slot : lowered.program.slots) {
      if (slot.shape == ir::Shape::tile)
        loaded.row_bytes += dtype_size(ir::storage_dtype(slot, shape.io_dtype, shape.param_dtype));
    }
    return kernels.emplace(key, std::move(loaded)).first->second;
  }

  // Whether the kernel of `spec` fetches its column parameters before the row loop.
  bool fetches_columns_early(const KernelSpec& spec, const LaunchShape& shape) const {
    switch (runtime->options.early_columns) {
      case EarlyColumns::never:
        return false;
      case EarlyColumns::always:
        return can_fetch_columns_early(lowered, spec);
      case EarlyColumns::automatic:
        break;
    }
    return tilenorm::fetches_columns_early(lowered, spec, shape.rows, runtime->info);
  }

  // Generates, compiles and loads the kernels of `spec` into `loaded`, and reads what their
  // grid needs from the driver.
  void load(LoadedKernel& loaded, const KernelSpec& spec) const {
    loaded.generated = generate_cuda(lowered, spec);
    if (loaded.generated.params.size() > kMaxKernelParams)
      fail("has more than 64 kernel parameters");
    loaded.function = runtime->load(loaded.generated, &loaded.finish);
    driver::check(driver::api().cuFuncGetAttribute(&loaded.registers, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                                   loaded.function),
                  "cuFuncGetAttribute for " + loaded.generated.name);
    if (loaded.generated.persistent) {
      loaded.max_grid = resident_row_blocks(loaded);
      loaded.max_fold = max_fold(loaded);
    }
  }

  // How many row blocks (CTAs, or clusters of CTAs) of a persistent kernel fit on the device
  // at once. Clusters are placed within a GPC, so their count comes from the driver, not from
  // CTAs per SM times SMs.
  int resident_row_blocks(const LoadedKernel& k) const {
    const GeneratedKernel& g = k.generated;
    // A software cluster is any ctas_per_row consecutive CTAs: whole ones of those resident.
    if (g.ctas_per_row == 1 || g.global_exchange) {
      driver::ScopedContext scope(runtime->context);
      int per_sm = 0;
      driver::check(driver::api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        &per_sm, k.function, g.threads_per_block, g.dynamic_shared_bytes),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor for " + g.name);
      const int resident = std::max(1, per_sm) * runtime->limits.multiprocessors / g.ctas_per_row;
      if (resident < 1) {
        fail("no software cluster of " + std::to_string(g.ctas_per_row) + " CTAs of " +
             std::to_string(g.threads_per_block) + " threads fits on this device at once");
      }
      return resident;
    }
    const int clusters = resident_clusters(k, g.ctas_per_row);
    if (clusters < 1) {
      fail("no cluster of " + std::to_string(g.ctas_per_row) + " CTAs of " +
           std::to_string(g.threads_per_block) + " threads fits on this device");
    }
    return clusters;
  }

  // The cluster in which a persistent kernel folds its column partial sums: the largest of 8,
  // 4 and 2 CTAs that divides its grid and keeps all of it resident (clusters sit within a
  // GPC, so a large one can leave SMs idle), else 1 (no cluster; also for a kernel that folding
  // does not pay for, folding_kernel_pays, so that loading it asks no cluster occupancy).
  int max_fold(const LoadedKernel& k) const {
    if (!k.generated.folds_partials ||
        !folding_kernel_pays(k.generated.rows_per_cta, k.generated.plan.column_partials) ||
        !runtime->options.fold_partials || !runtime->limits.clusters())
      return 1;
    for (int ctas = kPortableClusterCtas; ctas > 1; ctas /= 2) {
      if (k.max_grid % ctas == 0 && resident_clusters(k, ctas) * ctas >= k.max_grid) return ctas;
    }
    return 1;
  }

  // How many clusters of `ctas` CTAs of the main kernel fit on the device at once.
  int resident_clusters(const LoadedKernel& k, int ctas) const {
    const GeneratedKernel& g = k.generated;
    driver::ScopedContext scope(runtime->context);
    CUlaunchAttribute cluster{};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = static_cast<unsigned>(ctas);
    cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
    CUlaunchConfig config{};
    config.gridDimX = static_cast<unsigned>(ctas);
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(g.threads_per_block);
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(g.dynamic_shared_bytes);
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    driver::check(driver::api().cuOccupancyMaxActiveClusters(&clusters, k.function, &config),
                  "cuOccupancyMaxActiveClusters for " + g.name);
    return clusters;
  }

  // The main kernel's grid, and the CTAs per cluster that fold their partial sums.
  struct MainGrid {
    std::int64_t ctas = 0;
    int fold = 1;
    // Partial rows per row block: more than one for a kernel that sums across rows at every
    // row's shift (class_major_slots).
    std::int64_t slots = 1;
  };

  // One row block (a CTA, or a cluster of ctas_per_row CTAs) per block of rows_per_cta rows,
  // or for a persistent kernel no more than fit on the device at once (each then loops over
  // row blocks). A launch with no rows still gets one row block: a program that sums across
  // rows writes zero sums then.
  static MainGrid grid_for(const LoadedKernel& k, const LaunchShape& shape) {
    const std::int64_t row_blocks = std::max<std::int64_t>(
        1, (shape.rows + k.generated.rows_per_cta - 1) / k.generated.rows_per_cta);
    std::int64_t blocks = row_blocks;
    if (k.generated.persistent) blocks = std::min<std::int64_t>(blocks, k.max_grid);
    // A peeled kernel that loops over row blocks keeps each thread's first shift, unless it
    // finds each row's (shift_per_row; a peeled kernel that sums across rows holds one row per
    // CTA, and does not fold).
    if (k.generated.persistent && k.resolved.peel_rows && !k.generated.shift_per_row) {
      blocks = peeled_grid(blocks, row_blocks, shape.row_stride * k.generated.rows_per_cta,
                           k.resolved.config.vec);
    }
    const std::int64_t partial_bytes = blocks * k.generated.partials_per_cta *
                                       k.generated.plan.column_partials *
                                       static_cast<std::int64_t>(sizeof(float));
    const int fold = folding_pays(partial_bytes, shape.rows, k.row_bytes) ? k.max_fold : 1;
    // Whole folding clusters; max_grid is a multiple of them, so this stays resident.
    blocks = (blocks + fold - 1) / fold * fold;
    // A kernel that sums across rows at every row's shift walks the rows class by class, with
    // a partial row for each class a row block meets; the period is the kernel's own (from the
    // stride alone, also for a single row).
    const std::int64_t slots =
        k.generated.shift_per_row && k.generated.plan.needs_finish()
            ? class_major_slots(shape.rows, blocks,
                                tilenorm::shift_period(shape.row_stride, k.resolved.config.vec))
            : 1;
    return {blocks * k.generated.ctas_per_row, fold, slots};
  }
  static std::int64_t partial_rows_for(const LoadedKernel& k, MainGrid grid) {
    return grid.ctas / k.generated.ctas_per_row / grid.fold * k.generated.partials_per_cta *
           grid.slots;
  }
  // A software cluster's exchange follows the partial rows, 16-byte aligned.
  static std::size_t exchange_offset_floats(const LoadedKernel& k, MainGrid grid,
                                            std::int64_t cols) {
    const std::size_t partials = k.generated.plan.workspace_floats(partial_rows_for(k, grid), cols);
    return (partials + 3) / 4 * 4;
  }
  static std::size_t workspace_for(const LoadedKernel& k, MainGrid grid, std::int64_t cols) {
    if (k.generated.exchange_floats_per_cluster == 0)
      return k.generated.plan.workspace_floats(partial_rows_for(k, grid), cols) * sizeof(float);
    const auto clusters = static_cast<std::size_t>(grid.ctas / k.generated.ctas_per_row);
    return (exchange_offset_floats(k, grid, cols) +
            clusters * k.generated.exchange_floats_per_cluster) *
           sizeof(float);
  }

  std::size_t workspace_bytes(KernelArgs args, const KernelConfig* forced) const {
    const LaunchShape shape = validate(args);
    if (!plan.needs_finish()) return 0;
    const LoadedKernel& k = kernel_for(shape, forced);
    return workspace_for(k, grid_for(k, shape), shape.cols);
  }

  LaunchGrid launch_grid(KernelArgs args, const KernelConfig* forced) const {
    const LaunchShape shape = validate(args);
    const LoadedKernel& k = kernel_for(shape, forced);
    const MainGrid grid = grid_for(k, shape);
    return {grid.ctas,
            k.generated.threads_per_block,
            k.generated.ctas_per_row,
            grid.fold,
            k.generated.persistent ? k.max_grid : 0,
            k.registers,
            k.generated.dynamic_shared_bytes,
            k.generated.shift_per_row,
            k.generated.early_columns,
            k.generated.global_exchange};
  }

  void launch(KernelArgs args, Stream stream, const KernelConfig* forced,
              Workspace workspace) const {
    const LaunchShape shape = validate(args);
    if (shape.rows == 0 && !plan.needs_finish()) return;
    const LoadedKernel& k = kernel_for(shape, forced);
    const MainGrid grid = grid_for(k, shape);
    if (grid.ctas > std::numeric_limits<std::int32_t>::max())
      fail("too many rows for one launch: " + std::to_string(shape.rows));
    const std::size_t needed = workspace_for(k, grid, shape.cols);
    if (needed > 0 && (!workspace.data || workspace.bytes < needed)) {
      fail("needs a workspace of " + std::to_string(needed) +
           " bytes (see workspace_bytes()), got " +
           std::to_string(workspace.data ? workspace.bytes : 0));
    }
    if (needed > 0 && !aligned(workspace.data, 16)) fail("the workspace must be 16-byte aligned");
    if (needed > 0) refuse_shared_workspace(args, workspace, needed);
    const long long partial_rows = partial_rows_for(k, grid);

    union Value {
      CUdeviceptr pointer;
      long long integer;
      float real;
    };
    std::array<Value, kMaxKernelParams> values;
    std::array<void*, kMaxKernelParams> pointers;
    auto address = [](const void* p) {
      return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
    };
    const CUdeviceptr exchange =
        k.generated.global_exchange
            ? address(workspace.data) + exchange_offset_floats(k, grid, shape.cols) * sizeof(float)
            : 0;
    auto fill = [&](const std::vector<KernelParam>& params) {
      for (std::size_t i = 0; i < params.size(); ++i) {
        const KernelParam& param = params[i];
        Value& v = values[i];
        switch (param.kind) {
          case ParamKind::slot_pointer:
            v.pointer = address(args[param.slot].view().data);
            break;
          case ParamKind::slot_stride:
            v.integer = args[param.slot].view().row_stride;
            break;
          case ParamKind::slot_value:
            v.real = args[param.slot].value();
            break;
          case ParamKind::rows:
            v.integer = shape.rows;
            break;
          case ParamKind::workspace:
            v.pointer = address(workspace.data);
            break;
          case ParamKind::partial_rows:
            v.integer = partial_rows;
            break;
          case ParamKind::exchange:
            v.pointer = exchange;
            break;
        }
        pointers[i] = &v;
      }
    };
    driver::ScopedContext scope(runtime->context);
    fill(k.generated.params);
    const auto cu_stream = reinterpret_cast<CUstream>(stream);
    if (k.generated.exchange_counts > 0) {
      // The arrival counts start at zero in every launch (a memset node in a captured graph).
      const auto clusters = static_cast<std::size_t>(grid.ctas / k.generated.ctas_per_row);
      driver::check(driver::api().cuMemsetD8Async(
                        exchange, 0,
                        clusters * static_cast<std::size_t>(k.generated.exchange_counts) *
                            sizeof(std::uint32_t),
                        cu_stream),
                    "cuMemsetD8Async (the exchange counts of " + k.generated.name + ")");
    }
    // The finishing kernel follows its main kernel either way.
    const bool programmatic =
        runtime->programmatic_launch() &&
        launches_programmatically(k.generated.persistent, k.generated.global_exchange,
                                  grid.ctas / k.generated.ctas_per_row, k.max_grid);
    const CUresult launched =
        launch_kernel(k.function, static_cast<unsigned>(grid.ctas),
                      static_cast<unsigned>(k.generated.threads_per_block),
                      static_cast<unsigned>(k.generated.dynamic_shared_bytes),
                      k.generated.global_exchange ? 1 : k.generated.ctas_per_row * grid.fold,
                      k.generated.global_exchange, programmatic, cu_stream, pointers.data());
    if (launched != CUDA_SUCCESS) driver::check(launched, "cuLaunchKernel " + k.generated.name);
    if (!k.generated.finish) return;
    fill(k.generated.finish->params);
    const auto finish_grid = static_cast<unsigned>(
        (shape.cols + k.generated.finish_columns_per_cta - 1) / k.generated.finish_columns_per_cta);
    const CUresult finished = launch_kernel(
        k.finish, finish_grid, static_cast<unsigned>(k.generated.finish->threads_per_block), 0, 1,
        false, runtime->programmatic_launch(), cu_stream, pointers.data());
    if (finished != CUDA_SUCCESS)
      driver::check(finished, "cuLaunchKernel " + k.generated.finish->name);
  }
};

Norm::Norm(std::shared_ptr<State> state) : state_(std::move(state)) {}
const ir::Program& Norm::program() const {
  return state_->program;
}
const std::string& Norm::program_hash() const {
  return state_->hash;
}
const LoweredProgram& Norm::lowered() const {
  return state_->lowered;
}
void Norm::launch(KernelArgs args, Stream stream, Workspace workspace) const {
  state_->launch(args, stream, nullptr, workspace);
}
void Norm::launch(KernelArgs args, Stream stream, const KernelConfig& config,
                  Workspace workspace) const {
  state_->launch(args, stream, &config, workspace);
}
std::size_t Norm::workspace_bytes(KernelArgs args) const {
  return state_->workspace_bytes(args, nullptr);
}
std::size_t Norm::workspace_bytes(KernelArgs args, const KernelConfig& config) const {
  return state_->workspace_bytes(args, &config);
}
ResolvedConfig Norm::resolve(KernelArgs args) const {
  return state_->resolve(state_->validate(args));
}
LaunchGrid Norm::launch_grid(KernelArgs args) const {
  return state_->launch_grid(args, nullptr);
}
LaunchGrid Norm::launch_grid(KernelArgs args, const KernelConfig& config) const {
  return state_->launch_grid(args, &config);
}
TuningKey Norm::tuning_key(DType io_dtype, DType param_dtype, std::int64_t n,
                           std::int64_t rows) const {
  return state_->key(io_dtype, param_dtype, n, rows);
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->options = options;
  impl_->info = driver::device_info(options.device);
  impl_->arch = target_arch(impl_->info.compute_capability(), impl_->info.label());
  impl_->context = driver::primary_context(options.device);
  impl_->limits = device_limits(impl_->info);
  if (!options.heuristic_device.empty()) {
    impl_->limits = emulated_limits(known_device(options.heuristic_device), impl_->limits);
  }
  if (options.shared_memory_per_block > 0) {
    impl_->limits.shared_memory_per_block =
        std::min(impl_->limits.shared_memory_per_block, options.shared_memory_per_block);
  }
  // Tuned entries were timed on this GPU, not on the one emulated.
  if (options.use_tuning_database && options.heuristic_device.empty()) {
    impl_->tuning = load_default_tuning_databases();
  }
}

Runtime::~Runtime() = default;

Norm Runtime::load(const ir::Program& program) {
  auto state = std::make_shared<Norm::State>();
  state->runtime = impl_;
  state->program = program;
  state->lowered = lower(program);
  state->hash = program.hash();
  state->plan = plan_kernels(state->lowered);
  for (const ir::Slot& slot : program.slots) {
    state->labels.push_back(std::string(ir::slot_kind(slot)) + " '" + slot.name + "'");
    state->slot_list += (state->slot_list.empty() ? "" : ", ") + slot.name;
  }
  return Norm(std::move(state));
}

const Norm& Runtime::load_named(std::string_view name, const std::function<ir::Program()>& make) {
  {
    std::lock_guard lock(impl_->mutex);
    if (auto it = impl_->builtins.find(name); it != impl_->builtins.end()) return it->second;
  }
  Norm norm = load(make());
  std::lock_guard lock(impl_->mutex);
  return impl_->builtins.emplace(std::string(name), std::move(norm)).first->second;
}

std::string Runtime::device_name() const {
  return impl_->info.name;
}
std::string Runtime::arch() const {
  return impl_->arch;
}
int Runtime::compute_capability_major() const {
  return impl_->info.cc_major;
}
int Runtime::compute_capability_minor() const {
  return impl_->info.cc_minor;
}
int Runtime::multiprocessors() const {
  return impl_->info.multiprocessors;
}
std::size_t Runtime::shared_memory_per_block() const {
  return impl_->limits.shared_memory_per_block;
}
Runtime::Statistics Runtime::statistics() const {
  return {impl_->kernels_loaded.load(), impl_->nvrtc_compiles.load()};
}

}  // namespace tilenorm
