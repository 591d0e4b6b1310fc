#include "tilenorm/runtime/heuristics.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace tilenorm {
namespace {

// Past kPrefetchValues (heuristics.hpp), a persistent kernel prefetches on sm_90 and later
// while the two sets of raw row chunks take at most this many registers (see
// heuristic_config).
constexpr std::int64_t kPrefetchRegisters = 128;

// Vectors of a row each CTA of a cluster keeps (the cluster limits are in heuristics.hpp).
constexpr std::int64_t kClusterSliceVectors = 1024;
// Rows longer than this many vectors go to a cluster (H200, 2026-11-30: at 2048 vectors, bf16
// N = 16384, one CTA per row was faster: RMSNorm backward 68-74% of the copy ceiling against
// 49% split across 2 CTAs; at 4096 vectors and more the cluster won: LayerNorm 15 -> 44%).
constexpr std::int64_t kClusterRowVectors = 2048;
constexpr std::int64_t kLongRowVectors = 1024;
// A bf16 backward that reads saved statistics takes a cluster of stacked rows at rows of this
// many vectors (see on_clusters).
constexpr std::int64_t kStackedClusterRowVectors = 1024;
// The slice each CTA of those clusters keeps: a quarter of kClusterSliceVectors.
constexpr std::int64_t kStackedSliceVectors = kClusterSliceVectors / 4;
constexpr std::int64_t kForwardClusterRowVectors = 4096;
// The longest 16-bit rows of one reduction, and the shortest with co-moments, that a forward
// keeps in registers on 256 threads (see mid_rows_one_cta).
constexpr std::int64_t kSixteenBitMidRowVectors = 9 * 256;
constexpr std::int64_t kSixteenBitMidComomentVectors = 10 * 256;
// A forward on one CTA per row whose last sweep is partly empty takes half the threads where
// each then holds at most this many vectors (see heuristic_config).
constexpr std::int64_t kRaggedForwardVectors = 8;
// Reductions in one phase from which a program is treated like a co-moment when choosing its
// threads per row (see heuristic_config).
constexpr std::size_t kWidePhaseReductions = 3;

// Threads per CTA that short rows are stacked into, and the smaller CTAs of a forward whose
// rows take at most that many threads.
constexpr int kStackedCtaThreads = 256;
constexpr int kSmallForwardCta = 64;
// A persistent kernel that prefetches its rows, with at least four vectors per thread, runs
// CTAs of 128 threads when its rows take at most 64.
constexpr int kSmallPersistentCta = 128;
// Staged rows (see heuristic_config): from kStagedRowThreads threads per row (heuristics.hpp),
// for more values per thread than kPrefetchValues, up to half this many, or up to this many
// (eight 16-bit vectors) where the threads tile the row exactly.
constexpr std::int64_t kStagedValues = 64;
// Vectors per thread from which staging pays (below, a staging backward prefetches), and the
// most a peeled row prefetches (beyond, it stays in registers); see heuristic_config.
constexpr std::int64_t kStagedMinVectors = 4;
// The most 16-bit vectors per thread a recomputing backward stages: at eight, LayerNorm's bf16
// N = 16384 on 256 threads spilled 1496 bytes (NVRTC 13.0, sm_90); at five, N = 10240 on 256
// threads took 204 registers and no spill.
constexpr std::int64_t kRecomputeStagedVectors = 5;
constexpr std::int64_t kPeeledPrefetchVectors = 4;
// The fewest threads per row of a 16-bit backward that reads saved statistics (a warp for
// other programs), and of a backward that prefetches eight vectors per thread, with one
// reduction phase or two; see heuristic_config.
constexpr int kNarrowBackwardThreads = 16;
// bf16 backward rows that short_backward_rows spreads over more threads, in vectors, and the
// fewest threads it gives one.
constexpr std::int64_t kShortBackwardMinVectors = 64;
constexpr std::int64_t kShortBackwardMaxVectors = 256;
constexpr int kShortBackwardMinThreads = 64;
constexpr int kLongPrefetchThreads = 64;
constexpr int kTwoPhaseLongPrefetchThreads = 32;
// The share of the L2, in percent, that rows read twice may take between their two reads: the
// rest is for what streams through it meanwhile (the outputs, the next rows' first reads). A
// margin, not a measured limit: on the H200 they take at most 27% of its 60 MiB (see
// rereading_one_cta).
constexpr std::size_t kRereadL2Percent = 50;
// The share of the L2, in percent, for the rows of a 16-bit forward with co-moments (LayerNorm)
// on four vectors per thread, which reads each row three times (the sums, the centred squares,
// the outputs), so keeps it in L2 twice as long. On 2048 threads per SM those rows hold 16.5
// MiB: 27.5% of the H200's 60 MiB, where re-reading won (thirty-eighth session, bf16 N = 4096
// 94.7% of the copy against 91.4 in registers), and 33% of the H100's 50 MiB, where it lost
// (seventy-second session, tilenorm-tune --show-candidates, bf16, M = 2^26 / N, the same threads
// in registers against re-reading: N = 2048 93.9% against 84.6, 4096 93.5 against 86.1, 8192
// 93.7 against 89.9). Rows read twice at the same 33% lost far less on the H100 (the benchmark:
// bf16 RMSNorm 32768 on 1024 threads 95.0% against the tuned 95.7, fp32 LayerNorm 16384 95.2
// against 98.2), where the alternative the rules give instead, a cluster, is not measured: they
// keep kRereadL2Percent.
constexpr std::size_t kRereadThriceL2Percent = 30;
// Backward rows from which a GPU without clusters splits them across a software cluster: where
// one CTA of 1024 threads holds four or more vectors per thread, and ptxas (NVRTC 13.0, sm_80
// and sm_86) spilled its column partial sums (bf16 N = 32768: LayerNorm 1568 bytes per thread).
// A backward with one column sum stays on one CTA a step longer: its row in global memory beat
// the software cluster at N = 32768 and lost from 65536 (forty-seventh session, H100 with the
// A100's limits, bf16, M = 2^26 / N: RMSNorm 211 against 391 us, recomputing 219 against 256;
// 65536: 427 against 284, 509 against 426; LayerNorm's two sums, 32768: 781 against 358 us).
constexpr std::int64_t kSoftwareClusterRowVectors = 4096;
constexpr std::int64_t kOneSumSoftwareClusterRowVectors = 8192;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// Whether a backward reads the forward's saved statistics (RowScalar inputs), rather than
// recomputing them from x.
bool reads_saved_statistics(const LoweredProgram& program) {
  return std::any_of(program.program.slots.begin(), program.program.slots.end(),
                     [](const ir::Slot& slot) {
                       return slot.role == ir::Role::read && slot.shape == ir::Shape::row_scalar;
                     });
}

int next_power_of_two(std::int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

// Threads per row for about `per_thread` vectors each: the power of two that gives at most
// per_thread vectors, unless one fewer power of two gives at most a quarter more (a row just
// past a power of two, such as 513 vectors: 128 threads with 5 each measured 77% of the copy
// ceiling for RMSNorm bf16 N = 4097, 256 threads with 2 or 3 each 60%).
// In a persistent kernel, a thread that already holds 8 vectors takes no more (the registers of
// a recomputing backward run out), nor does one of a row that `never_over` marks.
int fewest_threads(std::int64_t chunks, std::int64_t per_thread, int narrowest, bool persistent,
                   bool never_over) {
  const int threads = next_power_of_two((chunks + per_thread - 1) / per_thread);
  const bool slightly_over = threads > narrowest && !(persistent && per_thread >= 8) &&
                             !never_over && (threads / 2) * per_thread * 5 / 4 >= chunks;
  return std::clamp(slightly_over ? threads / 2 : threads, narrowest, 1024);
}

// Small rows get several rows per CTA so that a block still has `cta_threads` threads.
KernelConfig with_rows(int threads_per_row, int vec, RowStorage storage,
                       int cta_threads = kStackedCtaThreads) {
  const int rows = std::max(1, cta_threads / threads_per_row);
  return {threads_per_row, rows, vec, static_cast<int>(storage), 1};
}

}  // namespace

DeviceLimits device_limits(const driver::DeviceInfo& info) {
  DeviceLimits limits;
  limits.shared_memory_per_block = info.shared_memory_per_block_optin;
  limits.multiprocessors = info.multiprocessors;
  limits.compute_capability = info.compute_capability();
  limits.cluster_ctas = info.cluster_launch ? most_cluster_ctas(info.cc_major) : 1;
  if (limits.cluster_ctas > 1 && !nvrtc_assembles_clusters(nvrtc_version())) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      warn("NVRTC " + nvrtc_version() +
           " cannot assemble the row exchange of thread-block clusters (st.async needs NVRTC "
           "12.1 or later): kernels run without clusters");
    });
    limits.cluster_ctas = 1;
  }
  limits.threads_per_multiprocessor = info.max_threads_per_multiprocessor;
  limits.l2_bytes = static_cast<std::size_t>(std::max(info.l2_bytes, 0));
  limits.cooperative_launch = info.cooperative_launch;
  return limits;
}

DeviceLimits emulated_limits(const DeviceLimits& other, const DeviceLimits& actual) {
  DeviceLimits limits = other;
  limits.shared_memory_per_block =
      std::min(other.shared_memory_per_block, actual.shared_memory_per_block);
  limits.cluster_ctas = std::min(other.cluster_ctas, actual.cluster_ctas);
  limits.multiprocessors = actual.multiprocessors;
  limits.cooperative_launch = other.cooperative_launch && actual.cooperative_launch;
  return limits;
}

bool runs_software_clusters(const KernelPlan& plan, const DeviceLimits& limits) {
  return plan.needs_finish() && limits.cooperative_launch;
}

KernelSpec fit_shared_memory(const LoweredProgram& program, KernelSpec spec,
                             const DeviceLimits& limits) {
  // A row split wider than the device's clusters runs as a software cluster.
  spec.global_exchange = spec.config.ctas_per_row > limits.cluster_ctas &&
                         runs_software_clusters(plan_kernels(program), limits);
  // Staged cluster slices stage their last row input (a backward's dy) and load the others at
  // each row's start (H100, fp32 N = 262144 on 16 x 512 threads, sixty-eighth session: with x and
  // dy staged, RMSNorm's backward ran 63.8% of the copy ceiling against 84.2% in registers, where
  // LayerNorm's recompute, dy alone staged, ran 86.3% against 74.1%).
  if (static_cast<RowStorage>(spec.config.row_storage) == RowStorage::staged &&
      spec.config.ctas_per_row > 1)
    spec.unstaged_row_inputs = row_input_count(program) - 1;
  if (shared_partials_bytes(program, spec) <= limits.shared_memory_per_block) return spec;
  KernelSpec in_registers = spec;
  in_registers.partials_in_registers = true;
  return dynamic_shared_memory_bytes(program, in_registers) <= limits.shared_memory_per_block
             ? in_registers
             : spec;
}

int most_cluster_ctas(int major) {
  return major == 9 || major == 10 ? kMaxClusterCtas : kPortableClusterCtas;
}

std::string DeviceLimits::arch() const {
  return "sm_" + std::to_string(compute_capability);
}

bool early_columns_pay(std::int64_t column_vectors, std::int64_t row_blocks, int threads_per_block,
                       int multiprocessors, int registers_per_multiprocessor) {
  if (column_vectors <= kEarlyColumnVectors) return true;
  // 255 registers per thread are allocated as 256.
  constexpr int kMostRegisters = 256;
  const std::int64_t ctas_per_multiprocessor = std::max<std::int64_t>(
      1, registers_per_multiprocessor / (std::int64_t{threads_per_block} * kMostRegisters));
  return row_blocks <= ctas_per_multiprocessor * multiprocessors;
}

