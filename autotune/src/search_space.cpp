#include "tilenorm/autotune/search_space.hpp"

#include <algorithm>
#include <boost/hana.hpp>
#include <numeric>
#include <optional>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {
namespace {

namespace hana = boost::hana;

// Pruning thresholds; docs/autotuning.md explains each one.
constexpr std::int64_t kMinBlockThreads = 64;
constexpr std::int64_t kCoalescedBytes = 128;  // one L2 cache line
constexpr std::int64_t kMaxElementsPerThread = 64;
constexpr int kSerialExemptThreadsPerRow = 256;
constexpr std::int64_t kMaxStackedBlockThreads = 256;
constexpr std::int64_t kRegisterDominanceValues = 32;
constexpr std::int64_t kMaxBlockThreads = 1024;
constexpr std::int64_t kClusterMinRowVectors = 1024;  // rows shorter than this need no cluster
constexpr std::int64_t kPipelinedMinRowVectors = 4096;
constexpr std::int64_t kPinMinRowVectors = 2048;
// A forward's persistent grid without a cluster (prefetched rows) is searched from rows of this
// many vectors: it won at some ragged rows of 360-1543 vectors (thirteenth session, bf16:
// LayerNorm N = 2880 on 64 threads x 4 rows 84.8% of the copy ceiling against 82.9% in
// registers, N = 7680 83.2% against 79.3%; RMSNorm N = 7680 89.1% against 87.2%).
constexpr std::int64_t kForwardPrefetchMinRowVectors = 320;

// Why a column_fetch other than the rule's is pruned outside the kernels that can fetch early.
constexpr const char* kColumnFetchScope =
    "column_fetch early or late is searched where a kernel can fetch its column parameters "
    "early: rows of one CTA in registers, not peeled, not persistent";

std::vector<int> powers_of_two(int first, int last) {
  std::vector<int> values;
  for (int v = first; v <= last; v *= 2) values.push_back(v);
  return values;
}

std::vector<int> every_value(int first, int last) {
  std::vector<int> values(last - first + 1);
  std::iota(values.begin(), values.end(), first);
  return values;
}

std::vector<int> domain_for_field(const std::string& field, DType io_dtype, DType param_dtype) {
  if (field == "threads_per_row") return powers_of_two(1, 1024);
  if (field == "rows_per_cta") return powers_of_two(1, 64);
  if (field == "vec") return powers_of_two(1, widest_vec(io_dtype, param_dtype));
  if (field == "ctas_per_row") return every_value(1, kMaxClusterCtas);
  if (field == "row_storage") return every_value(0, kRowStorageCount - 1);
  if (field == "load_pin") return every_value(0, kLoadPinCount - 1);
  if (field == "moments") return every_value(0, kMomentFusionCount - 1);
  if (field == "column_fetch") return every_value(0, kColumnFetchCount - 1);
  throw Error("KernelConfig field '" + field +
              "' has no autotuning domain: add one to domain_for_field() in "
              "autotune/src/search_space.cpp");
}

// Visits every combination of the domains' values, the last field varying fastest (one at a
// time: the product has a million and more).
template <class Struct, class Visit>
void for_each_combination(const std::vector<FieldDomain>& domains, Visit&& visit) {
  for (const auto& domain : domains) {
    if (domain.values.empty()) return;
  }
  std::vector<std::size_t> index(domains.size(), 0);
  for (;;) {
    Struct value{};
    std::size_t field = 0;
    hana::for_each(hana::accessors<Struct>(), [&](auto accessor) {
      hana::second(accessor)(value) = domains[field].values[index[field]];
      ++field;
    });
    visit(value);
    std::size_t digit = domains.size();
    while (digit > 0 && ++index[digit - 1] == domains[digit - 1].values.size()) {
      index[digit - 1] = 0;
      --digit;
    }
    if (digit == 0) return;
  }
}

struct Context {
  const LoweredProgram& program;
  DType io_dtype;
  DType param_dtype;
  std::int64_t n;
  DeviceLimits limits;
  int aligned_vec;  // the widest vec the launches will use (peeled where rows misalign)
  bool peel_rows;   // contiguous rows of N misalign for aligned_vec: the kernels are peeled
  KernelPlan plan;  // plan_kernels(program)
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// `spec` with its rows kept in `storage` instead.
KernelSpec with_storage(KernelSpec spec, RowStorage storage) {
  spec.config.row_storage = static_cast<int>(storage);
  return spec;
}

std::optional<PrunedCandidate> prune(const Context& context, const KernelConfig& config) {
  auto pruned = [&](PruneRule rule, std::string reason) {
    return std::optional<PrunedCandidate>(PrunedCandidate{config, rule, std::move(reason)});
  };
  // Moments other than the rule's are searched where they lower the program another way, in
  // programs that sum across rows, on kernels that fetch the next row block ahead: on a cluster
  // the phase that co-moments save is an exchange that stalls the fetch, and they won at some
  // such configurations and lost at others (seventy-seventh session); on one CTA of prefetched
  // rows it is a CTA barrier, and they gained 1.8-2.7 points at bf16 LayerNorm N = 4096 there
  // (seventy-third session). They also make pipelined slices valid (one phase). Forwards keep
  // the rule's co-moments, which won them (fifth session). First, and cheap: two thirds of the
  // enumerated space ends here.
  if (const auto fusion = static_cast<MomentFusion>(config.moments); fusion != MomentFusion::rule) {
    const std::string choice = "moments " + std::string(moment_fusion_name(fusion));
    if (&with_moments(context.program, fusion) == &context.program) {
      return pruned(PruneRule::moments_scope,
                    choice + " lowers the program as the rule does (moments rule)");
    }
    if (!context.plan.needs_finish()) {
      return pruned(PruneRule::moments_scope,
                    choice + " is searched in programs that sum across rows, not in forwards");
    }
    const auto storage = static_cast<RowStorage>(config.row_storage);
    if (config.ctas_per_row == 1 ? storage != RowStorage::prefetched : !fetches_ahead(storage)) {
      return pruned(PruneRule::moments_scope,
                    choice + " is searched on kernels that fetch the next row block ahead" +
                        " (prefetched rows of one CTA, or any such cluster)");
    }
  }
  // A column fetch other than the rule's: first, and cheap, outside rows of one CTA in
  // registers, which alone can fetch early (can_fetch_columns_early, below).
  if (config.column_fetch != kColumnFetchByRule &&
      (static_cast<RowStorage>(config.row_storage) != RowStorage::registers ||
       config.ctas_per_row != 1)) {
    return pruned(PruneRule::column_fetch_scope, kColumnFetchScope);
  }
  KernelSpec spec{context.io_dtype, context.param_dtype, context.n, config};
  spec.peel_rows = context.peel_rows;
  spec = fit_shared_memory(context.program, spec, context.limits);
  if (auto problem = config_problem(context.program, spec)) {
    return pruned(PruneRule::invalid_config, *problem);
  }
  // A column fetch other than the rule's where the kernel can fetch early: late where the rule
  // fetches early at any M (few parameter vectors), early where it does not at many rows.
  if (const auto fetch = static_cast<ColumnFetch>(config.column_fetch);
      fetch != ColumnFetch::rule) {
    if (!can_fetch_columns_early(context.program, spec)) {
      return pruned(PruneRule::column_fetch_scope, kColumnFetchScope);
    }
    const std::int64_t parameter_vectors = early_column_vectors(context.program, spec);
    if ((parameter_vectors <= kEarlyColumnVectors) == (fetch == ColumnFetch::early)) {
      return pruned(PruneRule::column_fetch_scope,
                    "column_fetch " + std::string(column_fetch_name(fetch)) +
                        " is what the rule does with " + std::to_string(parameter_vectors) +
                        " parameter vectors per thread (column_fetch rule)");
    }
  }
  const std::size_t shared_bytes = dynamic_shared_memory_bytes(context.program, spec);
  if (shared_bytes > context.limits.shared_memory_per_block) {
    return pruned(PruneRule::shared_memory,
                  "needs " + std::to_string(shared_bytes) +
                      " bytes of dynamic shared memory; the device allows " +
                      std::to_string(context.limits.shared_memory_per_block));
  }
  const std::string n_text = std::to_string(context.n);
  if (config.vec > context.aligned_vec) {
    return pruned(PruneRule::misaligned_vec,
                  "contiguous rows of N=" + n_text + " elements allow vec <= " +
                      std::to_string(context.aligned_vec) + ", not " + std::to_string(config.vec));
  }
  if (config.vec < context.aligned_vec) {
    return pruned(PruneRule::narrower_vec,
                  "vec " + std::to_string(config.vec) + " is narrower than the widest usable vec " +
                      std::to_string(context.aligned_vec) +
                      " (the runtime narrows vec itself for misaligned pointers)");
  }
  const std::int64_t vectors_per_row = ceil_div(context.n, config.vec);
  // A program that sums across rows may split them across more CTAs than the device's clusters
  // hold, as a software cluster (its exchange in the workspace; KernelSpec::global_exchange).
  const KernelPlan& plan = context.plan;
  const bool software_clusters = runs_software_clusters(plan, context.limits);
  const std::string no_software_clusters =
      plan.needs_finish() && !software_clusters
          ? " (nor cooperative launches, which software clusters need)"
          : "";
  if (config.ctas_per_row > 1 && !context.limits.clusters() && !software_clusters) {
    return pruned(PruneRule::no_clusters, "ctas_per_row " + std::to_string(config.ctas_per_row) +
                                              ": the device has no thread-block clusters" +
                                              no_software_clusters);
  }
  if (config.ctas_per_row > context.limits.cluster_ctas && !software_clusters) {
    return pruned(PruneRule::no_clusters, "ctas_per_row " + std::to_string(config.ctas_per_row) +
                                              ": the device runs clusters of at most " +
                                              std::to_string(context.limits.cluster_ctas) +
                                              " CTAs" + no_software_clusters);
  }
  // Clusters of 3, 5, 6, 7, 9-15 CTAs are for forward rows that no power of two splits into
  // whole sweeps (bf16 N = 43008: 5376 vectors, 7 x 256 threads x 3): where their slices are
  // ragged too, a power of two does as well, so they are not searched, nor for backwards (both
  // keep the space within its budget), except a backward's prefetched slices of stacked rows
  // (bf16 LayerNorm N = 10240-14336 runs 5-7 CTAs of 64 threads x 4 rows, the heuristic's).
  const bool odd_cluster = !is_power_of_two(config.ctas_per_row);
  const std::int64_t sweep = std::int64_t{config.ctas_per_row} * config.threads_per_row;
  const bool stacked_prefetched =
      config.rows_per_cta > 1 &&
      static_cast<RowStorage>(config.row_storage) == RowStorage::prefetched;
  const bool unstacked_backward = context.plan.needs_finish() && !stacked_prefetched;
  if (odd_cluster && (context.peel_rows || unstacked_backward || vectors_per_row % sweep != 0)) {
    std::string why = "its sweeps of " + std::to_string(sweep) + " vectors do not tile a row of " +
                      std::to_string(vectors_per_row);
    if (context.peel_rows) why = "the rows are peeled";
    if (unstacked_backward)
      why = "the program sums across rows (searched there for prefetched stacked rows)";
    return pruned(PruneRule::ragged_odd_cluster,
                  "a cluster of " + std::to_string(config.ctas_per_row) +
                      " CTAs (not a power of two) is searched for forwards whose rows its sweeps "
                      "tile exactly; " +
                      why);
  }
  if (config.ctas_per_row > 1 &&
      (vectors_per_row < kClusterMinRowVectors ||
       vectors_per_row / config.ctas_per_row < kMinClusterSliceVectors)) {
    return pruned(PruneRule::needless_cluster,
                  "a row of " + std::to_string(vectors_per_row) + " vectors split " +
                      std::to_string(config.ctas_per_row) + " ways: clusters pay from " +
                      std::to_string(kClusterMinRowVectors) + " vectors per row, " +
                      std::to_string(kMinClusterSliceVectors) + " per CTA");
  }
  // A cluster exists to keep a long row on chip: its slices stay in registers, one row each;
  // where they cannot (a backward's slices too large for registers at 1024 threads), they are
  // re-read from global memory, so that a cluster's rows stay in L2 (see the heuristic).
  const bool persistent = plan.persistent;
  const auto storage = static_cast<RowStorage>(config.row_storage);
  const bool cluster_rereads =
      config.ctas_per_row > 1 && config.threads_per_row == 1024 && storage == RowStorage::global &&
      persistent && !rows_fit_registers(context.program, with_storage(spec, RowStorage::registers));
  // The prefetched slices of a backward that reads saved statistics may stack rows per CTA, as
  // many as kStackedClusterRows and kStackedClusterThreads allow (the heuristic's choice) or
  // fewer (bf16 RMSNorm N = 65536 on 16 x 128 threads ran 87.6% of the copy ceiling with two
  // rows per CTA, 85.6% with four; LayerNorm 70.3% and 74.9%), and a recomputing one's on rows
  // of up to 1024 vectors. With co-moments a recomputing backward's statistics share the phase
  // of its sums: one exchange per row block, as where they are read saved, so its slices are
  // searched stacked as that one's at any length (LayerNorm's recompute at bf16 N = 16384 ran
  // 6.5 points below its saved backward, which stacks two rows there; seventy-ninth session).
  // Two rows on clusters of a power of two: more kept the space within its per-shape budget.
  constexpr int kStackedRecomputeRows = 2;
  const bool one_exchange_recompute = config.moments == static_cast<int>(MomentFusion::on) &&
                                      persistent && !odd_cluster &&
                                      config.threads_per_row >= kStackedClusterMinThreads;
  const int stackable_rows = std::max(
      stacked_cluster_rows(context.program, config.threads_per_row, vectors_per_row),
      one_exchange_recompute
          ? std::min(kStackedRecomputeRows, kStackedClusterThreads / config.threads_per_row)
          : 1);
  const bool stacked_slices =
      storage == RowStorage::prefetched && config.rows_per_cta <= stackable_rows;
  if (config.ctas_per_row > 1 && !cluster_rereads &&
      (!rows_in_registers(storage) || (config.rows_per_cta > 1 && !stacked_slices))) {
    return pruned(PruneRule::needless_cluster,
                  "a cluster of " + std::to_string(config.ctas_per_row) +
                      " CTAs keeps its rows in registers, one per CTA (a backward's prefetched "
                      "slices up to " +
                      std::to_string(kStackedClusterRows) + " in " +
                      std::to_string(kStackedClusterThreads) + " threads), not " +
                      std::to_string(config.rows_per_cta) + " rows in " +
                      std::string(row_storage_name(storage)) + " storage");
  }
  // Column partial sums kept in registers past the budget spill whatever the row storage
  // (ptxas drops the tuner's candidates for it after compiling them: rows of one CTA at N =
  // 262144 took 21 of the 22 s of tuning RMSNorm's bf16 backward, to spill 11-29 KiB each).
  const std::int64_t partial_registers = column_partial_registers(context.program, spec);
  const std::int64_t budget = register_budget(spec);
  if (partial_registers > budget) {
    return pruned(PruneRule::spilled_partials,
                  "its column partial sums take " + std::to_string(partial_registers) +
                      " registers per thread, over the budget of " +
                      std::to_string(std::max<std::int64_t>(budget, 0)));
  }
  // Pipelined slices are searched where clusters have won, rows from 4096 vectors (H200,
  // 2026-11-30: below that one CTA per row won every shape), to keep the space in budget.
  if (storage == RowStorage::pipelined && vectors_per_row < kPipelinedMinRowVectors) {
    return pruned(PruneRule::needless_cluster, "pipelined slices are searched from rows of " +
                                                   std::to_string(kPipelinedMinRowVectors) +
                                                   " vectors, not " +
                                                   std::to_string(vectors_per_row));
  }
  // A forward's slices in plain registers wait out every exchange with nothing in flight; where
  // a pipelined twin is valid (one reduction phase) they are not searched (H200, bf16,
  // 2026-11-30: forwards on clusters in registers measured 14-17 points below prefetched at N =
  // 65536-262144; a backward's were within a point of it, so those stay).
  if (config.ctas_per_row > 1 && !persistent && storage == RowStorage::registers) {
    if (!config_problem(context.program, with_storage(spec, RowStorage::pipelined))) {
      return pruned(PruneRule::dominated_storage,
                    "a cluster's slices in registers wait out every exchange; pipelined, valid "
                    "here, overlaps it with the next row block");
    }
  }
  if (fetches_ahead(storage) && config.ctas_per_row == 1 && !persistent &&
      vectors_per_row < kForwardPrefetchMinRowVectors) {
    return pruned(PruneRule::forward_prefetch,
                  "without sums across rows, fetching ahead (prefetched or staged, a persistent "
                  "grid) is searched with a cluster, or from rows of " +
                      std::to_string(kForwardPrefetchMinRowVectors) + " vectors");
  }
  // Staged rows won where the next row's loads had no registers to land in: backwards of one
  // CTA per row (H200, bf16, 2026-11-30: LayerNorm N = 4096-16384 +3 to +6 points of the copy
  // ceiling). Where a thread holds at most 16 values of a row input, prefetched has the
  // registers; rows within a warp (short rows, all of which prefetch or stay in registers) are
  // not searched. On a cluster, a thread's slice of a row input must be kStagedSliceBytes or more
  // (the fp32 slices of N = 262144, whose prefetch does not fit in registers).
  const std::int64_t slice_vectors_per_thread =
      ceil_div(vectors_per_row, std::int64_t{config.threads_per_row} * config.ctas_per_row);
  const std::int64_t values_per_thread = slice_vectors_per_thread * config.vec;
  const bool staged_slices =
      config.ctas_per_row == 1
          ? values_per_thread > kPrefetchValues && config.threads_per_row >= kStagedRowThreads
          : values_per_thread * static_cast<std::int64_t>(dtype_size(context.io_dtype)) >=
                kStagedSliceBytes;
  if (storage == RowStorage::staged && (!persistent || !staged_slices)) {
    return pruned(PruneRule::staged_scope,
                  "staged rows are searched only in backwards (sums across rows): of one CTA per "
                  "row from " +
                      std::to_string(kStagedRowThreads) + " threads per row and more than " +
                      std::to_string(kPrefetchValues) + " values per thread, on a cluster from " +
                      std::to_string(kStagedSliceBytes) + " bytes of a row input per thread");
  }
  const std::int64_t threads = std::int64_t{config.threads_per_row} * config.rows_per_cta;
  if (threads < kMinBlockThreads) {
    return pruned(PruneRule::small_block,
                  std::to_string(threads) +
                      " threads per CTA: below 64, the 32-CTAs-per-SM limit caps occupancy");
  }
  // No exception is needed for tiny rows: rows_per_cta reaches 64, so even one thread per row
  // still fills a 64-thread CTA.
  const std::int64_t row_threads = std::int64_t{config.threads_per_row} * config.ctas_per_row;
  if (row_threads > 2 * vectors_per_row) {
    return pruned(PruneRule::idle_threads, std::to_string(row_threads - vectors_per_row) + " of " +
                                               std::to_string(row_threads) +
                                               " threads per row idle (the row has " +
                                               std::to_string(vectors_per_row) + " vectors)");
  }
  const std::int64_t element_bytes = static_cast<std::int64_t>(dtype_size(context.io_dtype));
  const std::int64_t bytes_per_step =
      std::int64_t{config.threads_per_row} * config.vec * element_bytes;
  if (bytes_per_step < kCoalescedBytes && bytes_per_step < context.n * element_bytes) {
    return pruned(PruneRule::uncoalesced,
                  "a row's " + std::to_string(config.threads_per_row) + " threads read " +
                      std::to_string(bytes_per_step) +
                      " contiguous bytes per step, less than a 128-byte line");
  }
  const std::int64_t vectors_per_thread = ceil_div(vectors_per_row, row_threads);
  // Rows too long for four vectors per thread on 16 CTAs of 512 threads may take eight, and so
  // may a forward's prefetched slices of full 16-byte vectors that tile the row exactly (the
  // heuristic's choice for long rows: see heuristic_config); on a cluster other than a power of
  // two, five to eight (bf16 N = 51200: 6400 vectors on 5 x 256 threads x 5).
  const std::int64_t cluster_max_vectors =
      vectors_per_row > kMaxClusterCtas * kLongSliceThreads * kClusterVectorsPerThread
          ? 2 * kClusterVectorsPerThread
          : kClusterVectorsPerThread;
  const bool long_forward_slices =
      !persistent && config.vec * element_bytes == 16 && storage == RowStorage::prefetched &&
      (odd_cluster ? vectors_per_thread <= 2 * kClusterVectorsPerThread
                   : vectors_per_thread == 2 * kClusterVectorsPerThread) &&
      row_threads * vectors_per_thread == vectors_per_row;
  if (config.ctas_per_row > 1 && vectors_per_thread > cluster_max_vectors && !long_forward_slices) {
    return pruned(PruneRule::needless_cluster,
                  std::to_string(vectors_per_thread) +
                      " vectors per thread in a cluster: a cluster is for short slices (at most " +
                      std::to_string(cluster_max_vectors) + " per thread)");
  }
  const std::int64_t elements_per_thread = vectors_per_thread * config.vec;
  if (elements_per_thread > kMaxElementsPerThread &&
      config.threads_per_row < kSerialExemptThreadsPerRow) {
    return pruned(PruneRule::serial_row,
                  "each thread walks " + std::to_string(elements_per_thread) +
                      " elements of its row serially (limit 64 below 256 threads per row)");
  }
  if (config.rows_per_cta > 1 && threads > kMaxStackedBlockThreads && config.ctas_per_row == 1) {
    return pruned(PruneRule::stacked_rows,
                  "stacks " + std::to_string(config.rows_per_cta) + " rows into a " +
                      std::to_string(threads) +
                      "-thread CTA; past 256 threads more rows per CTA only coarsen scheduling");
  }
  // A pin on or off that builds what the rule builds is the same kernel: searched once. The
  // other choice is searched where ptxas was seen to issue the next row block's loads late:
  // clusters of 16 on rows of kPinMinRowVectors and more (scripts/sass-scan, bf16 N = 16384 and
  // up, fifty-sixth session), which keeps a backward within its candidate budget.
  if (static_cast<LoadPin>(config.load_pin) != LoadPin::rule) {
    const std::string pin(load_pin_name(static_cast<LoadPin>(config.load_pin)));
    KernelSpec by_rule = spec;
    by_rule.config.load_pin = kPinByRule;
    if (next_row_loads_pin(context.program, spec) == next_row_loads_pin(context.program, by_rule)) {
      return pruned(PruneRule::load_pin_scope,
                    "load_pin " + pin + " builds what the rule builds here (load_pin rule)");
    }
    if (vectors_per_row < kPinMinRowVectors || config.ctas_per_row != kMaxClusterCtas) {
      return pruned(PruneRule::load_pin_scope,
                    "load_pin " + pin + " is searched on clusters of " +
                        std::to_string(kMaxClusterCtas) + " and rows of " +
                        std::to_string(kPinMinRowVectors) + " vectors and more, not " +
                        std::to_string(config.ctas_per_row) + " CTAs and " +
                        std::to_string(vectors_per_row) + " vectors");
    }
  }
  if (!rows_in_registers(storage)) {
    const std::int64_t values = vectors_per_thread * config.vec * row_input_count(context.program);
    // Except a forward's global storage in CTAs of 64 threads or more, of two vectors or more
    // each, on a GPU that holds 2048 threads per SM: in registers they hold fewer CTAs per SM
    // than re-reading their rows at 32 registers (H200, bf16 RMSNorm N = 32768 on 1024 threads:
    // 3.95 TB/s against 3.75 for the cluster the heuristic took before; fp32 RMSNorm 4096 on 512
    // threads 98.8% of the copy ceiling against 96.4% for 256 threads in registers; bf16
    // LayerNorm 4096 on 128 threads 94.7% against 91.5%; the heuristic's rereading_one_cta).
    const bool more_ctas_by_rereading =
        storage == RowStorage::global && !persistent && threads >= kMaxBlockThreads / 16 &&
        vectors_per_thread >= 2 &&
        context.limits.threads_per_multiprocessor >= 2 * kMaxBlockThreads;
    if (values <= kRegisterDominanceValues && !more_ctas_by_rereading &&
        !config_problem(context.program, with_storage(spec, RowStorage::registers))) {
      return pruned(PruneRule::dominated_storage,
                    "the row fits registers with " + std::to_string(values) +
                        " values per thread, which beats " +
                        std::string(row_storage_name(storage)) + " storage");
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view prune_rule_name(PruneRule rule) {
  switch (rule) {
    case PruneRule::invalid_config:
      return "invalid config";
    case PruneRule::shared_memory:
      return "shared memory over limit";
    case PruneRule::misaligned_vec:
      return "vec misaligned for N";
    case PruneRule::narrower_vec:
      return "narrower vec";
    case PruneRule::no_clusters:
      return "cluster the device cannot run";
    case PruneRule::needless_cluster:
      return "needless cluster";
    case PruneRule::forward_prefetch:
      return "forward prefetch without cluster";
    case PruneRule::staged_scope:
      return "staged outside a backward";
    case PruneRule::small_block:
      return "CTA under 64 threads";
    case PruneRule::idle_threads:
      return "idle threads";
    case PruneRule::uncoalesced:
      return "uncoalesced";
    case PruneRule::serial_row:
      return "serial row walk";
    case PruneRule::stacked_rows:
      return "rows stacked past 256 threads";
    case PruneRule::dominated_storage:
      return "dominated storage";
    case PruneRule::spilled_partials:
      return "partial sums spill";
    case PruneRule::ragged_odd_cluster:
      return "ragged odd-sized cluster";
    case PruneRule::load_pin_scope:
      return "load pin outside its scope";
    case PruneRule::moments_scope:
      return "moments outside their scope";
    case PruneRule::column_fetch_scope:
      return "column fetch outside its scope";
  }
  return "?";
}

std::vector<FieldDomain> search_domains(DType io_dtype, DType param_dtype) {
  std::vector<FieldDomain> domains;
  hana::for_each(hana::accessors<KernelConfig>(), [&](auto accessor) {
    std::string field = hana::to<const char*>(hana::first(accessor));
    std::vector<int> values = domain_for_field(field, io_dtype, param_dtype);
    domains.push_back({std::move(field), std::move(values)});
  });
  return domains;
}

int widest_row_aligned_vec(DType io_dtype, DType param_dtype, std::int64_t n) {
  int vec = widest_vec(io_dtype, param_dtype);
  while (vec > 1 && n % vec != 0) vec /= 2;
  return vec;
}

namespace {

// How launches on contiguous rows of N run: kernels peel misaligned rows (alignment peeling),
// so they keep the widest vector, except short rows of programs that sum across rows, which
// narrow it to what N aligns to (peels_rows).
struct ContiguousRows {
  int vec;
  bool peel_rows;
};
ContiguousRows contiguous_rows(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                               std::int64_t n) {
  const int row_aligned = widest_row_aligned_vec(io_dtype, param_dtype, n);
  const int widest = widest_vec(io_dtype, param_dtype);
  const bool peel = row_aligned < widest && peels_rows(program, n, widest);
  return {peel ? widest : row_aligned, peel};
}

}  // namespace

bool SearchSpace::contains(const KernelConfig& config) const {
  return std::any_of(candidates.begin(), candidates.end(),
                     [&](const Candidate& candidate) { return candidate.config == config; });
}

KernelConfig contiguous_rows_heuristic(const LoweredProgram& program, DType io_dtype,
                                       DType param_dtype, std::int64_t n,
                                       const DeviceLimits& limits, std::int64_t launch_rows) {
  const ContiguousRows rows = contiguous_rows(program, io_dtype, param_dtype, n);
  return heuristic_config(program, io_dtype, param_dtype, n, limits, rows.vec, rows.peel_rows,
                          launch_rows);
}

namespace {

// The survivors, and with `keep_pruned` every pruned configuration with its reason.
SearchSpace search(const LoweredProgram& program, DType io_dtype, DType param_dtype, std::int64_t n,
                   const DeviceLimits& limits, bool keep_pruned) {
  if (n < 1) throw Error("search space: N must be at least 1, got " + std::to_string(n));
  const ContiguousRows rows = contiguous_rows(program, io_dtype, param_dtype, n);
  const Context context{program, io_dtype, param_dtype,    n,
                        limits,  rows.vec, rows.peel_rows, plan_kernels(program)};
  SearchSpace space;
  for_each_combination<KernelConfig>(
      search_domains(io_dtype, param_dtype), [&](const KernelConfig& config) {
        if (auto pruned = prune(context, config)) {
          if (keep_pruned) space.pruned.push_back(std::move(*pruned));
          return;
        }
        KernelSpec spec{io_dtype, param_dtype, n, config};
        spec.peel_rows = context.peel_rows;
        spec = fit_shared_memory(program, spec, limits);
        space.candidates.push_back({config, dynamic_shared_memory_bytes(program, spec)});
      });
  return space;
}

}  // namespace

SearchSpace explore_search_space(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                                 std::int64_t n, const DeviceLimits& limits) {
  return search(program, io_dtype, param_dtype, n, limits, true);
}

std::vector<Candidate> build_search_space(const LoweredProgram& program, DType io_dtype,
                                          DType param_dtype, std::int64_t n,
                                          const DeviceLimits& limits) {
  return search(program, io_dtype, param_dtype, n, limits, false).candidates;
}

std::string short_config(const KernelConfig& config) {
  std::string text;
  hana::for_each(hana::accessors<KernelConfig>(), [&](auto accessor) {
    const std::string field = hana::to<const char*>(hana::first(accessor));
    const int value = hana::second(accessor)(config);
    if (field == "ctas_per_row" && value == 1) return;       // no cluster: the common case, unsaid
    if (field == "load_pin" && value == kPinByRule) return;  // likewise
    if (field == "moments" && value == kMomentsByRule) return;
    if (field == "column_fetch" && value == kColumnFetchByRule) return;
    if (!text.empty()) text += ' ';
    if (field == "row_storage") {
      text += row_storage_name(static_cast<RowStorage>(value));
      return;
    }
    if (field == "ctas_per_row") {
      text += "cluster=" + std::to_string(value);
      return;
    }
    if (field == "load_pin" && value >= 0 && value < kLoadPinCount) {
      text += "pin=" + std::string(load_pin_name(static_cast<LoadPin>(value)));
      return;
    }
    if (field == "moments" && value >= 0 && value < kMomentFusionCount) {
      text += "moments=" + std::string(moment_fusion_name(static_cast<MomentFusion>(value)));
      return;
    }
    if (field == "column_fetch" && value >= 0 && value < kColumnFetchCount) {
      text += "fetch=" + std::string(column_fetch_name(static_cast<ColumnFetch>(value)));
      return;
    }
    std::string initials;
    for (std::size_t i = 0; i < field.size(); ++i) {
      if (i == 0 || field[i - 1] == '_') initials += field[i];
    }
    text += (initials.size() > 1 ? initials : field) + "=" + std::to_string(value);
  });
  return text;
}

}  // namespace tilenorm
