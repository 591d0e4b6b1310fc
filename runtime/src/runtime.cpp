#include "tilenorm/runtime/runtime.hpp"

#include <cuda.h>

#include <array>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/runtime/disk_cache.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
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

std::string tuning_dtype_key(DType io_dtype, DType param_dtype) {
  std::string key(dtype_name(io_dtype));
  if (param_dtype != io_dtype) key += "/" + std::string(dtype_name(param_dtype));
  return key;
}

BuiltKernel build_kernel(const LoweredProgram& program, const KernelSpec& spec,
                         const std::string& arch, bool use_disk_cache) {
  BuiltKernel built;
  built.generated = generate_cuda(program, spec);
  const CompileRequest request{built.generated.full_source(), built.generated.name, arch, {}};
  std::optional<DiskCache> cache;
  if (use_disk_cache) cache.emplace(cache_directory());
  CompiledKernel compiled = compile_cached(request, cache ? &*cache : nullptr);
  built.cubin = std::move(compiled.cubin);
  built.registers = compiled.registers;
  built.spill_bytes = compiled.spill_store_bytes + compiled.spill_load_bytes;
  built.from_disk_cache = compiled.from_disk_cache;
  return built;
}

namespace {

constexpr std::size_t kMaxKernelParams = 64;
constexpr std::size_t kDefaultDynamicSharedLimit = 48 * 1024;

// What validation learned about a launch.
struct LaunchShape {
  DType io_dtype = DType::bf16;
  DType param_dtype = DType::bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  int max_vec = 1;  // widest vector the pointers' and strides' alignment allows
};

struct LaunchKey {
  DType io_dtype;
  DType param_dtype;
  std::int64_t n;
  std::int64_t m_bucket;
  int max_vec;
  std::optional<KernelConfig> forced;
  bool operator==(const LaunchKey& o) const {
    return io_dtype == o.io_dtype && param_dtype == o.param_dtype && n == o.n &&
           m_bucket == o.m_bucket && max_vec == o.max_vec && forced == o.forced;
  }
};

struct LaunchKeyHash {
  std::size_t operator()(const LaunchKey& k) const {
    std::size_t h = std::hash<std::int64_t>()(k.n) ^ (std::hash<std::int64_t>()(k.m_bucket) << 1);
    h ^= (static_cast<std::size_t>(k.io_dtype) << 3) ^
         (static_cast<std::size_t>(k.param_dtype) << 5) ^
         (static_cast<std::size_t>(k.max_vec) << 7);
    if (k.forced) {
      h ^= std::hash<int>()(k.forced->threads_per_row * 131 + k.forced->rows_per_cta * 17 +
                            k.forced->vec * 3 + k.forced->row_storage);
    }
    return h;
  }
};

struct LoadedKernel {
  CUfunction function = nullptr;
  GeneratedKernel generated;
  ResolvedConfig resolved;
};

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  driver::DeviceInfo info;
  CUcontext context = nullptr;
  DeviceLimits limits;
  DiskCache disk{cache_directory()};
  TuningDatabaseStack tuning;
  std::mutex mutex;                                   // guards modules and builtins
  std::unordered_map<std::string, CUmodule> modules;  // by compile cache key, in `context`
  std::map<std::string, Norm, std::less<>> builtins;  // load_named, by name
  std::atomic<std::uint64_t> kernels_loaded{0};
  std::atomic<std::uint64_t> nvrtc_compiles{0};

  CUfunction load(const GeneratedKernel& generated) {
    const CompileRequest request{generated.full_source(), generated.name, info.arch(), {}};
    const std::string key = cache_key(request, nvrtc_version());
    std::lock_guard lock(mutex);
    auto it = modules.find(key);
    if (it == modules.end()) {
      const CompiledKernel compiled = compile_cached(request, &disk);
      if (!compiled.from_disk_cache) ++nvrtc_compiles;
      driver::ScopedContext scope(context);
      CUmodule module = nullptr;
      driver::check(driver::api().cuModuleLoadData(&module, compiled.cubin.data()),
                    "cuModuleLoadData for kernel " + generated.name);
      it = modules.emplace(key, module).first;
      ++kernels_loaded;
    }
    CUfunction function = nullptr;
    driver::check(driver::api().cuModuleGetFunction(&function, it->second, generated.name.c_str()),
                  "cuModuleGetFunction " + generated.name);
    if (generated.dynamic_shared_bytes > kDefaultDynamicSharedLimit) {
      driver::check(driver::api().cuFuncSetAttribute(
                        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        static_cast<int>(generated.dynamic_shared_bytes)),
                    "cuFuncSetAttribute (dynamic shared memory) for " + generated.name);
    }
    return function;
  }
};