bool fetches_columns_early(const LoweredProgram& program, const KernelSpec& spec, std::int64_t rows,
                           const driver::DeviceInfo& device) {
  if (!can_fetch_columns_early(program, spec)) return false;
  switch (static_cast<ColumnFetch>(spec.config.column_fetch)) {
    case ColumnFetch::early:
      return true;
    case ColumnFetch::late:
      return false;
    case ColumnFetch::rule:
      break;
  }
  const std::int64_t rows_per_cta = spec.config.rows_per_cta;
  const std::int64_t row_blocks = (m_bucket(rows) + rows_per_cta - 1) / rows_per_cta;
  return early_columns_pay(early_column_vectors(program, spec), row_blocks,
                           spec.config.threads_per_row * spec.config.rows_per_cta,
                           device.multiprocessors, device.registers_per_multiprocessor);
}

std::span<const DeviceLimits> known_devices() {
  // Opt-in shared memory per block, SM counts, resident threads per SM, cluster sizes and L2
  // sizes from the vendor's tuning guides and programming guide (the H200's L2 as its driver
  // reported it to the benchmark; the B200's as others report its driver's figure).
  // {shared memory per block, SMs, name, compute capability, cluster CTAs, threads per SM, L2}
  static constexpr DeviceLimits kDevices[] = {
      {163 * 1024, 108, "A100", 80, 1, 2048, 40 * kMiB},   // GA100
      {99 * 1024, 72, "A10", 86, 1, 1536, 6 * kMiB},       // GA102
      {99 * 1024, 142, "L40S", 89, 1, 1536, 96 * kMiB},    // AD102
      {227 * 1024, 132, "H100", 90, 16, 2048, 50 * kMiB},  // GH100, SXM
      {227 * 1024, 132, "H200", 90, 16, 2048, 60 * kMiB},  // GH100, the GPU tilenorm is measured on
      {227 * 1024, 148, "B200", 100, 16, 2048, 253 * kMiB / 2},  // GB100
      {99 * 1024, 170, "RTX5090", 120, 8, 1536, 96 * kMiB},      // GB202
  };
  return kDevices;
}

DeviceLimits DeviceLimits::hopper() {
  return known_device("H200");
}

const DeviceLimits& known_device(std::string_view name_or_arch) {
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  std::string known;
  for (const DeviceLimits& device : known_devices()) {
    if (same(device.name, name_or_arch) || same(device.arch(), name_or_arch)) return device;
    known += (known.empty() ? "" : ", ") + std::string(device.name) + " (" + device.arch() + ")";
  }
  throw Error("unknown device '" + std::string(name_or_arch) + "' (known: " + known + ")");
}

namespace {

// 86 for "sm_86" (and "sm_90a"); nothing for a name that does not start sm_ and a number.
std::optional<int> arch_number(std::string_view arch) {
  constexpr std::string_view kPrefix = "sm_";
  if (!arch.starts_with(kPrefix)) return std::nullopt;
  int number = 0;
  const char* first = arch.data() + kPrefix.size();
  const auto [end, error] = std::from_chars(first, arch.data() + arch.size(), number);
  if (error != std::errc() || end == first) return std::nullopt;
  return number;
}

}  // namespace

const DeviceLimits& limits_for_arch(std::string_view arch) {
  const std::optional<int> wanted = arch_number(arch);
  if (!wanted) throw Error("not an architecture: '" + std::string(arch) + "' (expected sm_XX)");
  const auto number = [](const DeviceLimits& device) { return device.compute_capability; };
  const DeviceLimits* newest_older = nullptr;
  for (const DeviceLimits& device : known_devices()) {
    if (number(device) <= *wanted && (!newest_older || number(device) > number(*newest_older)))
      newest_older = &device;
  }
  if (!newest_older) {
    throw Error("no known device of " + std::string(arch) +
                " or an older architecture (the oldest known: " +
                std::ranges::min(known_devices(), {}, number).arch() + ")");
  }
  return *newest_older;
}

bool folding_kernel_pays(int rows_per_cta, int column_gradients) {
  return rows_per_cta == 1 && column_gradients >= 2;
}

bool folding_pays(std::int64_t partial_bytes_per_column, std::int64_t rows,
                  std::int64_t row_bytes_per_column) {
  return kFoldShare * partial_bytes_per_column >= rows * row_bytes_per_column;
}

bool launches_programmatically(bool persistent, bool software_cluster, std::int64_t row_blocks,
                               std::int64_t resident_row_blocks) {
  return !software_cluster && !(persistent && row_blocks >= resident_row_blocks);
}

bool peels_rows(const LoweredProgram& program, std::int64_t n, int vec) {
  constexpr std::int64_t kPeeledRowVectors = 64 * 4;
  return !plan_kernels(program).persistent || n >= kPeeledRowVectors * vec;
}

int widest_vec(DType io_dtype, DType param_dtype) {
  return static_cast<int>(16 / std::max(dtype_size(io_dtype), dtype_size(param_dtype)));
}

namespace {

// What the rules read of a program and its rows, and the rules themselves: a thread-block
// cluster per row (on_clusters), else one CTA per row (on_one_cta).
struct Rows {
  Rows(const LoweredProgram& program, DType io_dtype, DType param_dtype, std::int64_t n,
       const DeviceLimits& limits, int max_vec, bool peel_rows, std::int64_t launch_rows)
      : program(program),
        io_dtype(io_dtype),
        param_dtype(param_dtype),
        n(n),
        limits(limits),
        peel_rows(peel_rows),
        launch_rows(launch_rows),
        vec(max_vec > 0 ? std::min(widest_vec(io_dtype, param_dtype), max_vec)
                        : widest_vec(io_dtype, param_dtype)),
        // Sized by the row's vectors (a peeled row's whole vectors are at most as many).
        chunks((n + vec - 1) / vec),
        // A peeled row's chunk slots: its vectors, and one for its remainder elements.
        row_slots(chunks + (peel_rows ? 1 : 0)),
        full_vectors(vec * static_cast<int>(dtype_size(io_dtype)) == 16),
        sixteen_bit_vectors(full_vectors && dtype_size(io_dtype) < 4) {
    // A forward's short rows give each thread at least two vectors (H200, bf16, tilenorm-tune
    // --show-candidates, 2026-11-30: N = 128 at 8 threads per row 86.7-87.0% of the copy
    // ceiling for LayerNorm, 16 threads 83.9-84.3%; RMSNorm 89.9% against 88.4%).
    const KernelPlan plan = plan_kernels(program);
    persistent = plan.persistent;
    can_run_software_clusters = runs_software_clusters(plan, limits);
    // A backward with two column sums (LayerNorm's) gives each thread two vectors of a short row
    // too (tenth session, tilenorm-tune --show-candidates, bf16 N = 128, M = 2^19: 8 threads per
    // row 83.6-85.7% of the copy ceiling, 16 threads 75-78%); with one (RMSNorm) 16 threads
    // measured 94.6% in the benchmark.
    // A 16-bit backward that reads saved statistics gives rows of 17-64 vectors (N = 129-512;
    // 33-64 with two column sums) 16 threads, two to four vectors each, not a warp (fourteenth
    // session, run 6, the benchmark, bf16, M = 2^26 / N, % of the copy ceiling: LayerNorm N = 512
    // 90.5 against 87.3, RMSNorm N = 256 92.7 against 92.0, N = 512 94.1 against 92.9). Not for
    // fp32 rows (LayerNorm N = 256 91.3 against 93.2) or recomputing backwards (RMSNorm bf16 N =
    // 256 88.6 against 90.0).
    two_column_sums = persistent && plan.column_partials >= 2;
    const bool reads_statistics = reads_saved_statistics(program);
    narrow_backward = persistent && reads_statistics && vec >= 8;
    recomputing_backward = persistent && !reads_statistics;
    narrowest =
        std::min(narrow_backward ? kNarrowBackwardThreads : 32,
                 next_power_of_two(persistent && !two_column_sums ? chunks : (chunks + 1) / 2));
    // Long rows split across a thread-block cluster, four vectors per thread, prefetching the
    // next row's slice where the registers allow (H200, bf16, M = 2^26 / N, tilenorm-tune
    // --show-candidates; the numbers are % of the copy ceiling):
    // - a backward (which would otherwise spill or re-read its rows) past kClusterRowVectors, on
    //   the fewest CTAs whose slices keep at most kClusterSliceVectors vectors (seventh session:
    //   RMSNorm N = 32768 on 4 x 256 threads 68.5%, 62.3% with two vectors per thread in
    //   registers; N = 65536 on 8 x 256 64.8% against 58.9%), half that with two column sums
    //   and a quarter with one (below);
    // - a one-phase forward without co-moments past kForwardClusterRowVectors (aligned rows of
    //   full vectors from it), on a cluster of 16;
    // - a co-moment forward (LayerNorm's) from kForwardClusterRowVectors, on slices of at most
    //   kClusterSliceVectors.
    // Forwards with two reduction phases stay on one CTA per row (LayerNorm before its co-moment:
    // 59.6% against 55.1% on a cluster).
    single_phase = program.reduction_phases.size() <= 1;
    // A co-moment (LayerNorm's variance) combines four floats per state where a sum combines
    // one: like a second phase, it favours fewer threads per row (H200, bf16, M = 2^26 / N,
    // tilenorm-tune --show-candidates: LayerNorm N = 16384 at 256 threads 86.6% of the copy
    // ceiling, 512 threads 84.7%; N = 65536 on clusters of 8 x 256 threads 65.4%, 4 x 512
    // threads 41.8%).
    // So do several reductions in one phase, each a float that every barrier combines
    // (nineteenth session, run 2, the benchmark, four_reductions with four in one phase, M =
    // 2^26 / N: fp32 N = 8192 on 512 threads of four vectors 68.8% of the copy ceiling, 16384 on
    // 1024 threads 67.2%, bf16 N = 32768 on 1024 threads 74.2%, where RMSNorm's one reduction
    // reaches 86-97% on the same threads; with eight vectors per thread, run 3: 97.3%, 89.4% and
    // 89.4%).
    for (const auto& phase : program.reduction_phases) {
      wide_phase = wide_phase || phase.size() >= kWidePhaseReductions;
      paired_row_sums = paired_row_sums || phase.size() >= 2;
      for (ir::NodeId r : phase)
        comoments = comoments || program.program.graph->node(r).op == ir::Op::comoment;
    }
    // A persistent kernel (a backward) that reads saved statistics and sums two columns
    // (LayerNorm's dweight and dbias) stages its next row block in shared memory on one CTA.
    // (Peeled rows cannot be staged: cp.async copies aligned chunks.)
    stages_rows = two_column_sums && reads_statistics && !peel_rows;
    // So does one that recomputes the statistics, on 16-bit rows of full vectors, where its
    // threads tile the row exactly with kStagedMinVectors to kRecomputeStagedVectors vectors each
    // (twenty-eighth session, run 2, tilenorm-tune --show-candidates, bf16, M = 2^26 / N, % of
    // the copy ceiling: LayerNorm N = 5120 on 128 threads staged 85.5% against 79.8% prefetched;
    // N = 16384 on 512 threads staged 83.1% against 78.0% on 256 prefetched; at N = 4096 and
    // 8192, eight vectors per thread, staging lost 1-3 points). Twenty-ninth session, run 3, the
    // benchmark, against prefetched: bf16 N = 5120 79.6 -> 84.9%, 16384 78.7 -> 83.1%, 10240
    // 74.4 -> 74.6%; fp16 78.5 -> 84.2%, 74.6 -> 84.5%, 74.1 -> 75.4%.
    stages_recomputed_rows =
        two_column_sums && !reads_statistics && !peel_rows && sixteen_bit_vectors;
  }

  // CTAs of `cta_threads` threads the device holds at once, by threads per SM.
  std::int64_t resident_ctas(int cta_threads) const {
    return std::int64_t{limits.multiprocessors} * (limits.threads_per_multiprocessor / cta_threads);
  }

  bool fits(const KernelConfig& config) const {
    const KernelSpec spec{io_dtype, param_dtype, n, config, peel_rows};
    return !config_problem(program, spec) &&
           dynamic_shared_memory_bytes(program, spec) <= limits.shared_memory_per_block;
  }

