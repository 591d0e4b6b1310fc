#pragma once
// The facade: binds DSL programs to a GPU, picks a configuration (tuning database, else the
// built-in heuristic), compiles or loads the kernel once, and launches it on the caller's
// stream. Only launching needs a GPU; see build_kernel() for compiling without one.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/runtime/tensor.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

struct CUstream_st;

namespace tilenorm {

// A CUDA stream (CUstream, or cudaStream_t: the same type). nullptr is the legacy default stream.
using Stream = CUstream_st*;

// Launch arguments: one per program slot, in the order the program declared its slots.
using KernelArgs = std::span<const Arg>;

// Arguments for `program`'s slots, picked by name from `named` and put in slot order. Names
// the program does not have are ignored (so one list can serve a program's variants); a slot
// with no argument is an error that names it.
using NamedArg = std::pair<std::string_view, Arg>;
// Up to kMaxBoundArgs arguments held in place, so that binding allocates nothing.
inline constexpr std::size_t kMaxBoundArgs = 32;
class BoundArgs {
 public:
  void push_back(const Arg& arg);
  operator KernelArgs() const { return {args_.data(), size_}; }
  std::size_t size() const { return size_; }

 private:
  std::array<Arg, kMaxBoundArgs> args_{};
  std::size_t size_ = 0;
};
BoundArgs bind_args(const ir::Program& program, std::initializer_list<NamedArg> named);

// Where a launch's configuration came from.
enum class ConfigSource { tuned_exact, tuned_nearest_m, heuristic, explicit_config };
std::string_view config_source_name(ConfigSource source);

struct ResolvedConfig {
  KernelConfig config;  // vec already narrowed to what the pointers' alignment allows
  ConfigSource source;
  // The kernel peels its rows (KernelSpec::peel_rows): they start misaligned for config.vec,
  // alike in every row tensor.
  bool peel_rows = false;
  // A tuned configuration's database file (empty otherwise), and whether it is one that ships
  // with tilenorm.
  std::filesystem::path database{};
  bool shipped_database = false;
};

// How the main kernel of a launch runs on the device (Norm::launch_grid): for reports and
// diagnostics, such as a persistent grid cut to whole periods of peeled rows' shifts.
struct LaunchGrid {
  std::int64_t ctas = 0;  // CTAs of the main kernel
  int threads_per_block = 0;
  int ctas_per_row = 1;  // CTAs of a thread-block cluster that split each row
  int fold = 1;          // CTAs per cluster that fold their column partial sums
  // Persistent kernels (they loop over row blocks): the row blocks (CTAs, or clusters of
  // ctas_per_row) that fit on the device at once; 0 for a kernel of one row block per CTA.
  int resident_row_blocks = 0;
  int registers = 0;  // per thread
  std::size_t dynamic_shared_bytes = 0;
  // Peeled rows, each found at its own shift (KernelSpec::shift_per_row): the grid of a
  // persistent kernel then need not hold whole periods of the rows' shifts.
  bool shift_per_row = false;
  // The column parameters are fetched before the row loop (KernelSpec::early_columns).
  bool early_columns = false;
  // The CTAs that split each row are a software cluster (KernelSpec::global_exchange).
  bool global_exchange = false;
};

class Runtime;

// The dtype field of tuning keys: "bf16", or "bf16/fp32" when parameters differ from rows.
std::string tuning_dtype_key(DType io_dtype, DType param_dtype);

// A program bound to a runtime: lowered and hashed once, its kernels loaded on first use
// per (dtype, N, M bucket, alignment). Launching does no allocation and no synchronisation
// once that kernel is loaded, so it is safe inside CUDA graph capture.
class Norm {
 public:
  const ir::Program& program() const;
  const std::string& program_hash() const;

  // Validates every argument (throws tilenorm::Error naming the bad one; nothing is launched
  // then), and launches. rows == 0 is a no-op. Programs with reductions across rows (column
  // and scalar gradients) need a workspace of workspace_bytes() and launch two kernels.
  void launch(KernelArgs args, Stream stream, Workspace workspace = {}) const;
  void launch(std::initializer_list<Arg> args, Stream stream, Workspace workspace = {}) const {
    launch(KernelArgs(args.begin(), args.size()), stream, workspace);
  }
  // The same with a configuration chosen by the caller (the autotuner uses this).
  void launch(KernelArgs args, Stream stream, const KernelConfig& config,
              Workspace workspace = {}) const;
  // The workspace a launch with these arguments needs (0 for most forward programs). Loads
  // the kernel (to size its persistent grid), so it needs a GPU.
  std::size_t workspace_bytes(KernelArgs args) const;
  std::size_t workspace_bytes(KernelArgs args, const KernelConfig& config) const;
  // The configuration launch() would use for these arguments, and where it came from.
  ResolvedConfig resolve(KernelArgs args) const;
  // The grid launch() would use for these arguments. Loads the kernel, so it needs a GPU.
  LaunchGrid launch_grid(KernelArgs args) const;
  LaunchGrid launch_grid(KernelArgs args, const KernelConfig& config) const;
  // The tuning-database key for a launch of this program on this runtime's device.
  TuningKey tuning_key(DType io_dtype, DType param_dtype, std::int64_t n, std::int64_t rows) const;
  const LoweredProgram& lowered() const;

