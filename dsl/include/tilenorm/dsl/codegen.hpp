#pragma once
// CUDA C++ generation for a lowered program. The output is plain source text; compiling
// and launching it is the runtime's business, so this header has no CUDA dependency.
#include <array>
#include <boost/hana.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/ir.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm {

// Bumped whenever generated code changes in a way that makes old tuning results stale.
inline constexpr int kCodegenVersion = 3;

// The macro that sets a main kernel's minimum CTAs per SM in its __launch_bounds__ (defined in
// the source unless the compiler is given it: the runtime raises it where a few registers keep
// another CTA off each SM).
inline constexpr std::string_view kMinCtasMacro = "TILENORM_MIN_CTAS_PER_SM";

// Where a thread keeps its share of the row between passes over it.
enum class RowStorage : int {
  registers = 0,   // loaded once into registers (fastest, needs the row to fit)
  shared = 1,      // stashed in shared memory on the first pass
  global = 2,      // re-read from global memory (L2) on every pass; any N. Reduction passes
                   // load with L2 evict_last, the output pass with evict_first
  prefetched = 3,  // registers, with the next row block's loads in flight while this one is
                   // worked on; the kernel is then persistent (a grid that fits the device,
                   // each CTA or cluster looping over row blocks)
  staged = 4,      // registers, with the next row block copied asynchronously (cp.async,
                   // sm_80+) into shared memory while this one is worked on: the overlap of
                   // prefetched without its second set of registers; persistent as well
  pipelined = 5,   // prefetched on a cluster, with each row block's exchange left in flight
                   // while the next block's first pass runs (a third set of registers): the
                   // cluster's latency overlaps work instead of stalling every CTA per row.
                   // One reduction phase, ctas_per_row > 1
};
inline constexpr int kRowStorageCount = 6;  // RowStorage values are 0 .. kRowStorageCount - 1