  // A forward re-reads its row from L2 on one CTA where its threads cover the row with few
  // vectors each: at 32 registers the SM holds its 2048 threads, where the same row in
  // registers takes 58-94 and two to five CTAs. The H200, the benchmark, M = 2^26 / N, % of the
  // copy ceiling, against the registers configuration (the next rules):
  // - four vectors per thread on 1024 threads (bf16 N = 32768, fp32 16384; thirty-sixth
  //   session, against a cluster of 8 x 64 threads): bf16 RMSNorm 92.3 against 87.5, fp32
  //   RMSNorm 95.9 against 90.9, fp32 LayerNorm 93.1 against 89.5;
  // - two vectors per thread on 512 threads (bf16 N = 8192, fp32 4096; thirty-seventh session):
  //   fp32 RMSNorm 98.8 against 96.4, LayerNorm 97.9 against 96.2, bf16 RMSNorm 95.3 against
  //   95.1, as torch.compile's kernel at fp32 4096;
  // - two vectors per thread on 256 and 128 threads (thirty-eighth session): bf16 RMSNorm 4096
  //   96.8 against 93.5, fp16 96.9 against 94.6, fp32 RMSNorm 2048 98.1 against 95.8,
  //   LayerNorm 98.6 against 95.8; at 128 threads (bf16 N = 2048, fp32 1024) +0.2 to +0.7;
  // - two to three vectors per thread on 512 threads, without co-moments (thirty-eighth
  //   session): bf16 RMSNorm 12288 95.7 against 92.7, fp32 RMSNorm 5120 98.8 against 96.6
  //   (fp32 LayerNorm 5120 97.7 against 98.2). Elsewhere rows that leave a sweep partly empty
  //   measured from -1.2 to +1.1 (bf16 RMSNorm 5120 on 256 threads 94.2 against 95.4, 7168 on
  //   256 94.1 against 93.1, 2880 on 128 95.3 against 94.2) and are left in registers;
  // - two to four vectors per thread on 1024 threads, 32-bit co-moments included (forty-third
  //   session, call 3, the benchmark, against the registers configuration; fp32 LayerNorm /
  //   RMSNorm: N = 10240 89.6 / 97.5 against 73.5 / 96.9, 12288 96.1 / 97.8 against 78.5 /
  //   82.1, 14336 92.8 / 97.4 against 82.4 / 90.8, 16352 91.6 / 95.7 against 85.3 / 93.3;
  //   RMSNorm bf16 N = 16448 83.2 against 61.8, 20480 83.2 against 75.0, 24576 93.9 against
  //   77.8, 28672 89.3 against 85.4, fp16 20480 83.0 against 78.1, 24576 93.9 against 78.4).
  //   Not 32-bit rows with a nearly empty third sweep (fp32 N = 8224: LayerNorm 80.3 against
  //   97.1 on 256 threads in registers, RMSNorm 93.7 against 96.2).
  // 16-bit rows with co-moments (LayerNorm), whose per-row combines grow with the warps, keep
  // four vectors per thread (bf16 LayerNorm 4096 on 128 threads 94.7 against 91.4, fp16 94.6
  // against 91.6; 8192 on 256 threads 94.0 against 92.2, fp16 94.1 against 91.7; 2048 on 64
  // threads 95.0 against 94.8), where two measured no better or slower (4096 on 256 x 2 91.5,
  // 8192 on 512 x 2 88.2) and longer rows slower (16384 on 512 x 4 87.4 against 91.7, 32768 on
  // 1024 x 4 76.1 against 88.4 on a cluster).
  // Not one vector per thread (fp32 N = 2048 on 512 threads 88.5 against 96.1), 1024 threads
  // of two or 512 of four (bf16 RMSNorm 16384 88.3 and 93.5 against 95.1), programs that read
  // several rows, such as backwards without column sums (rms_norm_no_weight's backward fp32 N =
  // 2048 92.2 against 101.9, bf16 4096 97.5 against 100.9; its recompute at fp32 4096 94.3
  // against 100.4 for the backward in registers), nor phases of three or more reductions (not
  // measured).
  // Where every row block of the launch is resident at once (decoding), occupancy hides
  // nothing and the second read is one more L2 round trip per row: the rows stay in registers.
  std::optional<KernelConfig> rereading_one_cta() const {
    const bool short_power_of_two = is_power_of_two(chunks) && chunks >= 256 && chunks <= 1024;
    // More than two vectors per thread and up to three, the last sweep partly empty.
    const bool two_to_three_on_512 = !comoments && chunks > 2 * 512 && chunks <= 3 * 512;
    // Fewer than four on 1024 threads, 32-bit co-moments included: 16-bit rows past
    // kSixteenBitMidRowVectors (below them, mid_rows_one_cta), 32-bit ones from two and a half.
    const bool two_to_four_on_1024 =
        chunks < 4 * 1024 &&
        (sixteen_bit_vectors ? chunks > kSixteenBitMidRowVectors : 2 * chunks >= 5 * 1024);
    const int threads = comoments && sixteen_bit_vectors ? (short_power_of_two ? chunks / 4 : 0)
                        : short_power_of_two             ? chunks / 2
                        : chunks == 4 * 1024             ? 1024
                        : two_to_three_on_512            ? 512
                        : two_to_four_on_1024            ? 1024
                                                         : 0;
    if (threads == 0 || persistent || peel_rows || !full_vectors || wide_phase ||
        row_input_count(program) != 1 || limits.threads_per_multiprocessor < 2048)
      return std::nullopt;
    const std::int64_t resident = resident_ctas(threads);
    if (launch_rows > 0 && m_bucket(launch_rows) <= resident) return std::nullopt;
    // The second read finds the row in L2 only while the rows of every resident CTA fit there
    // (H200: 264 rows of 64 KiB, 16.5 MiB of its 60 MiB). A device with less L2 for as many
    // threads, or one whose L2 is unknown, keeps its rows in registers.
    const auto in_flight_bytes =
        static_cast<std::size_t>(resident * n * row_input_bytes(program, io_dtype, param_dtype));
    const std::size_t l2_percent =
        comoments && sixteen_bit_vectors ? kRereadThriceL2Percent : kRereadL2Percent;
    if (in_flight_bytes * 100 > limits.l2_bytes * l2_percent) return std::nullopt;
    const KernelConfig global{threads, 1, vec, static_cast<int>(RowStorage::global), 1};
    if (!fits(global)) return std::nullopt;
    return global;
  }

  // 16-bit forwards between the rows that 256 threads hold in registers and those a cluster
  // takes, on one CTA (forty-fourth session, call 2, tilenorm-tune --show-candidates and the
  // benchmark's heuristic at the same shapes, bf16, M = 2^26 / N, % of the copy ceiling):
  // - one reduction (RMSNorm), 2049 to kSixteenBitMidRowVectors vectors: 256 threads of nine
  //   vectors in registers, the tuner's best at each N measured (N = 16448 90.4, 16896 90.1,
  //   17408 91.0, 18432 90.3), against 1024 threads re-reading the row (83.1, 79.2, 78.1, 78.8).
  //   From ten vectors they lost (19456 under 82.8, 20480 76.8) and the re-read rule takes over.
  // - co-moments (LayerNorm) past 2560 vectors and short of kForwardClusterRowVectors: 512
  //   threads, fetching the next row while finishing one; at eleven measured N from 20992 to
  //   31744 80.1-83.8, at least 0.93 of the tuner's best (86.6, 256 threads in registers, at
  //   22528), against 512 threads in registers, 63.7-80.2. 256 threads prefetched dipped to 73.9
  //   at 23552.
  // Against the previous rules (call 3, the benchmark, both trees in one call, two rounds):
  // bf16 LayerNorm N = 20992 63.5 -> 84.5, 22528 65.6 -> 83.7, 24576 72.2 -> 83.5, 26624 70.6 ->
  // 83.9, 30720 76.2 -> 84.7; fp16 24576 69.1 -> 83.2; bf16 RMSNorm 16448 83.0 -> 93.2, 17408
  // 77.9 -> 93.7, 18432 78.7 -> 93.3; fp16 18432 78.6 -> 93.3.
  // Not rows every block of which is resident at once (decoding), which prefetch nothing.
  std::optional<KernelConfig> mid_rows_one_cta() const {
    if (!sixteen_bit_vectors || persistent || peel_rows || !full_vectors || !single_phase ||
        wide_phase || row_input_count(program) != 1)
      return std::nullopt;
    std::optional<KernelConfig> config;
    if (!comoments && chunks > 2 * 1024 && chunks <= kSixteenBitMidRowVectors) {
      config = KernelConfig{256, 1, vec, static_cast<int>(RowStorage::registers), 1};
    } else if (comoments && chunks > kSixteenBitMidComomentVectors &&
               chunks < kForwardClusterRowVectors) {
      if (launch_rows > 0 && m_bucket(launch_rows) <= resident_ctas(512)) return std::nullopt;
      config = KernelConfig{512, 1, vec, static_cast<int>(RowStorage::prefetched), 1};
    }
    if (!config || !fits(*config)) return std::nullopt;
    return config;
  }

  // bf16 backward rows of kShortBackwardMinVectors to kShortBackwardMaxVectors vectors (N =
  // 512-2048) run on one or two vectors per thread, prefetched: more warps per row, each with
  // fewer loads in flight, where the rules below gave each thread four to eight vectors. On the
  // H100, sixty-first session, bf16, M = 2^26 / N, % of the copy ceiling:
  // - the tuner's best (call 1, tilenorm-tune --show-candidates): reading saved statistics, 64 x
  //   4 at N = 512 and 1024, 128 x 2 at 2048; recomputing, the same threads on CTAs of 256 for
  //   LayerNorm (two column sums) and of 128 for one column sum (RMSNorm, LayerNorm without
  //   bias) among the best three to five candidates.
  // - the benchmark against the previous rules in one call (call 2), N = 512 / 1024 / 2048:
  //   saved LayerNorm +5.8 / +5.1 / +4.1 (to 95.0, 94.3, 93.4), RMSNorm +2.1 / +4.5 / +5.6,
  //   without bias -0.8 / +0.0 / +4.7; recomputing LayerNorm on 256 +2.4 / +5.0 / +5.3 (on 128:
  //   +3.8 / -4.0 / -3.0), RMSNorm on 128 +4.3 / +4.5 / +1.3, without bias +4.2 / +4.4 / +4.7 (on
  //   256: -1.2 / -4.2 / -0.7).
  // Not fp16 rows: the same call, saved statistics, LayerNorm -2.2 and -5.9 at N = 1024 and 2048
  // (113-115 registers where bf16's kernels took 74-79, two CTAs per SM instead of three), the
  // others within 1.6 points.
  std::optional<KernelConfig> short_backward_rows() const {
    if (!persistent || io_dtype != DType::bf16 || !full_vectors || peel_rows ||
        chunks < kShortBackwardMinVectors || chunks > kShortBackwardMaxVectors)
      return std::nullopt;
    const auto threads =
        static_cast<int>(std::max<std::int64_t>(kShortBackwardMinThreads, chunks / 2));
    const int cta_threads =
        recomputing_backward && !two_column_sums ? kSmallPersistentCta : kStackedCtaThreads;
    const KernelConfig config{threads, cta_threads / threads, vec,
                              static_cast<int>(RowStorage::prefetched), 1};
    if (!fits(config)) return std::nullopt;
    return config;
  }

