#pragma once
// The built-in configuration used for shapes nobody tuned: correct for any N, and close to
// the tuned speed for common ones.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/runtime/driver.hpp"

namespace tilenorm {

// What the heuristic and the search space need to know about a GPU. At run time they come
// from the driver; without a GPU, from known_devices().
struct DeviceLimits {
  std::size_t shared_memory_per_block = 48 * 1024;  // with the opt-in, for dynamic smem
  int multiprocessors = 1;
  std::string_view name = "";             // known_devices() rows only
  int compute_capability = 0;             // 90 for sm_90
  int cluster_ctas = 1;                   // the most CTAs of a thread-block cluster; 1: none
  int threads_per_multiprocessor = 1536;  // resident threads per SM (2048 on sm_80, sm_9x, sm_100)
  std::size_t l2_bytes = 0;               // the L2 cache; 0: unknown
  // Cooperative launches (every CTA resident at once), which software clusters need: every GPU
  // since sm_60 has them, but a driver may report them off
  // (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH).
  bool cooperative_launch = true;
  // Thread-block clusters (sm_90 and later).
  bool clusters() const { return cluster_ctas > 1; }
  // "sm_90".
  std::string arch() const;
  // The H200 (sm_90) limits, for generating code without a GPU.
  static DeviceLimits hopper();
};

// The most CTAs of a cluster on a GPU of compute capability `major`.x that has clusters:
// the non-portable 16 on sm_90 (measured on the H200) and sm_100 (NVIDIA's Blackwell tuning
// guide), the portable 8 elsewhere (sm_120 among them).
int most_cluster_ctas(int major);

// Whether a kernel of `plan` may split its rows across a software cluster
// (KernelSpec::global_exchange) on a device with `limits`: the program sums across rows (its
// exchange lives in the workspace) and the device launches cooperatively.
bool runs_software_clusters(const KernelPlan& plan, const DeviceLimits& limits);

// `spec` as a device with `limits` can run it: a row split across more CTAs than the device's
// clusters hold is a software cluster (KernelSpec::global_exchange), where the program sums
// across rows; and where the kernel's column partial sums alone would take more shared memory
// than the device has per CTA (their 128 KiB at most fit sm_80, sm_90 and sm_100 but not the
// 99 KiB of sm_86, sm_89 and sm_120), they stay in registers (KernelSpec::partials_in_registers),
// if the kernel then fits.
// Staged slices on a cluster (RowStorage::staged, ctas_per_row > 1) stage their last row input
// (a backward's dy) and load the others at each row's start (KernelSpec::unstaged_row_inputs).
KernelSpec fit_shared_memory(const LoweredProgram& program, KernelSpec spec,
                             const DeviceLimits& limits);

// Shared memory per CTA the heuristic keeps free beside a staged cluster kernel's dynamic shared
// memory for its static: the cluster's exchange and the statistics copied ahead (LayerNorm's fp32
// backward at N = 262144 on 16 x 512 threads: 8 KiB of them). The runtime checks the sum before it
// loads a kernel (shared_memory_problem).
inline constexpr std::size_t kStaticSharedReserve = 16 * 1024;

// The limits of a GPU as its driver reports them.
DeviceLimits device_limits(const driver::DeviceInfo& info);

// `other`'s limits for choosing configurations on the GPU of `actual`: the shared memory per
// CTA and the cluster size capped at what `actual` runs, and `actual`'s SM count (launch grids
// are sized for the GPU that runs them). For running another GPU's kernels on this one.
DeviceLimits emulated_limits(const DeviceLimits& other, const DeviceLimits& actual);

// A100 (sm_80), A10 (sm_86), L40S (sm_89), H100 and H200 (sm_90), B200 (sm_100), RTX5090
// (sm_120).
std::span<const DeviceLimits> known_devices();
// The row of known_devices() whose name (case-insensitive, "h200") or arch ("sm_89") is
// `name_or_arch` (an arch names its first device); throws tilenorm::Error listing them.
const DeviceLimits& known_device(std::string_view name_or_arch);
// The limits that code for `arch` ("sm_86") is generated for without a GPU: the first known
// device of that arch, else the newest known one of an older arch (sm_87 -> A10, sm_103 ->
// B200), so that no arch before sm_90 gets clusters. Throws tilenorm::Error for a name that is
// not sm_XX, or an arch older than every known device.
const DeviceLimits& limits_for_arch(std::string_view arch);

// Where fetching the next row block ahead pays, shared by the heuristic and the tuner's search
// space: a persistent kernel always prefetches into registers up to kPrefetchValues values of a
// row input per thread; staged rows are for more values than that, from kStagedRowThreads
// threads per row.
inline constexpr std::int64_t kPrefetchValues = 16;
inline constexpr int kStagedRowThreads = 64;
// On a cluster, staged slices from this many bytes of a row input per thread (eight 16-byte
// vectors: fp32 rows of 262144 on 16 x 512 threads), where a second set of registers for the
// next row block does not fit beside the current one.
inline constexpr std::int64_t kStagedSliceBytes = 128;

// Thread-block clusters, shared by the heuristic and the tuner's search space: at most
// kMaxClusterCtas CTAs (non-portable above kPortableClusterCtas; DeviceLimits::cluster_ctas
// says what a device runs), slices of at least
// kMinClusterSliceVectors vectors, kClusterVectorsPerThread vectors per thread, or twice that
// on kLongSliceThreads threads for rows too long for that many on the largest cluster.
inline constexpr int kMaxClusterCtas = kMaxCtasPerRow;
inline constexpr int kPortableClusterCtas = 8;
inline constexpr std::int64_t kMinClusterSliceVectors = 256;
inline constexpr std::int64_t kClusterVectorsPerThread = 4;
inline constexpr int kLongSliceThreads = 512;
// A backward reading saved statistics stacks up to kStackedClusterRows rows on its slices, in
// CTAs of at most kStackedClusterThreads threads: one exchange and one partial row serve them.
// Rows of at least kStackedClusterMinThreads threads: stacked one-warp rows ran on the H200 in
// forwards only.
inline constexpr int kStackedClusterRows = 4;
inline constexpr int kStackedClusterThreads = 512;
inline constexpr int kStackedClusterMinThreads = 64;

// The most rows per CTA a cluster's prefetched slices of `threads_per_row` threads may stack,
// shared by the heuristic (which takes them all) and the tuner's search space: as above for a
// backward that reads saved statistics, and for a recomputing one on rows of up to 1024 vectors
// (`row_vectors`), else 1.
int stacked_cluster_rows(const LoweredProgram& program, int threads_per_row,
                         std::int64_t row_vectors);

// Whether a kernel that can fold its column partial sums across a cluster
// (GeneratedKernel::folds_partials) gains by it at all: one row per CTA and two or more column
// gradients (LayerNorm's). A CTA of several rows folds each column over all of them on a few
// threads, and one column gradient saves half the bytes for the same barriers: on the H100 (bf16,
// M = 256-4096, N = 128-4096, sixty-second session) every such fold lost, 1.02-3.8x the unfolded
// time, while LayerNorm's one-row CTAs gained (M = 256, N = 2048 and 4096: 0.68-0.78x). The
// runtime launches the others without clusters, and asks nothing of the device for them.
bool folding_kernel_pays(int rows_per_cta, int column_gradients);

// Whether a launch of such a kernel folds, given the bytes of its unfolded partial sums per column
// (partial rows x column gradients x 4) and the bytes per column of one row in all the row
// tensors: where the partial sums would be at least 1/kFoldShare of the bytes the rows move.
// Folding costs a cluster barrier and each CTA's wait for its peers (on the H200, bf16
// backwards: +2 to +8 points of the copy ceiling at 4-4.3% of the bytes, -4 to +1 at
// 0.5-2.2%; see docs/performance.md).
inline constexpr std::int64_t kFoldShare = 32;
bool folding_pays(std::int64_t partial_bytes_per_column, std::int64_t rows,
                  std::int64_t row_bytes_per_column);

// Whether a main kernel's launch may overlap the previous kernel's end, with
// RuntimeOptions::programmatic_launch on a GPU that has it: not a software cluster's
// (cooperative, after the memset of its counts), nor a persistent grid of as many row blocks as
// fit at once (`row_blocks` >= `resident_row_blocks`): scheduled beside the previous grid's last
// CTAs, its clusters need not all find room, and those left over run after the others (bf16
// LayerNorm's backward at N = 8192 and 16384 ran 16-25 points of the copy slower so; H100,
// seventy-sixth session).
bool launches_programmatically(bool persistent, bool software_cluster, std::int64_t row_blocks,
                               std::int64_t resident_row_blocks);

// Whether a kernel that can fetch its column parameters before the row loop
// (KernelSpec::early_columns) should, given the vectors of them each thread would hold: where
// they are at most kEarlyColumnVectors, or where the launch's row blocks are all resident at
// once even at the most registers a thread can take (small M, such as decoding), so that the
// registers they hold cost no occupancy that hides anything. On the H200 (bf16, M = 2^26 / N,
// thirty-fourth session) early parameters gained 0.1-2.2 points of the copy ceiling with four
// or five vectors (RMSNorm N = 128-16384, LayerNorm 128 and 512) and lost 1-25 with eight
// (LayerNorm 1024-16384: 64 -> 96 registers at 4096, one CTA per SM instead of two at 16384);
// at M = 1-256, N = 4096, they cut the kernel from 1.35-1.83x a copy of the same bytes to
// 1.14-1.51x.
inline constexpr std::int64_t kEarlyColumnVectors = 5;
bool early_columns_pay(std::int64_t column_vectors, std::int64_t row_blocks, int threads_per_block,
                       int multiprocessors, int registers_per_multiprocessor);
// The automatic choice for a launch of `spec` over `rows` rows on `device`: where
// can_fetch_columns_early(), as KernelConfig::column_fetch says, or by its rule,
// early_columns_pay() for the rows' M bucket (the runtime caches kernels per bucket, and the
// tuner compiles what the runtime will launch).
bool fetches_columns_early(const LoweredProgram& program, const KernelSpec& spec, std::int64_t rows,
                           const driver::DeviceInfo& device);

// The widest vector (elements) whose accesses stay within 16 bytes for these dtypes.
int widest_vec(DType io_dtype, DType param_dtype);

// Whether launches of `program` peel rows of n elements that start misaligned for `vec`
// (rather than narrowing vec). A program that sums across rows peels one row per CTA, so only
// rows long enough for a CTA of 64 threads at four vectors each: shorter ones would leave
// tiny CTAs (the tuner prunes all of them), and narrowing keeps their rows stacked.
bool peels_rows(const LoweredProgram& program, std::int64_t n, int vec);

// `max_vec` (0: the widest) caps the vector width, e.g. for pointers that are not 16-byte aligned.
// `peel_rows`: the kernel peels its rows (KernelSpec::peel_rows), so `max_vec` is the width
// alignment peeling allows; the configuration is checked as a peeled kernel.
// `rows`: the launch's row count (0: enough to fill the device many times over); a few rows
// keep in registers what many re-read from L2 (see rereading_one_cta in heuristics.cpp).
KernelConfig heuristic_config(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                              std::int64_t n, const DeviceLimits& limits, int max_vec = 0,
                              bool peel_rows = false, std::int64_t rows = 0);

// The heuristic was calibrated on the built-in norms, whose configurations spill at most 132
// bytes (NVRTC 13.0, sm_90, every built-in and pass at 28 N, three dtypes, aligned and
// peeled), but for the recompute of LayerNorm without weight or bias at N = 40000 (564-800
// bytes at 128 registers). A program that keeps more values live can spill far more: the
// backward of the four_reductions example took 2704 bytes at bf16 N = 4096 on 64 threads and
// ran at 17.6% of the copy (H100).
inline constexpr int kToleratedSpillBytes = 256;

// What the runtime runs in place of a heuristic configuration that spills more than
// kToleratedSpillBytes: twice the threads per row (half the values per thread), again while
// that spills too much; then, if that was not enough, rows re-read from global memory (L2, no
// row held in registers) on the heuristic's threads and more. The first within the tolerance,
// else the one that spills least. `spill_bytes` compiles a configuration and returns what it
// spills, or nothing for one that cannot run (the search in that direction stops there).
KernelConfig without_heavy_spills(
    const KernelConfig& heuristic,
    const std::function<std::optional<int>(const KernelConfig&)>& spill_bytes);

}  // namespace tilenorm