 private:
  friend class Runtime;

  struct State;
  explicit Norm(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// How a persistent kernel on peeled rows (rows that start misaligned) finds its rows' shifts.
enum class PeeledRowShifts {
  automatic,   // each row's where whole periods of shifts would idle over a quarter of the grid
  per_thread,  // each thread keeps its first row's; the grid holds whole periods of shifts
  per_row,     // each row's, wherever the kernel can (KernelSpec::shift_per_row)
};
// "auto", "per-thread", "per-row".
std::string_view peeled_row_shifts_name(PeeledRowShifts shifts);

// Whether kernels that can fetch their column parameters before the row loop do
// (KernelSpec::early_columns).
enum class EarlyColumns {
  automatic,  // as the configuration's column_fetch says, or by its rule (fetches_columns_early)
  never,
  always,  // wherever the kernel can
};
// "auto", "never", "always".
std::string_view early_columns_name(EarlyColumns early);

struct RuntimeOptions {
  int device = 0;
  bool use_tuning_database = true;  // false: always the heuristic (for comparisons)
  // On sm_90 and later, launch kernels that sum across rows in clusters whose CTAs add their
  // column partial sums in distributed shared memory (GeneratedKernel::folds_partials): the
  // largest cluster of at most 8 CTAs that keeps every CTA of the persistent grid resident.
  // false: one partial row per CTA, as before sm_90 (for comparisons).
  bool fold_partials = true;
  // automatic, unless comparing the two ways (per_thread, per_row).
  PeeledRowShifts peeled_row_shifts = PeeledRowShifts::automatic;
  // automatic, unless comparing the two ways (never, always).
  EarlyColumns early_columns = EarlyColumns::automatic;
  // At most this much dynamic shared memory per CTA (0: the device's limit), for kernels that
  // share their SMs with others' shared memory; the heuristic and the tuned configurations
  // stay within it. It also runs a smaller device's limit on this one (the GPU tests run the
  // 99 KiB of sm_86, sm_89 and sm_120 on the H200).
  std::size_t shared_memory_per_block = 0;
  // Choose configurations as on this known GPU (a known_devices() name, "A100"; empty: this
  // GPU), within what this one runs (emulated_limits): runs the kernels other GPU generations
  // get on this one (the GPU tests). Applied before shared_memory_per_block; no tuning database
  // is read (its entries were timed on this GPU).
  std::string heuristic_device{};
  // On sm_90 and later, launch with programmatic dependent launch: each kernel may be scheduled
  // while the previous kernel in its stream finishes, and waits for it on the GPU before it
  // touches memory (tn::wait_for_previous_grid in the generated code), so the launch's latency
  // and the CTAs' start overlap that kernel's last wave. Results are the same either way. Not for
  // software clusters (a cooperative launch), persistent grids of as many row blocks as fit at
  // once, or older GPUs, which launch as before.
  bool programmatic_launch = false;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Norm load(const ir::Program& program);
  // The program `make()` builds, loaded once per runtime under `name` (later calls with the
  // same name return the first one). The built-in kernels are loaded through this.
  const Norm& load_named(std::string_view name, const std::function<ir::Program()>& make);

  std::string device_name() const;
  // The architecture kernels are compiled for, e.g. "sm_90": the GPU's own, or where NVRTC does
  // not know it, an older one of the same major whose cubins it runs (target_arch in nvrtc.hpp).
  std::string arch() const;
  int compute_capability_major() const;
  int compute_capability_minor() const;
  int multiprocessors() const;
  std::size_t shared_memory_per_block() const;

  struct Statistics {
    std::uint64_t kernels_loaded = 0;  // modules loaded into the context
    std::uint64_t nvrtc_compiles = 0;  // of those, compiled now (the rest came from disk)
  };
  Statistics statistics() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Compiles a program for an explicit architecture (e.g. "sm_90") with no GPU needed, through
// the disk cache unless `use_disk_cache` is false.
struct BuiltKernel {
  GeneratedKernel generated;
  std::vector<char> cubin;
  int registers = -1;
  int spill_bytes = 0;
  int static_shared_bytes = 0;  // from ptxas; the dynamic is generated.dynamic_shared_bytes
  bool from_disk_cache = false;
};
BuiltKernel build_kernel(const LoweredProgram& program, const KernelSpec& spec,
                         const std::string& arch, bool use_disk_cache = true);

// Why a kernel with `static_bytes` of static shared memory (ptxas's count: a cluster's exchange,
// the statistics copied ahead) and `dynamic_bytes` of dynamic cannot run on a device that allows
// `limit_bytes` per CTA, the two together, if it cannot. The runtime checks this before it loads
// a kernel, so that such a configuration is refused by name rather than by the launch.
std::optional<std::string> shared_memory_problem(std::size_t static_bytes,
                                                 std::size_t dynamic_bytes,
                                                 std::size_t limit_bytes);

}  // namespace tilenorm