  // Short 16-bit backward rows take the H100 tuner's best configurations on CTAs of 256
  // threads, where the other rules (short_backward_rows and the general ones) measured lower:
  // - recomputing, two column sums (LayerNorm): rows of 16 and 32 vectors (N = 128, 256) one
  //   vector per thread in registers; rows of 64 (N = 512) four vectors per thread in registers;
  // - reading saved statistics, two column sums, rows of 64 vectors: one vector per thread,
  //   prefetched (what short_backward_rows gives bf16; fp16 took 16 x 16 in registers);
  // - one column sum (RMSNorm, LayerNorm without bias), rows of 16 vectors: two vectors per thread,
  //   in registers where the backward recomputes (bf16 and fp16), prefetched where it reads
  //   saved statistics (bf16);
  // - recomputing with one column sum, rows of 32 vectors: RMSNorm (one reduction phase) four
  //   vectors per thread, prefetched; LayerNorm without bias (two phases) two, in registers.
  // The tuner (sixty-first session, call 2, tilenorm-tune --show-candidates, bf16, M = 2^26 / N,
  // % of the copy ceiling, against the rules): recomputing LayerNorm N = 128 on 16 x 16 91.8%
  // against 87.3% on 8 x 32 prefetched, N = 256 on 32 x 8 92.1% against 87.6%, N = 512 on 16 x 16
  // 91.8% against 87.2% on 64 x 4 prefetched; N = 128 on 8 x 32 recomputing RMSNorm 89.8% against
  // 88.3%, without bias 91.0% against 87.7%; reading saved statistics RMSNorm 90.8% against
  // 88.9%, without bias 92.8% against 90.1% (16 x 16 prefetched). At N = 256 with one column sum
  // the two kernels' best differed; since the sixty-fourth session they are told apart by their
  // reduction phases (below).
  // The benchmark against the rules, in the same call (H100, M = 2^26 / N): sixty-second session,
  // call 6, bf16 recomputing LayerNorm N = 128 88.3 -> 91.6%, 256 88.3 -> 91.7%, RMSNorm 128 89.3
  // -> 90.4%; sixty-third session, bf16 recomputing LayerNorm 512 90.5 -> 93.9%, saved RMSNorm
  // 128 90.5 -> 91.8%; fp16 recomputing LayerNorm 128 88.1 -> 92.5%, 256 88.1 -> 91.1%, RMSNorm
  // 128 89.7 -> 91.3% (NVRTC gives fp16 bf16's registers here: LayerNorm 64, one sum 75-79).
  // Sixty-fourth session, call 3, the tuner's final timings, chosen against the rules then:
  // RMSNorm recomputing N = 256 on 8 x 32 prefetched bf16 91.8% against 89.8% (fp16 92.2 in the
  // first round, against 89.4; call 1's benchmark 94.2 against 90.9); LayerNorm without bias
  // recomputing 256 on 16 x 16 registers bf16 91.7 against 91.4, fp16 91.7 against 85.9; fp16
  // LayerNorm recomputing 512 on 16 x 16 registers 90.4 (first round) against 85.8, its saved
  // backward on 64 x 4 prefetched 92.6 against 88.5.
  // Only for launches of more rows than one pass of such CTAs over the device covers: at M = 256
  // and 1000 (one row block per CTA) the sixty-second session measured LayerNorm 256 x 256 5.14 ->
  // 5.50 us and without bias 256 x 128 4.53 -> 4.83 us, 1000 x 128 4.87 -> 5.15 us.
  std::optional<KernelConfig> tuned_short_backward_rows() const {
    if (!persistent || !sixteen_bit_vectors || peel_rows) return std::nullopt;
    const bool bf16 = io_dtype == DType::bf16;
    int threads = 0;
    RowStorage storage = RowStorage::registers;
    if (recomputing_backward && two_column_sums && (chunks == 16 || chunks == 32)) {
      threads = static_cast<int>(chunks);  // one vector each
    } else if (recomputing_backward && two_column_sums && chunks == 64) {
      threads = static_cast<int>(chunks / 4);  // four vectors each
    } else if (!recomputing_backward && two_column_sums && chunks == 64) {
      threads = static_cast<int>(chunks);  // one vector each, as bf16's short_backward_rows
      storage = RowStorage::prefetched;
    } else if (!two_column_sums && chunks == 16 && (recomputing_backward || bf16)) {
      threads = static_cast<int>(chunks / 2);  // two vectors each
      if (!recomputing_backward) storage = RowStorage::prefetched;
    } else if (!two_column_sums && recomputing_backward && chunks == 32) {
      // One reduction phase (RMSNorm) four vectors each, prefetched; two (LayerNorm without
      // bias: the mean, then the variance and the row sums) two each, in registers.
      threads = static_cast<int>(single_phase ? chunks / 4 : chunks / 2);
      if (single_phase) storage = RowStorage::prefetched;
    } else {
      return std::nullopt;
    }
    const KernelConfig config{threads, kStackedCtaThreads / threads, vec, static_cast<int>(storage),
                              1};
    const std::int64_t rows_per_pass = resident_ctas(kStackedCtaThreads) * config.rows_per_cta;
    if (launch_rows > 0 && m_bucket(launch_rows) < rows_per_pass) return std::nullopt;
    if (!fits(config)) return std::nullopt;
    return config;
  }

  // A backward on one CTA per row block launched on fewer rows than its row blocks would spread
  // over every SM (decoding: M = 256) stacks fewer rows per CTA: at most as many as give each SM
  // one, but CTAs of at least kSmallForwardCta threads. Sixty-first session, H100, bf16, M = 256:
  // call 2, tilenorm-tune --show-candidates: LayerNorm N = 128 on 8 x 32 44.5 us, 8 x 8 9.0 us;
  // N = 256 on 16 x 16 27.9 us, 16 x 4 8.7 us; its recompute at N = 128 35.4 us on 8 x 32, 8.8
  // on 8 x 8; RMSNorm N = 128 on 16 x 16 9.2 us, 16 x 4 8.0 us; N = 1024 LayerNorm 11.6 us on
  // 64 x 1 against 15.2 on 64 x 4. Call 3, the benchmark against the previous rules: LayerNorm N =
  // 128 40.9 -> 5.0 us, 256 24.6 -> 5.0 us, RMSNorm 128 5.7 -> 4.3 us; one row per CTA at N = 2048
  // and 4096 lost 3-7% (RMSNorm 4096 on 64 x 1 9.78 us against 9.50 on 64 x 2).
  KernelConfig fit_to_launch(KernelConfig config) const {
    if (!persistent || launch_rows <= 0 || config.ctas_per_row != 1) return config;
    const auto per_sm = static_cast<std::uint64_t>(
        std::max<std::int64_t>(1, m_bucket(launch_rows) / limits.multiprocessors));
    const int fewest = std::max(1, kSmallForwardCta / config.threads_per_row);
    const int rows = std::max(fewest, static_cast<int>(std::min<std::uint64_t>(
                                          std::bit_floor(per_sm), config.rows_per_cta)));
    if (rows >= config.rows_per_cta) return config;
    KernelConfig fewer = config;
    fewer.rows_per_cta = rows;
    return fits(fewer) ? fewer : config;
  }

  // A co-moment forward (LayerNorm) whose rows are a little longer than kForwardClusterRowVectors
  // slices them raggedly on any cluster (two to three of four vectors per thread on 16 x 128):
  // its per-thread combines then cost more than the bytes. One CTA of 512 threads holds the row
  // in registers instead (forty-third session, calls 5-6, the benchmark's heuristic against
  // tilenorm-tune --show-candidates, M = 2^26 / N, % of the copy ceiling: bf16 N = 34816 73.7
  // against 54.1 on 16 x 128, 40960 76.5 against 61.9; fp32 N = 17408 86.1 against 74.4, 19456
  // 89.2 against 81.8). Past a quarter more, the clusters' slices fill up (bf16 45056 66.8, 49152
  // 83.8; fp32 21504 89.4) and the rule stops. Against 16 x 128 (forty-fourth session, call 1,
  // the benchmark, both trees in one call): bf16 N = 34816 53.9 -> 77.9, 36864 56.8 -> 80.2,
  // 38912 59.7 -> 78.4, 40960 61.8 -> 79.3; fp32 17408 74.1 -> 87.1, 18432 78.1 -> 90.1, 19456
  // 81.6 -> 90.5, 20476 84.1 -> 89.7.
  // Only programs of one row input, as measured: a second one (LayerNorm without weight or bias
  // recomputing its backward, x and dy) doubles the values per thread, and at bf16 N = 40000 its
  // 512 threads spilled 564 bytes (NVRTC 13.0); the spill rule then re-read the rows on 512
  // threads, 48.8% of the copy (seventy-sixth session, H100, the benchmark, M = 1677), where the
  // tuner ranked clusters first (M = 2048: 8 x 256 threads, prefetched, 73.8%, 16 x 128 69.3%,
  // against 50.3% re-reading).
  std::optional<KernelConfig> ragged_comoment_one_cta() const {
    // 32-bit rows of ten vectors per thread spill (fp32 N = 20480: 40 bytes at 128 registers).
    const std::int64_t longest = sixteen_bit_vectors ? 5 * kForwardClusterRowVectors / 4
                                                     : 5 * kForwardClusterRowVectors / 4 - 1;
    if (persistent || !single_phase || !comoments || !full_vectors || peel_rows ||
        row_input_count(program) != 1 || !limits.clusters() ||
        chunks <= kForwardClusterRowVectors || chunks > longest)
      return std::nullopt;
    const KernelConfig config{512, 1, vec, static_cast<int>(RowStorage::registers), 1};
    if (!fits(config)) return std::nullopt;
    return config;
  }

  // A co-moment forward (LayerNorm) whose row no power-of-two cluster tiles in sweeps of eight
  // vectors per thread takes a cluster of another size that does, on 128 or 64 threads
  // (prefetched, as the power-of-two tilings below; 256 threads of eight 16-bit vectors took
  // about 168 registers, one CTA per SM). Fiftieth session, the benchmark, M = 2^26 / N, an
  // H100 (3.02 TB/s), against 16 x 128 or 16 x 256 threads of ragged slices in the same call,
  // points of the copy ceiling (two calls where two are given): bf16 N = 45056 (11 x 64)
  // +0.6 / -0.3, 49152 (6 x 128) +3.3 / +3.6, 53248 (13 x 64) -0.1 / +1.8, 57344 (7 x 128)
  // +2.7 / +2.8, 61440 (15 x 64) +4.2 / +4.5, 98304 (12 x 128) +2.5 / +3.1; fp32 N = 20480
  // (5 x 128) +1.4 / +1.1, 22528 +5.3 / +3.8, 24576 +0.5, 26624 +2.8 / +3.1, 28672 +1.6, 30720
  // +2.7 / +2.3, 36864 (9 x 128) -3.4 / -3.4, 49152 +1.7, 57344 +3.4 / +2.8, 61440 +2.7.
  // Slices of five to seven vectors lost (bf16 43008 on 6 x 128 x 7 -1.9, 51200 on 10 x 128 x 5
  // -1.8; fp32 43008 on 12 x 128 x 7 -0.3), so those rows keep the ragged power of two.
  std::optional<KernelConfig> odd_cluster_tiling(int most_ctas) const {
    constexpr std::int64_t per_thread = 2 * kClusterVectorsPerThread;
    for (int threads : {128, 64}) {
      const std::int64_t sweep = per_thread * threads;
      if (chunks % sweep != 0) continue;
      const std::int64_t ctas = chunks / sweep;
      if (ctas < 3 || ctas > most_ctas || is_power_of_two(ctas)) continue;
      const KernelConfig config{threads, 1, vec, static_cast<int>(RowStorage::prefetched),
                                static_cast<int>(ctas)};
      if (fits(config)) return config;
    }
    return std::nullopt;
  }