// Whether v is a positive power of two (threads, rows per CTA, vectors, cluster sizes, rows).
constexpr bool is_power_of_two(std::int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

// Whether the rows live in registers while a row block is worked on.
constexpr bool rows_in_registers(RowStorage storage) {
  return storage == RowStorage::registers || storage == RowStorage::prefetched ||
         storage == RowStorage::staged || storage == RowStorage::pipelined;
}
// Whether a persistent kernel fetches the next row block ahead (prefetched, staged or
// pipelined).
constexpr bool fetches_ahead(RowStorage storage) {
  return storage == RowStorage::prefetched || storage == RowStorage::staged ||
         storage == RowStorage::pipelined;
}
std::string_view row_storage_name(RowStorage storage);

// Where a prefetched cluster kernel that sums across rows (a backward) has ptxas issue the
// next row block's loads: left to its rule (KernelConfig{} and tuning entries written before
// the knob existed mean this), or pinned before the row block's first cluster exchange by a
// branch never taken that uses them (on), or left where ptxas puts them (off), or pinned
// earlier, before the first pass's sums are combined across the CTA's warps (early). Which is
// faster depends on the program, the dtype and the GPU (docs/performance.md, fifty-third to
// fifty-seventh sessions), so the tuner tries each; next_row_loads_pin() resolves it.
enum class LoadPin : int { rule = 0, on = 1, off = 2, early = 3 };
inline constexpr int kLoadPinCount = 4;
inline constexpr int kPinByRule = static_cast<int>(LoadPin::rule);  // KernelConfig's default
inline constexpr int kMomentsByRule = static_cast<int>(MomentFusion::rule);  // likewise
std::string_view load_pin_name(LoadPin pin);

// Where a kernel that can fetch its column parameters before the row loop
// (can_fetch_columns_early, KernelSpec::early_columns) does: as the runtime's rule says
// (fetches_columns_early; KernelConfig{} and tuning entries written before the knob existed mean
// this), always (early), or in the output pass, after the row's reductions (late). Early
// parameters hold registers across the row: with the same configurations, that gained 0.9-1.4
// points of the copy ceiling at bf16 LayerNorm N = 4096 and 7168, where the rule fetches late,
// and lost 9-31 at 2880 and 5120 (H100, eighty-first session), so the tuner tries the other
// choice.
enum class ColumnFetch : int { rule = 0, early = 1, late = 2 };
inline constexpr int kColumnFetchCount = 3;
inline constexpr int kColumnFetchByRule = static_cast<int>(ColumnFetch::rule);
std::string_view column_fetch_name(ColumnFetch fetch);

// The most CTAs that split a row (KernelConfig::ctas_per_row): sm_90's largest, non-portable,
// thread-block cluster.
inline constexpr int kMaxCtasPerRow = 16;

// The tunable knobs, baked into the generated source as constexpr values. The knobs added after
// the first five (kKernelConfigLaterFields) default to their rule, so a configuration written
// in braces may leave them out and mean the rule, as one read from older JSON does.
struct KernelConfig {
  int threads_per_row;  // power of two, 1..1024
  int rows_per_cta;     // power of two; block = product, 32..1024
  int vec;              // elements per vector access, <= 16 bytes
  int row_storage;      // a RowStorage value
  int ctas_per_row;     // CTAs of one thread-block cluster that split each row: 1 (no cluster)
                        // .. 16, sm_90+
  int load_pin = kPinByRule;     // a LoadPin value
  int moments = kMomentsByRule;  // a MomentFusion value: how fuse_moments lowers the program
                                 // for this kernel
  int column_fetch = kColumnFetchByRule;  // a ColumnFetch value
  bool operator==(const KernelConfig& other) const;
  std::string describe() const;
};
// The KernelConfig fields that configurations written before them lack (tuning databases):
// reflect::from_json reads them as 0 there, which keeps what those configurations meant.
inline constexpr std::array<std::string_view, 3> kKernelConfigLaterFields{"load_pin", "moments",
                                                                          "column_fetch"};

struct KernelSpec {
  DType io_dtype = DType::bf16;     // row inputs and outputs
  DType param_dtype = DType::bf16;  // column parameters
  std::int64_t n = 0;               // the row length, a compile-time constant
  KernelConfig config{};
  // Alignment peeling: rows may start at any element, not only at a multiple of config.vec.
  // Each row is cut into a scalar head up to the first vec-aligned column, aligned vectors
  // and a scalar tail; the kernel takes the shift from the row's address. Every row tensor
  // must then start each row at the same element offset modulo vec (the runtime checks
  // that; base pointers and row strides agree modulo vec). Column parameters may have any
  // element alignment. Part of the generated code's identity. A persistent kernel keeps each
  // thread's first shift for all of its rows (the runtime's grid holds whole periods of the
  // rows' shifts), unless shift_per_row; one that sums across rows needs rows_per_cta 1
  // (config_problem() says so otherwise).
  bool peel_rows = false;
  // Each peeled row finds its own shift (only where can_shift_per_row()), so a persistent grid
  // need not hold whole periods of shifts. A forward then reads its copy of the column
  // parameters word by word at each row's shift; a kernel that sums across rows walks a range
  // of the rows in class-major order (the rows of one shift together), a class at a time,
  // copies the column parameters at each class's shift and writes a partial row of column sums
  // for each class it meets (GeneratedKernel::shift_per_row). The runtime asks for it
  // where whole periods would leave many resident row blocks idle. Part of the generated code's
  // identity.
  bool shift_per_row = false;
  // The column parameters are fetched into registers before the row loop (only where
  // can_fetch_columns_early()), so that the output pass does not wait on a second memory round
  // trip after the row's reductions; that costs registers (a 16-bit LayerNorm's two parameters
  // at four vectors per thread: 64 -> 96). The runtime asks for it where few parameter vectors
  // are held, or where every row block is resident at once (small M). Such a kernel, being
  // latency-bound, also accumulates each row reduction in four lanes where a thread holds 32
  // columns or more (shorter chains of dependent adds). Part of the generated code's identity.
  bool early_columns = false;
  // Column partial sums stay in registers where they would otherwise move to shared memory: for
  // a device whose shared memory per CTA cannot hold them beside the rest of the kernel's (see
  // fit_shared_memory in the runtime), at the cost of registers (ptxas spills what does not
  // fit). Part of the generated code's identity.
  bool partials_in_registers = false;
  // The CTAs that split a row (config.ctas_per_row > 1) are a software cluster: consecutive
  // CTAs of a cooperative launch that exchange row totals through global memory (the
  // exchange parameter), for a device without thread-block clusters of that size (see
  // fit_shared_memory in the runtime). Only kernels with a finishing kernel (a workspace).
  // Part of the generated code's identity.
  bool global_exchange = false;
  // With row_storage staged: the first this many row inputs (in slot order) are not copied
  // ahead into shared memory but loaded from global memory at each row's start, issued before
  // the wait for the staged copies. fit_shared_memory in the runtime sets it for staged cluster
  // slices, which stage only their last row input (a backward's dy: the one arrangement that
  // measured faster than registers, LayerNorm's fp32 recompute at N = 262144). At least one row
  // input stays staged. Part of the generated code's identity.
  int unstaged_row_inputs = 0;
};

// Whether `spec` may take KernelSpec::early_columns (whatever it holds now): aligned rows of
// one CTA each, kept in registers, by a kernel that is not persistent and reads a column
// parameter.
bool can_fetch_columns_early(const LoweredProgram& program, const KernelSpec& spec);

// The 16-byte (or narrower) vectors of column parameters that each thread of `spec` holds when
// it fetches them early.
std::int64_t early_column_vectors(const LoweredProgram& program, const KernelSpec& spec);

// Whether `spec` may take KernelSpec::shift_per_row: a persistent kernel on peeled rows, one row
// per CTA (or cluster); a forward that prefetches them, or a program that sums across rows that
// prefetches them or keeps them in registers, its cluster's exchange in shared memory (not a
// software cluster). (Such a program keeps its column partial sums per chunk
// slot, so it walks the rows of one shift together; see KernelSpec::shift_per_row.)
bool can_shift_per_row(const LoweredProgram& program, const KernelSpec& spec);

// The dynamic shared memory a launch of `spec` needs: the row stashes of RowStorage::shared,
// the column partial sums of persistent kernels that keep them there, and the copy of the
// column parameters (column_stash_bytes).
std::size_t dynamic_shared_memory_bytes(const LoweredProgram& program, const KernelSpec& spec);

// The shared memory for the column partial sums of a persistent kernel that keeps them there
// (at least 32 values per thread, at most 128 KiB, not KernelSpec::partials_in_registers),
// else 0.
std::size_t shared_partials_bytes(const LoweredProgram& program, const KernelSpec& spec);

// The shared memory for the copy of the column parameters that a persistent kernel reads for
// every row (a cluster's slice, or a peeled row's parameters at its CTA's one shift), or 0
// where it reads them from global memory.
std::size_t column_stash_bytes(const LoweredProgram& program, const KernelSpec& spec);

// Bytes per column of a program's row inputs (the Tile slots it reads), which a thread holding
// its rows in registers keeps raw.
std::int64_t row_input_bytes(const LoweredProgram& program, DType io_dtype, DType param_dtype);
// How many row inputs a program reads: x for a forward; x and dy for a backward.
int row_input_count(const LoweredProgram& program);

// Whether the rows `spec` holds in registers (as its row storage keeps them: once, or twice or
// three times when fetching ahead) fit the per-thread register budget.
bool rows_fit_registers(const LoweredProgram& program, const KernelSpec& spec);

// The registers per thread that a persistent kernel's column partial sums take when it keeps
// them in registers (0 when they are in shared memory, or there are none), and the budget they
// must fit whatever the row storage: past it, ptxas spills them.
std::int64_t column_partial_registers(const LoweredProgram& program, const KernelSpec& spec);
std::int64_t register_budget(const KernelSpec& spec);

// Whether `spec` is a kernel whose next row block's loads can be pinned (KernelConfig::load_pin
// other than rule): prefetched rows on a cluster, in a kernel that sums across rows.
bool can_pin_next_row_loads(const LoweredProgram& program, const KernelSpec& spec);
// Where the kernel generated for `spec` pins them (never LoadPin::rule): as load_pin says, or by
// the rule: on, but off where the kernel asks for registers that keep the loads early by
// themselves, and where the first reduction pass reads a saved statistic early on clusters of 16
// with rows of 8192 vectors and more, else off; off wherever there is nothing to pin
// (can_pin_next_row_loads).
LoadPin next_row_loads_pin(const LoweredProgram& program, const KernelSpec& spec);

// Why `spec` cannot be generated for `program`, or nothing when it can.
std::optional<std::string> config_problem(const LoweredProgram& program, const KernelSpec& spec);

// One kernel parameter; the runtime builds its argument array from the list.
enum class ParamKind {
  slot_pointer,  // the device pointer of slot `slot`
  slot_stride,   // the row stride (elements) of Tile slot `slot`
  slot_value,    // the fp32 value of read Scalar slot `slot`
  rows,          // M
  workspace,     // float*: the cross-row partial sums
  partial_rows,  // how many partial rows the workspace holds per reduction (grid * RPC)
  exchange,      // float*: a software cluster's exchange (GeneratedKernel::exchange_floats)
};
struct KernelParam {
  ParamKind kind;
  int slot = -1;  // for slot_* kinds
};

// The plan of a program's kernels: which slots each kernel touches, and the workspace.
// A program with reductions across rows (column or scalar gradients) needs two kernels: the
// main one, persistent over the rows, which leaves one partial row per CTA row group in the
// workspace, and a finishing kernel that sums the partials in a fixed order (deterministic,
// no atomics) and writes the column and scalar outputs.
struct KernelPlan {
  bool persistent = false;  // the main kernel loops over row blocks
  bool finish = false;      // a finishing kernel writes the column and scalar outputs
  int column_partials = 0;  // cross-row reductions with an [N] result
  int scalar_partials = 0;  // cross-row reductions with a scalar result
  bool needs_finish() const { return finish; }
  // Workspace floats for `partial_rows` partial rows of an N-column launch.
  std::size_t workspace_floats(std::int64_t partial_rows, std::int64_t n) const;
};
KernelPlan plan_kernels(const LoweredProgram& program);

struct GeneratedFunction {
  std::string name;  // extern "C" symbol
  std::vector<KernelParam> params;
  int threads_per_block = 0;
};

struct GeneratedKernel {
  std::string name;    // the main kernel's extern "C" symbol
  std::string source;  // a self-contained .cu translation unit: the prelude and every kernel
  std::vector<KernelParam> params;
  int threads_per_block = 0;
  int rows_per_cta = 0;
  std::size_t dynamic_shared_bytes = 0;  // for RowStorage::shared
  KernelPlan plan;
  std::optional<GeneratedFunction> finish;  // the finishing kernel, when plan.needs_finish()
  // Partial rows each main-kernel CTA (each cluster, when a cluster shares a row) leaves in the
  // workspace: 1 when it combines its row groups in shared memory first, else rows_per_cta.
  int partials_per_cta = 0;
  // Columns each finishing-kernel CTA covers (its grid is ceil(N / this)).
  int finish_columns_per_cta = 0;
  // The main kernel's cluster size along x (KernelConfig::ctas_per_row): launch it with
  // clusters of this many CTAs, and a grid that is a multiple of it. Partial rows then count
  // per cluster, not per CTA.
  int ctas_per_row = 1;
  // The main kernel (ctas_per_row 1, column partial sums only) may also be launched in
  // clusters of any size, on sm_90 and later: each cluster's CTAs then add their column
  // partial sums in distributed shared memory and leave one partial row per cluster, so the
  // workspace and the finishing kernel's reads shrink by the cluster size. Launched without
  // clusters (or compiled for an older target) each CTA leaves its own row.
  bool folds_partials = false;
  // The grid is no larger than fits on the device at once, each CTA (or cluster) looping over
  // row blocks: programs that sum across rows, and prefetched rows.
  bool persistent = false;
  // A persistent kernel on peeled rows that finds each row's shift anew (shift_per_row), so
  // its grid need not hold whole periods of the rows' shifts (peeled_grid in the runtime). One
  // that sums across rows then needs class_major_slots() partial rows per row block (runtime).
  bool shift_per_row = false;
  // The column parameters are fetched before the row loop (KernelSpec::early_columns).
  bool early_columns = false;
  // A software cluster (KernelSpec::global_exchange): launch it cooperatively, without
  // clusters, on a grid of whole clusters. Its exchange parameter points to
  // exchange_floats_per_cluster floats per cluster (16-byte aligned, past the workspace's
  // partial rows), whose first exchange_counts 32-bit words per cluster (the arrival counts,
  // all clusters' first) are zeroed before every launch.
  bool global_exchange = false;
  std::size_t exchange_floats_per_cluster = 0;
  int exchange_counts = 0;
  // The CTAs per SM the generator asks ptxas to fit (staged rows), or 0.
  int min_ctas_per_sm = 0;
};

// Throws ProgramError (naming the problem) when config_problem() reports one.
GeneratedKernel generate_cuda(const LoweredProgram& program, const KernelSpec& spec);

// The embedded device prelude (dsl/prelude/tilenorm_prelude.cuh).
std::string_view device_prelude();
// The sm_90 prelude (dsl/prelude/tilenorm_prelude_sm90.cuh), included by cluster kernels only.
std::string_view device_prelude_sm90();
// The software clusters' prelude (dsl/prelude/tilenorm_prelude_exchange.cuh), included by
// kernels with KernelSpec::global_exchange only.
std::string_view device_prelude_exchange();

}  // namespace tilenorm

// KernelConfig's fields for Boost.Hana (reflect.hpp, the search space's domains), in order.
BOOST_HANA_ADAPT_STRUCT(tilenorm::KernelConfig, threads_per_row, rows_per_cta, vec, row_storage,
                        ctas_per_row, load_pin, moments, column_fetch);