struct Norm::State {
  std::shared_ptr<Runtime::Impl> runtime;
  ir::Program program;
  LoweredProgram lowered;
  std::string hash;
  // Names and labels for error messages, made once so that validating a launch allocates
  // nothing unless it fails.
  std::vector<std::string> output_names, stat_names;
  std::vector<std::string> input_labels, output_labels, column_labels, stat_labels;
  mutable std::shared_mutex mutex;
  mutable std::unordered_map<LaunchKey, LoadedKernel, LaunchKeyHash> kernels;

  [[noreturn]] void fail(const std::string& what) const { throw Error(program.name + ": " + what); }

  LaunchShape validate(const KernelArgs& args) const {
    auto expect_count = [&](std::size_t got, const std::vector<std::string>& names,
                            const char* kind) {
      if (got != names.size()) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        fail("expected " + std::to_string(names.size()) + " " + kind + " (" + list + "), got " +
             std::to_string(got));
      }
    };
    expect_count(args.row_inputs.size(), program.row_inputs, "row inputs");
    expect_count(args.row_outputs.size(), output_names, "row outputs");
    expect_count(args.columns.size(), program.columns, "columns");
    expect_count(args.row_stats.size(), stat_names, "row statistics");
    expect_count(args.scalars.size(), program.scalars, "scalars");