  std::optional<KernelConfig> on_clusters(bool software_clusters) const {
    // A 16-bit backward with one column sum (RMSNorm's dweight) that reads saved statistics takes
    // a cluster already at kClusterRowVectors (fifteenth session, run 1, the benchmark, bf16 N =
    // 16384, M = 4096: 85.0% of the copy ceiling on 8 x 64 threads against 80.9% on one CTA).
    // Not when it recomputes (78.8% against 84.2%) or for fp32 rows (N = 8192: 92.0% against
    // 94.1%), nor for misaligned rows (not measured).
    // Since a cluster's CTAs may stack rows (thirty-ninth session), so does a bf16 row of
    // kStackedClusterRowVectors, LayerNorm's too: 4 CTAs of 64 threads x 4 rows, slices of a
    // quarter of kClusterSliceVectors that tile it exactly (fortieth session, calls 2-3, the
    // benchmark, M = 2^26 / N, % of the copy ceiling: bf16 N = 8192 LayerNorm 86.9 against 83.7
    // on one CTA of 256 threads, staged; RMSNorm 92.9 against 89.7 on 128 threads, prefetched).
    // Only there: fp16 rows ran slower (N = 8192: LayerNorm 65.4 against 88.9, RMSNorm 87.5
    // against 89.7), and so did ragged slices of 128 threads (bf16 N = 10240, 12288 and 14336:
    // LayerNorm 51.4, 75.3 and 61.0 against 74.3, 77.7 and 78.5; RMSNorm 76.1, 81.7 and 85.0
    // against 89.4, 90.0 and 90.6) and LayerNorm at N = 16384 on 8 x 64 x 4 (bf16 85.2 against
    // 85.6, fp16 64.9 against 85.7; bf16 takes it since the sixtieth session, below).
    const bool aligned_narrow_backward = narrow_backward && !peel_rows;
    // So does a recomputing one (LayerNorm and RMSNorm), whose one-CTA rows there measured 84.1
    // and 86.3% against 94.4 and 89.2% reading saved statistics on the stacked cluster (H100,
    // forty-seventh session). On the cluster (H100, fifty-second session): RMSNorm 86.6 -> 89.4%,
    // LayerNorm 84.1 -> 84.8%.
    const bool stacked_cluster_backward =
        (aligned_narrow_backward || (recomputing_backward && full_vectors && !peel_rows)) &&
        io_dtype == DType::bf16 && chunks == kStackedClusterRowVectors;
    // LayerNorm's rows (two column sums) between kStackedClusterRowVectors and
    // kClusterRowVectors that slices of the same shape (64 threads of four vectors, four rows
    // per CTA) tile exactly on a cluster of another size than a power of two, 5, 6 or 7 CTAs
    // (bf16 N = 10240, 12288, 14336), take it: on powers of two their slices were ragged and lost
    // to one CTA (above). Fifty-first session, calls 2 and 3, the benchmark, M = 2^26 / N, an
    // H100 (3.02 TB/s), against one CTA in the same call, % of the copy ceiling: LayerNorm 91.9
    // against 84.1 / 85.5, 91.8 / 91.9 against 89.2 / 89.3, 90.9 / 90.6 against 88.8 / 88.8.
    // Not RMSNorm's (one column sum), which gained nothing: 87.6 against 92.7 (88.7 in call 3),
    // 87.7 against 87.5, 85.9 against 87.7.
    if (!software_clusters && aligned_narrow_backward && two_column_sums &&
        io_dtype == DType::bf16 && chunks > kStackedClusterRowVectors &&
        chunks < kClusterRowVectors && chunks % kStackedSliceVectors == 0 && limits.clusters()) {
      const auto ctas = static_cast<int>(chunks / kStackedSliceVectors);
      const int threads = static_cast<int>(kStackedSliceVectors / kClusterVectorsPerThread);
      const KernelConfig config{threads, stacked_cluster_rows(program, threads, chunks), vec,
                                static_cast<int>(RowStorage::prefetched), ctas};
      if (ctas <= limits.cluster_ctas && fits(config)) return config;
    }
    // LayerNorm's aligned bf16 rows of kClusterRowVectors (N = 16384) take the configurations
    // the tuner chose there once the partial rows left in 16-byte stores (fifty-ninth session):
    // saved statistics on 8 x 64 threads x 4 rows, recomputing on 4 x 256 (sixtieth session,
    // H100, tilenorm-tune --show-candidates, M = 4096, % of the copy ceiling: saved 93.1
    // against 87.5 on one CTA of 512 threads, staged, and 85.3 on 256; recomputing 88.1 against
    // 79.4 on 512, staged; the benchmark against the one-CTA rule in one call: 90.7 -> 94.7%,
    // 80.2 -> 88.1%). Not fp16 rows, unmeasured since they ran 64.9% there (above).
    // Its recompute at kStackedClusterRowVectors (N = 8192) takes 4 x 128 x 2 rows (the same
    // tuner run, M = 8192, 87.0% against 84.0% on the stacked cluster's 4 x 64 x 4; sixty-first
    // session, call 1, the benchmark against that cluster in the same call: 84.9 -> 89.6%).
    const bool tuned_cluster_rows = !software_clusters && io_dtype == DType::bf16 && full_vectors &&
                                    !peel_rows && limits.clusters() && limits.cluster_ctas >= 8;
    const bool tuned_two_sum_rows = tuned_cluster_rows && two_column_sums;
    if (tuned_two_sum_rows && chunks == kClusterRowVectors) {
      const KernelConfig config =
          !recomputing_backward
              ? KernelConfig{64, 4, vec, static_cast<int>(RowStorage::prefetched), 8}
              : KernelConfig{256, 1, vec, static_cast<int>(RowStorage::prefetched), 4};
      if (fits(config)) return config;
    }
    if (tuned_two_sum_rows && recomputing_backward && chunks == kStackedClusterRowVectors) {
      const KernelConfig config{128, 2, vec, static_cast<int>(RowStorage::prefetched), 4};
      if (fits(config)) return config;
    }
    // RMSNorm's recompute (one column sum) on aligned bf16 rows of kClusterRowVectors takes the
    // tuner's 8 x 128 threads, prefetched, where the one-CTA rule gave it 256 threads of eight
    // vectors (253 registers). Sixty-fourth session, call 4, H100, tilenorm-tune
    // --show-candidates, M = 4096, the tuner's final timings: 144.1 us (92.7% of the copy)
    // against 160.8 us (83.1%); the benchmark had measured the one CTA at 86.1% (call 3).
    // Not LayerNorm without bias (two reduction phases, so two exchanges per row): unmeasured.
    if (tuned_cluster_rows && recomputing_backward && !two_column_sums && single_phase &&
        chunks == kClusterRowVectors) {
      const KernelConfig config{128, 1, vec, static_cast<int>(RowStorage::prefetched), 8};
      if (fits(config)) return config;
    }
    const bool cluster_backward =
        persistent &&
        (chunks > kClusterRowVectors ||
         (chunks == kClusterRowVectors && !two_column_sums && aligned_narrow_backward) ||
         stacked_cluster_backward);
    // Since the row exchange pushes with st.async (no fence per row; tenth session), a co-moment
    // forward takes a cluster at kForwardClusterRowVectors already: LayerNorm bf16 N = 32768
    // (M = 2048) on 4 x 256 threads, prefetched, 80.8% against 75.6% on one CTA of 512 threads.
    // So does an aligned forward with one reduction per phase (RMSNorm), on the long-slice rule
    // below (twenty-eighth session, run 4, the benchmark, M = 2^26 / N: bf16 N = 32768 on 8 x 64
    // threads of eight vectors 88.5% against 86.5% on one CTA of 1024 threads; fp32 N = 16384
    // 91.2% either way). Not peeled rows: bf16 N = 32767 83.0% against 84.7% on 4 x 256 threads.
    const bool cluster_forward = !persistent && single_phase &&
                                 (comoments || (!wide_phase && full_vectors && !peel_rows)
                                      ? chunks >= kForwardClusterRowVectors
                                      : chunks > kForwardClusterRowVectors);
    // Misaligned (peeled) rows of a one-phase 16-bit forward with co-moments (LayerNorm) past
    // kLongRowVectors take a cluster of two: its persistent CTAs keep one misalignment each, so
    // they shift the column parameters into shared memory once, not per row (thirteenth session,
    // tilenorm-tune --show-candidates, bf16 N = 12345, M = 5436: LayerNorm on 2 x 256 threads,
    // prefetched, 60.5% of the copy ceiling against 48.4% on one CTA of 256 threads).
    // Where they fit (now only at 2049 vectors: below, the aligned rows' configuration, next),
    // they instead run persistent CTAs of one row each, prefetched, of at most
    // kClusterVectorsPerThread * 2 vectors per thread, which copy the whole row's parameters where
    // they fit (twenty-second session, run 3, the benchmark, M = 2^26 / N, against the cluster of
    // two: bf16 N = 8193 77.9% against 60.1%, 12345 74.2% against 66.1%; fp16 70.8% against 59.7%
    // and 73.6% against 66.7%). RMSNorm (no co-moments) takes the aligned rows' configuration, one
    // CTA in registers: since a forward's first pass takes its tested sweep first, that ran ahead
    // of the cluster of two (twenty-fifth session, run 3, tilenorm-tune --show-candidates, bf16: N
    // = 8193 on 256 threads 88.0% against 81.3%, 12345 on 256 86.8% against 84.5%, 16383 on 512
    // 83.1% against 80.2%; run 4, the benchmark: 8193 82.8 -> 91.0%, 16383 82.2 -> 84.9%). Up to
    // kForwardClusterRowVectors / 2 vectors: at bf16 N = 20001 its 512 threads took 88 registers
    // and ran 67.4% against 87.8% on the cluster (of four; run 4).
    // Not for 32-bit rows, whose peeled chunks ran faster on one CTA per row, in registers
    // (nineteenth session, run 1, tilenorm-tune --show-candidates, fp32, M = 2^26 / N: N = 4097
    // LayerNorm at 128 threads 88.9% against 75.9% on 2 x 256, RMSNorm at 256 threads 93.0%
    // against 86.1%; N = 12345 RMSNorm at 512 threads 94.9% against 88.4% on 4 x 256, LayerNorm
    // 85.4% against 87.4%).
    // Threads for one vector more than the row's: the configurations measured above, when a
    // peeled row took two chunk slots more for its remainder (until the twenty-fourth session).
    // Since then LayerNorm's copy fits up to N = 16391 in bf16 and fp16 (2048 vectors on 512
    // threads, 64 KiB), which took it off the cluster of two at N = 16383 (twenty-fourth
    // session, run 2, the benchmark: bf16 73.1 -> 81.8%, fp16 62.1 -> 82.5%).
    // LayerNorm now does the same up to kForwardClusterRowVectors / 2 vectors: in registers on
    // 256 threads it ran ahead of its persistent CTAs with the copy (sixty-fifth session, H100,
    // tilenorm-tune --show-candidates, bf16, M = 8192: N = 8193 90.7% against 81.3%, 12345 93.3%
    // against 82.3%, 16383 94.1% against 89.0% on 512 threads).
    const bool peeled_long_forward = !persistent && single_phase && peel_rows &&
                                     chunks > kForwardClusterRowVectors / 2 &&
                                     dtype_size(io_dtype) < 4;
    if (limits.clusters() && peeled_long_forward && comoments && !cluster_forward) {
      const std::int64_t per_thread = 2 * kClusterVectorsPerThread;
      const KernelConfig copied{next_power_of_two((row_slots + per_thread - 1) / per_thread), 1,
                                vec, static_cast<int>(RowStorage::prefetched), 1};
      if (copied.threads_per_row <= 1024 && fits(copied) &&
          column_stash_bytes(program, {io_dtype, param_dtype, n, copied, peel_rows}) > 0)
        return copied;
    }
    // So do misaligned rows of a backward past kLongRowVectors, on a cluster of four (same runs,
    // N = 12345 on 4 x 128 threads in registers against one CTA of 256 threads, prefetched:
    // RMSNorm 61.1% against 44.6%, recomputing 58.3% against 43.8%; LayerNorm 44.7% against
    // 37.6%, recomputing 42.2% against 34.2%). Its slices are prefetched, not in registers
    // (sixty-fifth session, H100, tilenorm-tune --show-candidates, bf16, M = 8192, 4 x 128
    // threads: N = 8193 RMSNorm 84.7% against 79.6%, LayerNorm 80.8% against 75.0%, recomputing
    // 76.3% against 69.5%; N = 12345 RMSNorm 90.8% against 82.6%, LayerNorm 81.4% against 73.0%;
    // M = 4096, N = 16383 RMSNorm 79.0% against 76.7%).
    const bool peeled_cluster_backward =
        persistent && peel_rows && chunks > kLongRowVectors && !cluster_backward;
    // A backward with two column sums (LayerNorm's dweight and dbias) keeps half the slice, four
    // vectors per thread, prefetched (tenth session, tilenorm-tune --show-candidates, bf16,
    // saved statistics: N = 32768 M = 2048 on 8 x 128 threads 54.9% against 47.2% on 4 x 512 in
    // registers; 65536 M = 1024 on 16 x 128 48.8% against 44.8%; 131072 M = 512 on 16 x 256 41.0%
    // against 38.0%; 262144 M = 256 on 16 x 512 31.7% against 29.4%; recomputing, N = 32768 on
    // 8 x 128 52.9% against 48.1% on 4 x 256, 65536 46.0% either way).
    // Without thread-block clusters, a backward row of kSoftwareClusterRowVectors or more splits
    // across a software cluster of as many CTAs as a hardware one would take, exchanging its
    // totals in global memory (KernelSpec::global_exchange): on one CTA of 1024 threads those
    // rows' column partial sums spill, 0.8-22 KiB per thread for NVRTC 13.0 at N = 65536-262144,
    // and with the A100's limits on an H100 it measured 1.2-7.2x faster than one CTA
    // (docs/portability.md; kOneSumSoftwareClusterRowVectors for the exception). So does one that a
    // GPU's smaller clusters cannot take (heuristic_config asks for software clusters only then; on
    // the RTX 5090, RMSNorm at bf16 N = 262144 and LayerNorm at 131072 went to one CTA, which
    // spilled 3.8-11 KiB).
    const bool software_cluster =
        software_clusters && can_run_software_clusters &&
        (cluster_backward || peeled_cluster_backward) &&
        (limits.clusters() ? limits.cluster_ctas < kMaxClusterCtas
                           : chunks >= (two_column_sums ? kSoftwareClusterRowVectors
                                                        : kOneSumSoftwareClusterRowVectors));
    if (software_cluster ||
        (limits.clusters() &&
         (cluster_backward || cluster_forward || peeled_long_forward || peeled_cluster_backward))) {
      // A co-moment forward keeps half the slice too (thirteenth session, tilenorm-tune
      // --show-candidates, bf16: LayerNorm N = 32768, M = 2048, on 8 x 128 threads 84.3% against
      // 79.1% on 4 x 256; 65536 on 16 x 128 84.9% against 84.2% on 8 x 256).
      // A backward with one column sum keeps a quarter (fifteenth session, run 1, the benchmark,
      // M = 2^26 / N, against slices of 1024 vectors: bf16 N = 32768 on 16 x 64 threads 81.0%
      // against 79.0%, recomputing 81.6% against 74.2%; N = 65536 on 16 x 128 76.4% against
      // 75.6%, recomputing 77.1% against 74.0%; fp32 N = 16384 95.9% against 90.7%, 32768 92.9%
      // against 90.0%).
      const std::int64_t slice_limit =
          cluster_backward && (!two_column_sums || stacked_cluster_backward)
              ? kClusterSliceVectors / 4
          : (cluster_backward && two_column_sums) || (cluster_forward && comoments)
              ? kClusterSliceVectors / 2
              : kClusterSliceVectors;
      // A one-phase forward without co-moments takes the largest cluster (tenth session, bf16:
      // RMSNorm N = 65536 on 16 x 256 threads 85.6%, 16 x 128 84.5%, against 83.0% on 4 x 512;
      // 131072 on 16 x 256 87.4% against 84.3% on 8 x 512; 262144 already took 16).
      // The largest cluster the device runs (16 CTAs on the H200; 8 where only the portable
      // size runs).
      const int most_ctas =
          software_cluster ? kMaxClusterCtas : std::min(kMaxClusterCtas, limits.cluster_ctas);
      int ctas = cluster_forward && !comoments ? most_ctas
                 : peeled_long_forward         ? 2
                 : peeled_cluster_backward     ? 4
                                               : 1;
      while (ctas < most_ctas && (chunks + ctas - 1) / ctas > slice_limit &&
             chunks / (2 * ctas) >= kMinClusterSliceVectors)
        ctas *= 2;
      // A co-moment on slices past the limit (a cluster of 16 is too small) takes 512 threads
      // per CTA: since its variance states shuffle two floats, not four (eighth session), that
      // measured 52.1% of the copy ceiling against 41.6% re-read from L2 by one CTA of 1024
      // (LayerNorm bf16 N = 262144, M = 256; before, 36.5% against 43%). Slices of 1024 threads
      // measured below one CTA per row (27.0%), so longer ones still go there.
      // Four vectors per thread, prefetched where the registers allow, but for the two long-slice
      // rules next. A cluster whose slices need more than that is not worth it, and the row goes
      // to one CTA below.
      // A cluster too large for its threads leaves its last CTAs without columns (which
      // config_problem refuses): then the next smaller cluster.
      constexpr std::int64_t per_thread = kClusterVectorsPerThread;
      // A forward whose slices tile the row exactly holds eight full vectors per thread, on a
      // cluster of 16 without co-moments and of 8 with them: twice the bytes in flight per thread
      // (eighteenth session, runs 2-3, the benchmark, M = 2^26 / N, % of the copy ceiling, against
      // four vectors per thread below):
      // - bf16 LayerNorm N = 32768 on 8 x 64 threads 88.3 / 88.5 against 85.2 / 85.5, 65536 on
      //   8 x 128 88.8 / 88.9 against 87.7 / 87.9, 262144 on 8 x 512 78.4 / 78.6 against
      //   62.6 / 62.1 (16 CTAs of 512 threads, one per SM, fit 7 times on the H200's 132 SMs, 8
      //   of them 16 times);
      // - bf16 RMSNorm N = 131072 on 16 x 128 90.9 / 91.0 against 90.1 / 90.4, 262144 on
      //   16 x 256 89.4 / 90.0 against 87.3 / 88.5; 65536 on 16 x 64 undecided (91.9 against 87.9
      //   in run 2, 89.3 against 91.6 in run 3);
      // - fp32 LayerNorm (run 3) N = 16384 on 8 x 64 90.0 against 88.2, 32768 on 8 x 128 90.2
      //   against 87.9, 65536 on 8 x 256 92.3 against 88.6, 131072 on 8 x 512 86.3 against 81.0;
      //   RMSNorm N = 32768 on 16 x 64 92.1 against 91.4, 65536 on 16 x 128 91.8 against 90.5,
      //   131072 on 16 x 256 93.1 against 93.4.
      // Not 16-bit LayerNorm's slices of 256 threads: at about 168 registers one such CTA fits
      // per SM, 8 warps (bf16 N = 131072 on 8 x 256: 70.7 against 86.8). Peeled rows may: their
      // persistent grid holds whole periods of 8 row shifts, so of the 21 clusters of 16 x 256
      // threads that fit, 16 ran, where 24 of the 30 of 8 x 256 run (thirty-second session, the
      // benchmark, against 16 x 256: bf16 N = 131071 58.8 -> 76.5%, fp16 66.9 -> 75.9%; N =
      // 131073, on 16 x 512 before, 31.5 -> 77.5% and 31.1 -> 76.9%).
      // So do peeled rows where their whole vectors (the slices' chunk slots; the remainder
      // elements go one per thread outside them) leave at most each CTA's last sweep partly
      // empty, as their aligned neighbours do (twenty-seventh session, run 2, the benchmark,
      // against 9d23656: bf16 LayerNorm N = 32769 57.4 -> 81.8%, 65537 47.1 -> 80.7%, 262143
      // 38.1 -> 54.8%, RMSNorm 65537 80.3 -> 85.7%, 262143 54.0 -> 77.4%; fp32 LayerNorm 16385
      // 70.0 -> 89.7%, 32769 66.4 -> 87.5%, 65537 65.6 -> 87.7%, 131071 80.1 -> 86.8%, RMSNorm
      // 32769 89.0 -> 90.6%, 131071 89.3 -> 90.5%; 65535, whose 16383 vectors fill the sweeps
      // but one, bf16 RMSNorm 86.8 -> 85.5%, fp32 91.6 -> 89.6%, LayerNorm 74.1 -> 78.4% and
      // 86.6 -> 87.1%).
      if (cluster_forward && full_vectors) {
        constexpr std::int64_t per_thread_long = 2 * kClusterVectorsPerThread;
        const std::int64_t sliced = peel_rows ? std::max<std::int64_t>(n / vec, 1) : chunks;
        auto sweep = [](int ctas) { return std::int64_t{ctas} * per_thread_long; };
        auto slice_threads = [&](int ctas) { return (sliced + sweep(ctas) - 1) / sweep(ctas); };
        int long_ctas = std::min(comoments ? kMaxClusterCtas / 2 : kMaxClusterCtas, most_ctas);
        // Aligned rows too short for kSmallForwardCta threads on each of 16 CTAs take 8 (peeled
        // ones measured slower that way: bf16 RMSNorm N = 32769 83.2% against 85.3% on 16 x 128
        // threads of two vectors, fp32 16385 88.6% against 89.2%).
        if (!comoments && !peel_rows && slice_threads(long_ctas) < kSmallForwardCta) long_ctas /= 2;
        const std::int64_t threads = slice_threads(long_ctas);
        // Vector slots the slices may leave empty: none for aligned rows.
        const std::int64_t empty_slots = peel_rows ? threads * long_ctas : 1;
        const bool exact =
            is_power_of_two(threads) && threads * sweep(long_ctas) - sliced < empty_slots;
        const bool one_narrow_cta_per_sm = comoments && vec == 8 && threads == 256 && !peel_rows;
        if (exact && threads >= kSmallForwardCta && threads <= kLongSliceThreads &&
            !one_narrow_cta_per_sm) {
          const KernelConfig config{static_cast<int>(threads), 1, vec,
                                    static_cast<int>(RowStorage::prefetched), long_ctas};
          if (fits(config)) return config;
        }
        if (comoments && !peel_rows) {
          if (std::optional<KernelConfig> odd = odd_cluster_tiling(most_ctas)) return odd;
        }
      }
      // A forward whose slices on a cluster of 16 would take more than 512 threads of four
      // vectors (fp32 N = 262144: 4096 vectors) takes 512 threads of eight, prefetched (fifteenth
      // session, run 2, the benchmark, M = 256: RMSNorm 91.3% of the copy ceiling against 52.0% on
      // 1024 threads of four in registers and 68.4% on 512 of eight in registers; LayerNorm 81.8%
      // against 47.1% re-reading its row from L2 on one CTA). So do peeled rows, which otherwise
      // went to one CTA re-reading its row from L2 (twenty-sixth session, run 2, the benchmark,
      // fp32 N = 262143: LayerNorm 40.8%, RMSNorm 53.7%).
      const std::int64_t widest_slice = (chunks + ctas - 1) / ctas;
      if (!persistent && ctas == most_ctas && widest_slice > kLongSliceThreads * per_thread &&
          widest_slice <= kLongSliceThreads * 2 * per_thread) {
        const KernelConfig config{kLongSliceThreads, 1, vec,
                                  static_cast<int>(RowStorage::prefetched), ctas};
        if (fits(config)) return config;
      }
      // Peeled rows of a 16-bit backward of more than two and at most four kClusterRowVectors
      // whole vectors (bf16 N = 32777-65543) take 8 CTAs of 256 threads, prefetched: the
      // persistent grid of peeled rows holds whole periods of their 8 shifts, so of the 14
      // clusters of 16 x 256 threads resident on an H100, 8 ran, where 24 of the 30 of 8 x 256
      // run (sixty-fifth session, H100, the benchmark with the configuration forced, bf16 N =
      // 65537, M = 1023, % of the copy: RMSNorm 85.1 against 55.5 on 16 x 256, LayerNorm 71.2
      // against 57.3; 16 x 128 prefetched 84.5 and 71.7; the benchmark against the rule before
      // it, same session: RMSNorm 84.6 against 55.6, recomputing 80.9 against 64.3; LayerNorm
      // 71.2 against 57.4). Not a recompute of two phases (LayerNorm's mean, then the rest):
      // LayerNorm's ran 33.9% there, against 53.6% on 16 x 256.
      const std::int64_t body_vectors = n / vec;
      if (cluster_backward && peel_rows && sixteen_bit_vectors && most_ctas >= 8 &&
          !(recomputing_backward && !single_phase) && body_vectors > 2 * kClusterRowVectors &&
          body_vectors <= 4 * kClusterRowVectors) {
        const KernelConfig config{kLongSliceThreads / 2, 1, vec,
                                  static_cast<int>(RowStorage::prefetched), 8};
        if (fits(config)) return config;
      }
      // A recomputing bf16 backward at twice kClusterRowVectors (N = 32768) runs two vectors per
      // thread on twice the threads (sixty-fourth session, call 4, H100, tilenorm-tune
      // --show-candidates, M = 2048, % of the copy: LayerNorm on 8 x 256 88.6 against 83.4 on
      // 8 x 128; RMSNorm on 16 x 128 92.0 against 88.6 on 16 x 64). The benchmark against the
      // rule before it (sixty-fifth session, call 1, H100, one process each): LayerNorm 90.5
      // against 84.4, LayerNorm without bias 91.2 against 86.5, RMSNorm 94.2 against 90.2.
      const std::int64_t slice_per_thread = cluster_backward && recomputing_backward &&
                                                    io_dtype == DType::bf16 && !peel_rows &&
                                                    chunks == 2 * kClusterRowVectors
                                                ? per_thread / 2
                                                : per_thread;
      for (int split = ctas; split > 1; split /= 2) {
        const std::int64_t slice = (chunks + split - 1) / split;
        if ((comoments && slice > 2 * kClusterSliceVectors) || slice > per_thread * 1024) break;
        const int threads = std::clamp(
            next_power_of_two((slice + slice_per_thread - 1) / slice_per_thread), 32, 1024);
        // A backward that reads saved statistics stacks rows on its prefetched slices, up to
        // kStackedClusterRows rows and kStackedClusterThreads threads per CTA: one exchange
        // serves them all, and each CTA leaves one partial row for all of its rows, so the
        // workspace shrinks by the same factor (thirty-ninth session, calls 1-2, the benchmark,
        // M = 2^26 / N, % of the copy ceiling, against one row per CTA: bf16 LayerNorm N = 32768
        // on 8 x 128 x 4 79.8 against 75.5, 65536 on 16 x 128 x 4 74.9 against 71.3, 131072 on
        // 16 x 256 x 2 67.0 against 64.9; RMSNorm 16384 on 8 x 64 x 4 94.6 against 90.1, 32768
        // on 16 x 64 x 4 93.1 against 88.8, 65536 on 16 x 128 x 4 85.6 against 83.0; fp32
        // LayerNorm 16384 on 8 x 128 x 4 95.3 against 89.7, 32768 on 16 x 128 x 4 97.6 against
        // 93.3; RMSNorm 65536 on 16 x 256 x 2 97.2 against 96.0). Eight rows of 64 threads
        // measured slower than four (RMSNorm bf16 16384 83.5, 32768 89.9), and so did stacked
        // rows of recomputing backwards (LayerNorm bf16 65536 on 16 x 128 x 4 61.2 against 65.1).
        const int stacked = stacked_cluster_rows(program, threads, chunks);
        if (cluster_backward && !peel_rows && stacked > 1) {
          const KernelConfig config{threads, stacked, vec, static_cast<int>(RowStorage::prefetched),
                                    split};
          if (fits(config)) return config;
        }
        for (RowStorage storage : {RowStorage::prefetched, RowStorage::registers}) {
          const KernelConfig config{threads, 1, vec, static_cast<int>(storage), split};
          if (fits(config)) return config;
        }
      }
      // A backward whose slices take more than 1024 threads of four vectors (fp32 N = 262144: x
      // and dy rows of 1 MiB each) keeps them in registers on 512 threads of eight, without
      // prefetching (fifteenth session, run 3, the benchmark, M = 256, against 1024 threads
      // re-reading their slices from L2: LayerNorm 45.1% of the copy ceiling against 41.4%,
      // recomputing 42.2% against 30.8%; RMSNorm 56.7% against 52.8%, recomputing 55.0% against
      // 50.2%). Where those do not fit either, the cluster re-reads from L2: it has one row block
      // (2 MiB) in flight at a time, so the grid's rows stay in L2, where one CTA per row re-read
      // up to 132 of them from HBM (fp32 N = 262144: 8.7% for LayerNorm's backward, 19.3% for
      // RMSNorm's, eighth session).
      // Backwards whose threads hold eight whole 16-byte vectors of 32-bit rows on those slices
      // (fp32 N = 262144) stage the next row block's dy in shared memory (cp.async) and load x
      // at each row's start (fit_shared_memory), where that measured faster: the registers hold
      // no second set, and dy's copies are in flight through each row's exchange and stores.
      // The benchmark, M = 256, % of the copy ceiling, dy staged against registers:
      // - a recomputing backward with two column sums (LayerNorm's): 86.3 against 74.1 (H100,
      //   sixty-eighth session);
      // - one column sum beside a phase of two row sums (sixty-ninth session, H200): LayerNorm
      //   without bias saved 75.1 against 67.4, recomputing 67.3 against 61.7; RMSNorm
      //   recomputing (its rstd's sum beside the gradient's) 68.1 against 66.7.
      // Not the others: LayerNorm's saved backward 60.4 against 64.5 (H200; H100 69.4 against
      // 80.1), RMSNorm's saved backward (one row sum) 60.7 against 66.3 (H200).
      const bool staged_slices_faster = two_column_sums ? recomputing_backward : paired_row_sums;
      if (cluster_backward && staged_slices_faster && dtype_size(io_dtype) == 4 &&
          chunks == std::int64_t{kLongSliceThreads} * ctas * 2 * kClusterVectorsPerThread) {
        const KernelConfig staged{kLongSliceThreads, 1, vec, static_cast<int>(RowStorage::staged),
                                  ctas};
        const KernelSpec fitted =
            fit_shared_memory(program, {io_dtype, param_dtype, n, staged, peel_rows}, limits);
        if (!config_problem(program, fitted) && !fitted.partials_in_registers &&
            dynamic_shared_memory_bytes(program, fitted) + kStaticSharedReserve <=
                limits.shared_memory_per_block)
          return staged;
      }
      if (cluster_backward) {
        const KernelConfig long_slices{kLongSliceThreads, 1, vec,
                                       static_cast<int>(RowStorage::registers), ctas};
        if (fits(long_slices)) return long_slices;
        const KernelConfig global{1024, 1, vec, static_cast<int>(RowStorage::global), ctas};
        if (fits(global)) return global;
      }
    }
    return std::nullopt;
  }

  KernelConfig on_one_cta() const {
    // One CTA per row, in registers: about four vectors per thread, as few threads per row as
    // that allows. Programs with two reduction phases (LayerNorm) keep up to eight vectors per
    // thread on long rows: fewer warps per row make each phase's barrier cheaper (H200, N =
    // 16384: 256 threads per row 86.9% of the copy ceiling, 512 threads 57%).
    // A persistent kernel that does not stage its rows (below) prefetches them into registers, on
    // sm_90 up to kPrefetchRegisters registers of raw chunks (NVRTC 13.0 for sm_80-sm_89 spilled
    // 72-160 bytes in such kernels at N = 4096, where sm_90 fits them in 255 registers; for
    // sm_100 and sm_120 it spilled 216-312 bytes at N = 4096 and 2036-2160 at recomputing
    // LayerNorm's N = 2048, bf16).
    // With that room it takes eight vectors per thread from rows of 512 vectors, 64 threads per row
    // (H200, bf16, tilenorm-tune --show-candidates, seventh session, prefetched:
    // recomputing LayerNorm N = 4096 at 64 threads x 2 rows 80.6% of the copy ceiling, 128
    // threads 74.6%; N = 8192 at 128 x 2 72.1%, 256 threads 62.9%; RMSNorm N = 4096 86.3%
    // against 83.9%, recomputing 88.6% against 84.9%).
    const std::int64_t raw_bytes = row_input_bytes(program, io_dtype, param_dtype);
    // The register counts below were calibrated with NVRTC for sm_90; ptxas for other
    // architectures allocates differently (see the spills in codegen_test).
    const bool calibrated_registers = limits.compute_capability / 10 == 9;
    auto prefetch_fits = [&](std::int64_t values_per_thread) {
      return values_per_thread <= kPrefetchValues ||
             (persistent && !stages_rows && calibrated_registers &&
              2 * values_per_thread * raw_bytes / 4 <= kPrefetchRegisters);
    };
    // A program with two reduction phases (recomputing LayerNorm) does so too on rows that 32
    // threads cover with eight vectors each, 256 vectors (fourteenth session, run 6, against 64
    // threads: bf16 N = 2048 88.7% against 86.2%, fp32 N = 1024 91.5% against 89.3%). One-phase
    // programs measured slower there (RMSNorm recomputing bf16 N = 2048 87.0% against 92.7%,
    // backward fp32 N = 1024 92.2% against 97.4%), and rows between 256 and 512 vectors (64
    // threads, five to seven vectors each) were not measured, so they keep four; nor were
    // peeled rows, which would hold eight vectors in registers.
    const bool long_prefetch = prefetch_fits(8 * vec) && 8 * vec > kPrefetchValues;
    const bool two_phase_long_prefetch =
        long_prefetch && !single_phase && !peel_rows && chunks == 8 * kTwoPhaseLongPrefetchThreads;
    // 16-bit rows of a power of two vectors past kLongRowVectors that a backward stages (below)
    // hold eight vectors per thread, half the threads of four (twenty-eighth session, runs 2 and
    // 4, bf16, M = 2^26 / N, % of the copy ceiling: LayerNorm N = 16384 staged on 256 threads
    // 85.6% against 78.1% on 512). Not rows that eight vectors per thread leave ragged in the
    // registers: N = 12288 on 256 threads staged 69.4% against 77.8% on 512 prefetched, 14336
    // 73.2% against 78.6% staged. Only on sm_90 (NVRTC 13.0: 249 registers, no spills): for
    // sm_100 and sm_120 it spilled 2104-2108 bytes at N = 16384 whatever the CTAs per SM asked.
    const bool long_staged_rows = stages_rows && sixteen_bit_vectors && chunks > kLongRowVectors &&
                                  is_power_of_two(chunks) && calibrated_registers;
    // Past kLongRowVectors, a backward that stages does not take one power of two fewer threads
    // for rows of five times a power of two vectors, which would then stage five vectors per
    // thread (twenty-ninth session, run 3, the
    // benchmark, M = 2^26 / N, % of the copy ceiling: LayerNorm bf16 N = 10240 on 512 threads
    // of two or three vectors, prefetched, 74.2% against 63.6% on 256 threads of five, staged,
    // which take 200 registers; fp16 74.2% against 67.2%; 16-bit rows only: fp32 ones hold half
    // the values per vector and were not measured). Ragged rows there keep 256 threads in
    // registers (N = 8200: 75.9% against 71.8% on 512 threads, prefetched).
    const bool five_staged_vectors = stages_rows && sixteen_bit_vectors &&
                                     chunks > kLongRowVectors && chunks % 5 == 0 &&
                                     is_power_of_two(chunks / 5);
    // A recomputing backward keeps four vectors per thread, not eight, on rows of a power of two
    // vectors past kLongRowVectors, so that it can stage them (N = 16384 on 512 threads); on
    // other rows 512 threads of three or four vectors, prefetched, spilled 40-56 bytes there.
    const bool long_recomputed_rows =
        stages_recomputed_rows && chunks > kLongRowVectors && is_power_of_two(chunks);
    const bool long_two_phase_rows = (!single_phase || comoments || wide_phase) &&
                                     chunks > kLongRowVectors && !long_recomputed_rows;
    const std::int64_t vectors_per_thread =
        (long_prefetch && chunks >= 8 * kLongPrefetchThreads && !long_recomputed_rows) ||
                two_phase_long_prefetch || long_two_phase_rows || long_staged_rows
            ? 8
            : 4;
    // Nor does a peeled 16-bit forward of such rows (the tuner's 256 threads at bf16 LayerNorm
    // N = 8193, above; 128 threads of nine vectors were not measured). 32-bit rows do (fp32
    // LayerNorm N = 4097 on 128 threads, nineteenth session, above).
    const bool peeled_long_forward_rows =
        peel_rows && !persistent && sixteen_bit_vectors && long_two_phase_rows;
    int first_threads = fewest_threads(chunks, vectors_per_thread, narrowest, persistent,
                                       five_staged_vectors || peeled_long_forward_rows);
    // A forward whose last sweep would be partly empty takes half the threads where each then
    // holds at most kRaggedForwardVectors vectors (thirteenth session, tilenorm-tune
    // --show-candidates, bf16, M = 2^26 / N, % of the copy ceiling: RMSNorm N = 7168 at 128
    // threads 89.1% against 80.8% at 256, N = 12344 at 256 threads 87.6% against 78.5% at 512;
    // LayerNorm N = 7168 88.5% against 73.4%, N = 2880 at 64 threads 82.9% against 74.2% at 128).
    // Rows that fill their sweeps measured within 2 points either way.
    if (!persistent && row_slots % first_threads != 0 && first_threads / 2 >= narrowest &&
        (row_slots + first_threads / 2 - 1) / (first_threads / 2) <= kRaggedForwardVectors)
      first_threads /= 2;
    for (int threads = first_threads; threads <= 1024; threads *= 2) {
      // A row with more vectors per thread than preferred (just past a power of two) keeps its
      // CTA to itself (RMSNorm bf16 N = 4097 at 128 threads: 77% of the copy ceiling with one
      // row per CTA, 53% with two).
      const bool uneven = threads * vectors_per_thread < chunks;
      // A forward of short rows runs CTAs of 64 threads: more CTAs per SM and a shorter tail
      // measured faster than 256-thread CTAs (same runs: LayerNorm N = 1024 at 32 threads per
      // row, 2 rows per CTA 90.2% against 8 rows 87.8%; N = 2048 at 64 x 1 91.0% against 64 x 4
      // 85.0%; RMSNorm N = 512 at 32 x 2 90.8% against 32 x 8 89.5%).
      // Rows of 128 threads and more take a CTA each (LayerNorm N = 4096 at 128 x 1: 92.4%
      // against 87.1% at 128 x 2, seventh session).
      // A prefetching persistent kernel with at least four vectors per thread shares each
      // barrier among fewer rows in CTAs of 128 threads (same runs, recomputing backwards:
      // LayerNorm N = 1024 at 32 x 4 88.0% against 32 x 8 below 80%; RMSNorm 90.5% against
      // below 86.6%; N = 4096 at 64 x 2 against 64 x 4: 80.6 and 78.0%).
      const std::int64_t per_thread = (chunks + threads - 1) / threads;
      const int cta_threads =
          !persistent ? (threads <= kSmallForwardCta ? kSmallForwardCta : threads)
          : long_prefetch && per_thread >= 4 && threads <= kSmallPersistentCta / 2
              ? kSmallPersistentCta
              : kStackedCtaThreads;
      KernelConfig config = with_rows(threads, vec, RowStorage::registers, cta_threads);
      // Peeled rows of a program that sums across rows take a CTA each (consecutive rows start
      // at different misalignments; see config_problem).
      if (uneven || (peel_rows && persistent)) config.rows_per_cta = 1;
      if (!fits(config)) continue;
      // A backward that reads saved statistics and sums two columns (LayerNorm's dweight and
      // dbias) stages the next row block in shared memory (cp.async), which needs no second set
      // of registers. Measured on the H200 (bf16, tilenorm-tune --show-candidates): LayerNorm N =
      // 2048 at 64 x 4 83.3 -> 88.5% of the copy ceiling, 4096 77.3 -> 80.5%, 8192 67.2 ->
      // 70.2%, 16384 54.8 -> 61.0%; RMSNorm (one column sum) 85.1 -> 83.3% at 4096 and 78.4 ->
      // 77.3% at 8192. Recomputing backwards spilled at the 128 registers a staged kernel asks
      // for. Past kStagedValues / 2 values per thread (four 16-bit vectors) it stages only rows
      // that its threads tile exactly (twenty-eighth session, runs 2 and 4, the benchmark, bf16,
      // M = 2^26 / N: LayerNorm N = 5120 on 128 threads of five vectors 87.7% against 83.4% in
      // registers, 10240 on 256 threads 63.9% against 59.9%; ragged N = 4104 76.9% against
      // 80.5%). With fewer than 4 vectors per thread the next row block is prefetched into
      // registers instead (thirteenth session, tilenorm-tune --show-candidates, bf16, M = 2^26 /
      // N: N = 12288 at 512 threads, 3 vectors each, 72.5% of the copy ceiling against 67.1%
      // staged; N = 2880 at 128 threads 79.2% against 77.6%).
      const std::int64_t values_per_thread = per_thread * vec;
      const bool stageable_values =
          values_per_thread <= kStagedValues / 2 ||
          (values_per_thread <= kStagedValues && per_thread * threads == chunks);
      const bool stages = stages_rows && threads >= kStagedRowThreads &&
                          values_per_thread > kPrefetchValues && stageable_values;
      const bool prefetches_instead = stages && per_thread < kStagedMinVectors;
      const bool stages_recomputed = stages_recomputed_rows && threads >= kStagedRowThreads &&
                                     per_thread * threads == chunks &&
                                     per_thread >= kStagedMinVectors &&
                                     per_thread <= kRecomputeStagedVectors;
      if ((stages && !prefetches_instead) || stages_recomputed) {
        KernelConfig staged = config;
        staged.row_storage = static_cast<int>(RowStorage::staged);
        // (A recomputing backward's rows of at least kSmallPersistentCta threads take a CTA
        // each, as when prefetched below: the tuner's winner at N = 5120.)
        if (stages_recomputed && threads >= kSmallPersistentCta) staged.rows_per_cta = 1;
        if (fits(staged)) return staged;
      }
      // Otherwise a persistent kernel (a backward) prefetches the next row block into registers
      // where they fit (prefetch_fits): it pays where few values per thread leave the SM few
      // loads in flight (N = 128: 71 -> 87% of the copy for LayerNorm), and up to 64 values per
      // thread where it has the registers (recomputing backwards: LayerNorm N = 1024 80.1 ->
      // 88.0%, RMSNorm N = 16384 at 256 threads 75.7% against 68.8% in registers).
      // Rows of at least kSmallPersistentCta threads then take a CTA each (thirteenth session,
      // same method, M = 2^26 / N, 128 threads per row, one row per CTA against two: RMSNorm
      // backward N = 8192 86.2% against 82.0%; recomputing LayerNorm N = 2880 73.1% against 70.2%,
      // 7168 81.7% against 78.1%, 8192 +3.3%; elsewhere within 2 points either way).
      // Peeled rows prefetch at most 4 vectors per thread (thirteenth session, same method, N =
      // 4097 at 128 threads, 5 vectors each, in registers against prefetched: RMSNorm backward
      // 64.8% against 58.4%, recomputing 64.1% against 60.0%; LayerNorm 51.0% against 49.4%).
      const bool peeled_prefetch = !peel_rows || per_thread <= kPeeledPrefetchVectors;
      if (persistent && peeled_prefetch &&
          (prefetches_instead || prefetch_fits(values_per_thread))) {
        KernelConfig prefetched = config;
        prefetched.row_storage = static_cast<int>(RowStorage::prefetched);
        if (threads >= kSmallPersistentCta) prefetched.rows_per_cta = 1;
        if (fits(prefetched)) return prefetched;
      }
      return config;
    }
    // Too large for registers: stash the row in shared memory, else re-read it from L2/HBM.
    // (Long rows of two-phase forwards, and any long row without clusters or too long even for
    // a cluster of 16.)
    const KernelConfig shared = with_rows(1024, vec, RowStorage::shared);
    if (fits(shared)) return shared;
    return with_rows(1024, vec, RowStorage::global);
  }