    LaunchShape shape;
    const TensorView& first = args.row_inputs[0];
    shape.io_dtype = first.dtype;
    shape.rows = first.rows;
    shape.cols = first.cols;
    if (shape.rows < 0)
      fail("row input '" + program.row_inputs[0] + "' has negative rows (" +
           std::to_string(shape.rows) + ")");
    if (shape.cols < 1)
      fail("row input '" + program.row_inputs[0] + "' has cols " + std::to_string(shape.cols) +
           "; need at least 1");
    const bool empty = shape.rows == 0;
    int max_vec = 16;
    auto narrow_vec = [&max_vec](std::uintptr_t address_or_bytes, std::size_t element) {
      while (max_vec > 1 && address_or_bytes % (max_vec * element) != 0) max_vec /= 2;
    };
    auto check_rows = [&](const TensorView& t, const std::string& what) {
      if (t.dtype != shape.io_dtype) {
        fail(what + " has dtype " + std::string(dtype_name(t.dtype)) + " but the row tensors are " +
             std::string(dtype_name(shape.io_dtype)));
      }
      if (t.rows != shape.rows || t.cols != shape.cols) {
        fail(what + " is [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "] but '" +
             program.row_inputs[0] + "' is [" + std::to_string(shape.rows) + ", " +
             std::to_string(shape.cols) + "]");
      }
      if (t.row_stride < t.cols) {
        fail(what + " has row_stride " + std::to_string(t.row_stride) + " < cols " +
             std::to_string(t.cols));
      }
      if (t.rows > 1 && t.row_stride > (std::numeric_limits<std::int64_t>::max() / 4) / t.rows) {
        fail(what + " spans more elements than 64-bit indexing allows");
      }
      if (empty) return;
      if (!t.data) fail(what + " is a null pointer");
      const std::size_t size = dtype_size(t.dtype);
      if (!aligned(t.data, size))
        fail(what + " is misaligned: its address must be a multiple of " + std::to_string(size) +
             " bytes");
      narrow_vec(reinterpret_cast<std::uintptr_t>(t.data), size);
      narrow_vec(static_cast<std::uintptr_t>(t.row_stride) * size, size);
    };
    for (std::size_t i = 0; i < args.row_inputs.size(); ++i)
      check_rows(args.row_inputs[i], input_labels[i]);
    for (std::size_t i = 0; i < args.row_outputs.size(); ++i)
      check_rows(args.row_outputs[i], output_labels[i]);

    shape.param_dtype = args.columns.empty() ? shape.io_dtype : args.columns[0].dtype;
    for (std::size_t i = 0; i < args.columns.size(); ++i) {
      const ColumnView& c = args.columns[i];
      const std::string& what = column_labels[i];
      if (c.dtype != shape.param_dtype) {
        fail(what + " has dtype " + std::string(dtype_name(c.dtype)) + " but '" +
             program.columns[0] + "' is " + std::string(dtype_name(shape.param_dtype)));
      }
      if (c.size != shape.cols)
        fail(what + " has size " + std::to_string(c.size) + " but the rows have " +
             std::to_string(shape.cols) + " columns");
      if (empty) continue;
      if (!c.data) fail(what + " is a null pointer");
      const std::size_t size = dtype_size(c.dtype);
      if (!aligned(c.data, size))
        fail(what + " is misaligned: its address must be a multiple of " + std::to_string(size) +
             " bytes");
      narrow_vec(reinterpret_cast<std::uintptr_t>(c.data), size);
    }
    for (std::size_t i = 0; i < args.row_stats.size(); ++i) {
      const RowStatView& s = args.row_stats[i];
      if (!s.data) continue;  // not wanted
      const std::string& what = stat_labels[i];
      if (s.rows != shape.rows)
        fail(what + " has " + std::to_string(s.rows) + " rows but the input has " +
             std::to_string(shape.rows));
      if (!aligned(s.data, sizeof(float)))
        fail(what + " is misaligned: its address must be a multiple of 4 bytes");
    }
    shape.max_vec = std::min(max_vec, widest_vec(shape.io_dtype, shape.param_dtype));
    return shape;
  }

  ResolvedConfig resolve(const LaunchShape& shape) const {
    const Runtime::Impl& rt = *runtime;
    auto usable = [&](const KernelConfig& config) {
      const KernelSpec spec{shape.io_dtype, shape.param_dtype, shape.cols, config};
      return !config_problem(lowered, spec) &&
             dynamic_shared_memory_bytes(lowered, spec) <= rt.limits.shared_memory_per_block;
    };
    auto narrowed = [&](KernelConfig config) {
      config.vec = std::min(config.vec, shape.max_vec);
      return config;
    };
    if (rt.options.use_tuning_database) {
      const TuningLookup found =
          rt.tuning.lookup(key(shape.io_dtype, shape.param_dtype, shape.cols, shape.rows));
      if (found.entry) {
        try {
          const KernelConfig config = narrowed(
              reflect::from_json<KernelConfig>(found.entry->config, "tuning entry config"));
          if (usable(config)) {
            return {config, found.source == TuningLookup::Source::exact
                                ? ConfigSource::tuned_exact
                                : ConfigSource::tuned_nearest_m};
          }
        } catch (const Error& e) {
          warn(program.name + ": ignoring a tuning entry: " + e.what());
        }
      }
    }
    return {heuristic_config(lowered, shape.io_dtype, shape.param_dtype, shape.cols, rt.limits,
                             shape.max_vec),
            ConfigSource::heuristic};
  }

  TuningKey key(DType io, DType param, std::int64_t n, std::int64_t rows) const {
    const auto& info = runtime->info;
    return {info.name, info.cc_major,   info.cc_minor,
            hash,      kCodegenVersion, tuning_dtype_key(io, param),
            n,         m_bucket(rows)};
  }

  const LoadedKernel& kernel_for(const LaunchShape& shape, const KernelConfig* forced) const {
    const LaunchKey key{
        shape.io_dtype, shape.param_dtype,
        shape.cols,     m_bucket(shape.rows),
        shape.max_vec,  forced ? std::optional<KernelConfig>(*forced) : std::nullopt};
    {
      std::shared_lock lock(mutex);
      if (auto it = kernels.find(key); it != kernels.end()) return it->second;
    }
    std::unique_lock lock(mutex);
    if (auto it = kernels.find(key); it != kernels.end()) return it->second;
    LoadedKernel loaded;
    if (forced) {
      KernelConfig config = *forced;
      if (config.vec > shape.max_vec) {
        fail("the requested vec " + std::to_string(config.vec) + " needs " +
             std::to_string(config.vec * dtype_size(shape.io_dtype)) +
             "-byte alignment, which these pointers or strides do not have");
      }
      loaded.resolved = {config, ConfigSource::explicit_config};
    } else {
      loaded.resolved = resolve(shape);
    }
    const KernelSpec spec{shape.io_dtype, shape.param_dtype, shape.cols, loaded.resolved.config};
    const std::size_t smem = dynamic_shared_memory_bytes(lowered, spec);
    if (smem > runtime->limits.shared_memory_per_block) {
      fail("configuration " + spec.config.describe() + " needs " + std::to_string(smem) +
           " bytes of shared memory; the device allows " +
           std::to_string(runtime->limits.shared_memory_per_block));
    }
    loaded.generated = generate_cuda(lowered, spec);
    if (loaded.generated.params.size() > kMaxKernelParams)
      fail("has more than 64 kernel parameters");
    loaded.function = runtime->load(loaded.generated);
    return kernels.emplace(key, std::move(loaded)).first->second;
  }

  void launch(const KernelArgs& args, Stream stream, const KernelConfig* forced) const {
    const LaunchShape shape = validate(args);
    if (shape.rows == 0) return;
    const LoadedKernel& k = kernel_for(shape, forced);
    const std::int64_t blocks =
        (shape.rows + k.generated.rows_per_cta - 1) / k.generated.rows_per_cta;
    if (blocks > std::numeric_limits<std::int32_t>::max())
      fail("too many rows for one launch: " + std::to_string(shape.rows));

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
    for (std::size_t i = 0; i < k.generated.params.size(); ++i) {
      const KernelParam& param = k.generated.params[i];
      Value& v = values[i];
      switch (param.kind) {
        case ParamKind::row_input:
          v.pointer = address(args.row_inputs[param.slot].data);
          break;
        case ParamKind::row_input_stride:
          v.integer = args.row_inputs[param.slot].row_stride;
          break;
        case ParamKind::row_output:
          v.pointer = address(args.row_outputs[param.slot].data);
          break;
        case ParamKind::row_output_stride:
          v.integer = args.row_outputs[param.slot].row_stride;
          break;
        case ParamKind::column:
          v.pointer = address(args.columns[param.slot].data);
          break;
        case ParamKind::row_stat:
          v.pointer = address(args.row_stats[param.slot].data);
          break;
        case ParamKind::scalar:
          v.real = args.scalars[param.slot];
          break;
        case ParamKind::rows:
          v.integer = shape.rows;
          break;
      }
      pointers[i] = &v;
    }
    driver::ScopedContext scope(runtime->context);
    const CUresult launched =
        driver::api().cuLaunchKernel(k.function, static_cast<unsigned>(blocks), 1, 1,
                                     static_cast<unsigned>(k.generated.threads_per_block), 1, 1,
                                     static_cast<unsigned>(k.generated.dynamic_shared_bytes),
                                     reinterpret_cast<CUstream>(stream), pointers.data(), nullptr);
    if (launched != CUDA_SUCCESS) driver::check(launched, "cuLaunchKernel " + k.generated.name);
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
void Norm::launch(const KernelArgs& args, Stream stream) const {
  state_->launch(args, stream, nullptr);
}
void Norm::launch(const KernelArgs& args, Stream stream, const KernelConfig& config) const {
  state_->launch(args, stream, &config);
}
ResolvedConfig Norm::resolve(const KernelArgs& args) const {
  const LaunchShape shape = state_->validate(args);
  ResolvedConfig resolved = state_->resolve(shape);
  return resolved;
}
TuningKey Norm::tuning_key(DType io_dtype, DType param_dtype, std::int64_t n,
                           std::int64_t rows) const {
  return state_->key(io_dtype, param_dtype, n, rows);
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->options = options;
  impl_->info = driver::device_info(options.device);
  impl_->context = driver::primary_context(options.device);
  impl_->limits = {impl_->info.shared_memory_per_block_optin, impl_->info.multiprocessors};
  if (options.use_tuning_database) impl_->tuning = load_default_tuning_databases();
}

Runtime::~Runtime() = default;

Norm Runtime::load(const ir::Program& program) {
  auto state = std::make_shared<Norm::State>();
  state->runtime = impl_;
  state->program = program;
  state->lowered = lower(program);
  state->hash = program.hash();
  auto label = [](const char* kind, const std::string& name) {
    return std::string(kind) + " '" + name + "'";
  };
  for (const auto& name : program.row_inputs)
    state->input_labels.push_back(label("row input", name));
  for (const auto& o : program.row_outputs) {
    state->output_names.push_back(o.name);
    state->output_labels.push_back(label("row output", o.name));
  }
  for (const auto& name : program.columns) state->column_labels.push_back(label("column", name));
  for (const auto& o : program.row_stats) {
    state->stat_names.push_back(o.name);
    state->stat_labels.push_back(label("row statistic", o.name));
  }
  return Norm(std::move(state));
}

const Norm& Runtime::load_named(std::string_view name,
                                const std::function<ir::Program()>& make) {
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
  return impl_->info.arch();
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