  const LoweredProgram& program;
  DType io_dtype;
  DType param_dtype;
  std::int64_t n;
  const DeviceLimits& limits;
  bool peel_rows;
  std::int64_t launch_rows;  // the launch's rows, or 0: many
  int vec;
  std::int64_t chunks;
  std::int64_t row_slots;
  bool full_vectors;         // 16-byte row vectors
  bool sixteen_bit_vectors;  // full vectors of 16-bit rows (eight elements)
  bool persistent = false;
  bool can_run_software_clusters = false;  // runs_software_clusters
  bool two_column_sums = false;
  bool narrow_backward = false;
  bool recomputing_backward = false;
  int narrowest = 0;
  bool single_phase = false;
  bool comoments = false;
  bool wide_phase = false;
  bool paired_row_sums = false;  // a phase of two or more reductions
  bool stages_rows = false;
  bool stages_recomputed_rows = false;
};

}  // namespace

int stacked_cluster_rows(const LoweredProgram& program, int threads_per_row,
                         std::int64_t row_vectors) {
  // A recomputing backward stacks rows only up to kStackedClusterRowVectors (longer ones
  // measured slower stacked, above).
  if (!plan_kernels(program).persistent || threads_per_row < kStackedClusterMinThreads ||
      (!reads_saved_statistics(program) && row_vectors > kStackedClusterRowVectors))
    return 1;
  return std::max(1, std::min(kStackedClusterRows, kStackedClusterThreads / threads_per_row));
}

KernelConfig heuristic_config(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                              std::int64_t n, const DeviceLimits& limits, int max_vec,
                              bool peel_rows, std::int64_t launch_rows) {
  const Rows rows(program, io_dtype, param_dtype, n, limits, max_vec, peel_rows, launch_rows);
  // The rules in order, then the launch's rows (fit_to_launch leaves forwards and clusters be).
  auto first_rule = [&]() -> KernelConfig {
    if (std::optional<KernelConfig> mid = rows.mid_rows_one_cta()) return *mid;
    if (std::optional<KernelConfig> reread = rows.rereading_one_cta()) return *reread;
    if (std::optional<KernelConfig> ragged = rows.ragged_comoment_one_cta()) return *ragged;
    if (std::optional<KernelConfig> tuned_short = rows.tuned_short_backward_rows())
      return *tuned_short;
    if (std::optional<KernelConfig> short_rows = rows.short_backward_rows()) return *short_rows;
    // The device's own clusters, if any, else a software cluster where one fits.
    for (const bool software : {false, true}) {
      if (std::optional<KernelConfig> clustered = rows.on_clusters(software)) return *clustered;
    }
    return rows.on_one_cta();
  };
  return rows.fit_to_launch(first_rule());
}

KernelConfig without_heavy_spills(
    const KernelConfig& heuristic,
    const std::function<std::optional<int>(const KernelConfig&)>& spill_bytes) {
  std::optional<int> least_spilled = spill_bytes(heuristic);
  if (!least_spilled) return heuristic;
  auto widened = [](KernelConfig config) {
    config.threads_per_row *= 2;
    config.rows_per_cta = std::max(1, config.rows_per_cta / 2);
    return config;
  };
  // The heuristic's storage on more threads, then rows re-read on the heuristic's threads.
  std::vector<KernelConfig> starts = {widened(heuristic)};
  if (heuristic.row_storage != static_cast<int>(RowStorage::global)) {
    starts.push_back(heuristic);
    starts.back().row_storage = static_cast<int>(RowStorage::global);
  }
  KernelConfig least = heuristic;
  for (KernelConfig config : starts) {
    while (*least_spilled > kToleratedSpillBytes) {
      const std::optional<int> spilled = spill_bytes(config);
      if (!spilled) break;
      if (*spilled < *least_spilled) {
        least = config;
        least_spilled = spilled;
      }
      config = widened(config);
    }
  }
  return least;
}

}  // namespace tilenorm
